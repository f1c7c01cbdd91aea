package zfs

import (
	"errors"
	"slices"
	"testing"
)

func TestParsePoolStatus(t *testing.T) {
	for _, test := range []struct {
		name string
		out  string
		want PoolStatus
	}{
		{"a healthy mirror", `  pool: hpool
 state: ONLINE
config:

	NAME        STATE     READ WRITE CKSUM
	hpool       ONLINE       0     0     0
	  mirror-0  ONLINE       0     0     0
	    /tmp/a  ONLINE       0     0     0
	    /tmp/b  ONLINE       0     0     0

errors: No known data errors
`, PoolStatus{Name: "hpool", State: "ONLINE"}},
		{"a mirror with a vdev offline", `  pool: hpool
 state: DEGRADED
status: One or more devices has been taken offline by the administrator.
	Sufficient replicas exist for the pool to continue functioning in a
	degraded state.
action: Online the device using 'zpool online' or replace the device with
	'zpool replace'.
config:

	NAME        STATE     READ WRITE CKSUM
	hpool       DEGRADED     0     0     0
	  mirror-0  DEGRADED     0     0     0
	    /tmp/a  ONLINE       0     0     0
	    /tmp/b  OFFLINE      0     0     0

errors: No known data errors
`, PoolStatus{Name: "hpool", State: "DEGRADED", Unhealthy: []string{"mirror-0 DEGRADED", "/tmp/b OFFLINE"}}},
		{"checksum errors repaired by a scrub, and data errors elsewhere", `  pool: hpool
 state: ONLINE
status: One or more devices has experienced an unrecoverable error.
  scan: scrub repaired 5242880 in 00:00:01 with 0 errors on Wed Nov 25 03:00:00 2026
config:

	NAME        STATE     READ WRITE CKSUM
	hpool       ONLINE       0     0     0
	  mirror-0  ONLINE       0     0     0
	    /tmp/a  ONLINE       0     0     0
	    /tmp/b  ONLINE       1     0   163  (repairing)
	logs
	  /tmp/log  ONLINE       0     2     0

errors: 3 data errors, use '-v' for a list
`, PoolStatus{Name: "hpool", State: "ONLINE", ReadErrors: 1, WriteErrors: 2, ChecksumErrors: 163, DataErrors: 3}},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := parsePoolStatus("hpool", []byte(test.out))
			if err != nil {
				t.Fatal(err)
			}
			if got.State != test.want.State || got.ReadErrors != test.want.ReadErrors || got.WriteErrors != test.want.WriteErrors ||
				got.ChecksumErrors != test.want.ChecksumErrors || got.DataErrors != test.want.DataErrors ||
				!slices.Equal(got.Unhealthy, test.want.Unhealthy) {
				t.Errorf("got %+v, want %+v", got, test.want)
			}
		})
	}
	for _, bad := range []string{"", "  pool: hpool\n state: ONLINE\n", "garbage\n"} {
		if _, err := parsePoolStatus("hpool", []byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: got %v, want ErrInvalid", bad, err)
		}
	}
}
