package daemon

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func TestPoolPropertiesAreAllowedByTheOperatorOnly(t *testing.T) {
	required := []string{"--parent-dataset", "tank/csi", "--node-id", "node-1"}
	tests := []struct {
		name    string
		env     string
		args    []string
		want    []string
		wantErr string
	}{
		{"none by default", "", nil, nil, ""},
		{"repeated flags", "", []string{"--allow-pool-properties", "dedup", "--allow-pool-properties", "copies"}, []string{"dedup", "copies"}, ""},
		{"the environment, comma-separated", "dedup, special_small_blocks", nil, []string{"dedup", "special_small_blocks"}, ""},
		{"the flag wins over the environment", "dedup", []string{"--allow-pool-properties", "copies"}, []string{"copies"}, ""},
		{"a name that is no pool property stops the daemon", "dedupe", nil, nil, "--allow-pool-properties"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			t.Setenv("ZFS_CSI_ALLOW_POOL_PROPERTIES", test.env)
			opts, err := parseOptions("test", append(slices.Clone(required), test.args...), io.Discard)
			if test.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), test.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, test.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(opts.AllowedPoolProperties, test.want) {
				t.Errorf("allowed %q, want %q", opts.AllowedPoolProperties, test.want)
			}
		})
	}
}
