//go:build e2e

package tests

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// The fake's figures for refreservation=auto (zfstest.ThickReservations)
// are what this ZFS reserves: each zvol is made thick, as `zfs create -V`
// without -s makes it, one at a time (the largest take most of the pool).
func TestThickReservationsAreWhatZFSReserves(t *testing.T) {
	parent := testParent(t)
	for _, figure := range zfstest.ThickReservations {
		name := fmt.Sprintf("%s/v-%d-%d", parent, figure.VolSize, figure.VolBlockSize)
		mustRun(t, "zfs", "create", "-V", strconv.FormatUint(figure.VolSize, 10),
			"-o", "volblocksize="+strconv.FormatUint(figure.VolBlockSize, 10), name)
		if got := zfsGet(t, "refreservation", name); got != strconv.FormatUint(figure.RefReservation, 10) {
			t.Errorf("volsize %d, volblocksize %d: zfs get -Hp refreservation says %s, zfstest.ThickReservations %d",
				figure.VolSize, figure.VolBlockSize, got, figure.RefReservation)
		}
		destroyZvol(t, name)
	}
}

// The fake gives a zvol made without a volblocksize 16 KiB unless it plays
// OpenZFS 2.1 (8 KiB); the guest runs 2.2 or later.
func TestANewZvolGetsSixteenKiBBlocks(t *testing.T) {
	parent := testParent(t)
	mustRun(t, "zfs", "create", "-s", "-V", "64M", parent+"/default")
	if got := zfsGet(t, "volblocksize", parent+"/default"); got != "16384" {
		t.Errorf("volblocksize %s, the fake gives 16384 when it plays OpenZFS 2.2 and later", got)
	}
}
