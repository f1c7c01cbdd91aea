package rules

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBounded(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	tests := []struct {
		name, in, want string
	}{
		{"a string within the bound is kept whole", "node-a:tank/csi/pvc-1", "node-a:tank/csi/pvc-1"},
		{"a string of exactly the bound is kept whole", long[:MaxEchoedBytes], long[:MaxEchoedBytes]},
		{"a longer string keeps its start and says how long it was", long, long[:MaxEchoedBytes] + "…(1048576 bytes)"},
		{"a cut never splits a UTF-8 character", strings.Repeat("a", MaxEchoedBytes-1) + "é" + long,
			strings.Repeat("a", MaxEchoedBytes-1) + "…(1048833 bytes)"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			got := Bounded(test.in)
			if got != test.want {
				t.Errorf("Bounded = %.40q… (%d bytes), want %.40q… (%d bytes)", got, len(got), test.want, len(test.want))
			}
			if !utf8.ValidString(got) {
				t.Errorf("Bounded made invalid UTF-8")
			}
		})
	}
}
