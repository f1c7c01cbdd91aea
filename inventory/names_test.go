package inventory_test

import (
	"testing"

	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
)

// Reports show the names the CO gave, not how the driver stores them: a
// tab, a line feed or "-" is kept quoted in the property (rules.EncodeName).
func TestReadShowsNamesAsTheCOGaveThem(t *testing.T) {
	f := wiringtest.New(t)
	for _, name := range []string{"a\tb", "-", "line\nfeed"} {
		volumeID := f.CreateVolume(name, 1<<30, wiringtest.Mount(""), nil)
		snapshotID := f.Snapshot(name, volumeID)
		inv := f.Read()
		volumeByName(t, inv, name)
		found := false
		for _, snapshot := range inv.Snapshots {
			found = found || snapshot.ID == snapshotID && snapshot.CSIName == name
		}
		if !found {
			t.Errorf("snapshot %s is not listed as %q: %+v", snapshotID, name, inv.Snapshots)
		}
	}
}
