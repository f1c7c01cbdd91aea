//go:build e2e

package tests

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
)

// Names the spec allows that `zfs list -H` could not carry as they are
// (tabs separate its columns, newlines its rows, "-" is an unset property),
// next to ones that look like how the driver stores those.
var specNames = []string{
	strings.Repeat("ボ", 42) + "ü", "a\tb", "a\nb", "a\rb", "\t", "-", "  spaced  ", `"a\tb"`, "pvc-plain",
}

// listNames is what real ZFS prints for `zfs list -H -o name,<property>`
// under root, as dataset → value, read without trimming a byte; a row that
// does not split into two columns fails the test.
func listNames(t *testing.T, root, types, property string) map[string]string {
	t.Helper()
	out, err := exec.Command("zfs", "list", "-H", "-r", "-t", types, "-o", "name,"+property, root).Output()
	if err != nil {
		t.Fatalf("zfs list %s: %v", root, err)
	}
	values := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		fields := strings.Split(line, "\t")
		if len(fields) != 2 {
			t.Fatalf("zfs list -H printed a row of %d columns: %q", len(fields), line)
		}
		values[fields[0]] = fields[1]
	}
	return values
}

// Every name the spec allows makes a volume and a snapshot on real ZFS; the
// names read back from `zfs list -H` are the names; retries, also after a
// restart, get the same volume and snapshot; the listings keep working.
func TestNamesTheSpecAllowsRoundTripThroughZFS(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	var volumeIDs, snapshotIDs []string
	for _, name := range specNames {
		volume := d.createVolume(volumeRequest(name, 16<<20, mountCap(""), nil))
		if again := d.createVolume(volumeRequest(name, 16<<20, mountCap(""), nil)); again.GetVolumeId() != volume.GetVolumeId() {
			t.Errorf("%q: CreateVolume made %s, its retry %s", name, volume.GetVolumeId(), again.GetVolumeId())
		}
		snapshot := d.createSnapshot(name, volume.GetVolumeId())
		if again := d.createSnapshot(name, volume.GetVolumeId()); again.GetSnapshotId() != snapshot.GetSnapshotId() {
			t.Errorf("%q: CreateSnapshot made %s, its retry %s", name, snapshot.GetSnapshotId(), again.GetSnapshotId())
		}
		volumeIDs, snapshotIDs = append(volumeIDs, volume.GetVolumeId()), append(snapshotIDs, snapshot.GetSnapshotId())
	}
	volumeNames := listNames(t, parent, "filesystem,volume", "zfs.csi.dev:csi-name")
	snapshotNames := listNames(t, parent, "snapshot", "zfs.csi.dev:snapshot-name")
	for i, name := range specNames {
		if got := rules.DecodeName(volumeNames[datasetOf(t, volumeIDs[i])]); got != name {
			t.Errorf("%s: csi-name reads back as %q, want %q", volumeIDs[i], got, name)
		}
		snapshot := strings.TrimPrefix(snapshotIDs[i], nodeID+":")
		if got := rules.DecodeName(snapshotNames[snapshot]); got != name {
			t.Errorf("%s: snapshot-name reads back as %q, want %q", snapshot, got, name)
		}
	}

	d.restart()
	for i, name := range specNames {
		if again := d.createVolume(volumeRequest(name, 16<<20, mountCap(""), nil)); again.GetVolumeId() != volumeIDs[i] {
			t.Errorf("%q: CreateVolume made %s, its retry after a restart %s", name, volumeIDs[i], again.GetVolumeId())
		}
		if again := d.createSnapshot(name, volumeIDs[i]); again.GetSnapshotId() != snapshotIDs[i] {
			t.Errorf("%q: CreateSnapshot made %s, its retry after a restart %s", name, snapshotIDs[i], again.GetSnapshotId())
		}
	}
	volumes, err := d.controller.ListVolumes(ctx(t), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snapshots, err := d.controller.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listedVolumes, listedSnapshots []string
	for _, entry := range volumes.GetEntries() {
		listedVolumes = append(listedVolumes, entry.GetVolume().GetVolumeId())
	}
	for _, entry := range snapshots.GetEntries() {
		listedSnapshots = append(listedSnapshots, entry.GetSnapshot().GetSnapshotId())
	}
	for i := range specNames {
		if !slices.Contains(listedVolumes, volumeIDs[i]) || !slices.Contains(listedSnapshots, snapshotIDs[i]) {
			t.Errorf("ListVolumes %v, ListSnapshots %v; want %s and %s among them", listedVolumes, listedSnapshots, volumeIDs[i], snapshotIDs[i])
		}
	}
}
