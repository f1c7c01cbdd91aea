package envflag

import (
	"os"
	"testing"
)

func TestEnvBool(t *testing.T) {
	tests := []struct {
		name, value string
		set         bool
		want        bool
	}{
		{"unset keeps the default", "", false, true},
		{"false turns it off", "false", true, false},
		{"0 turns it off", "0", true, false},
		{"a typo keeps the default", "flase", true, true},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if test.set {
				t.Setenv("ZFS_CSI_TEST_BOOL", test.value)
			} else {
				os.Unsetenv("ZFS_CSI_TEST_BOOL")
			}
			if got := Bool("ZFS_CSI_TEST_BOOL", true); got != test.want {
				t.Errorf("Bool = %t, want %t", got, test.want)
			}
		})
	}
}
