//go:build e2e

package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	gozfs "github.com/mistifyio/go-zfs/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestVolumesGetThePropertiesAsked(t *testing.T) {
	d := startDriver(t, testParent(t))
	dataset := datasetOf(t, d.createVolume(volumeRequest("props-fs", 64<<20, mountCap(""), map[string]string{
		"zfs.compression": "zstd", "zfs.recordsize": "16K", "zfs.com.example:team": "storage",
		"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "db",
	})).GetVolumeId())
	want := map[string]string{
		"compression": "zstd", "recordsize": "16384", "com.example:team": "storage", "mountpoint": "legacy",
		"refquota": strconv.Itoa(64 << 20), "refreservation": strconv.Itoa(64 << 20),
		"zfs.csi.dev:managed": "true", "zfs.csi.dev:csi-name": "props-fs",
		"zfs.csi.dev:pvc-name": "data", "zfs.csi.dev:pvc-namespace": "db",
	}
	for property, value := range want {
		if got := zfsGet(t, property, dataset); got != value {
			t.Errorf("%s of %s is %q, want %q", property, dataset, got, value)
		}
	}
	zvol := datasetOf(t, d.createVolume(volumeRequest("props-zvol", 10<<20+1, blockCap(), map[string]string{
		"thin": "true", "volblocksize": "64K", "zfs.compression": "lz4",
	})).GetVolumeId())
	for property, value := range map[string]string{"volsize": strconv.Itoa(10<<20 + 64<<10), "volblocksize": "65536",
		"refreservation": "0", "compression": "lz4", "type": "volume"} {
		if got := zfsGet(t, property, zvol); got != value {
			t.Errorf("%s of %s is %q, want %q", property, zvol, got, value)
		}
	}
	if thick := datasetOf(t, d.createVolume(volumeRequest("thick-zvol", 16<<20, blockCap(), nil)).GetVolumeId()); zfsGet(t, "refreservation", thick) == "0" {
		t.Error("a zvol without thin has no reservation")
	}
}

func TestRefquotaIsEnforced(t *testing.T) {
	d := startDriver(t, testParent(t))
	dataset := datasetOf(t, d.createVolume(volumeRequest("small", 16<<20, mountCap(""), nil)).GetVolumeId())
	dir := mountDataset(t, dataset)
	out, err := exec.Command("dd", "if=/dev/urandom", "of="+filepath.Join(dir, "big"), "bs=1M", "count=48", "conv=fsync").CombinedOutput()
	if err == nil {
		t.Fatalf("writing 48 MiB into a 16 MiB volume succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "quota") {
		t.Errorf("dd failed, but not on the quota:\n%s", out)
	}
	if info, _ := os.Stat(filepath.Join(dir, "big")); info != nil && info.Size() > 17<<20 {
		t.Errorf("wrote %d bytes past a 16 MiB refquota", info.Size())
	}
}

func TestCloneSharesItsSnapshotsData(t *testing.T) {
	d := startDriver(t, testParent(t))
	source := d.createVolume(volumeRequest("source", 64<<20, mountCap(""), nil))
	dir := mountDataset(t, datasetOf(t, source.GetVolumeId()))
	mustRun(t, "dd", "if=/dev/urandom", "of="+filepath.Join(dir, "data"), "bs=1M", "count=8", "conv=fsync")
	written := mustRun(t, "sha256sum", filepath.Join(dir, "data"))
	mustRun(t, "umount", dir)

	snapshot := d.createSnapshot("snap", source.GetVolumeId())
	if snapshot.GetSizeBytes() < 8<<20 || !snapshot.GetReadyToUse() {
		t.Errorf("snapshot %v", snapshot)
	}
	clone := d.createVolume(&csi.CreateVolumeRequest{Name: "clone", VolumeCapabilities: []*csi.VolumeCapability{mountCap("")},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot.GetSnapshotId()}}}})
	cloneDataset := datasetOf(t, clone.GetVolumeId())
	cloneRow := zfsDataset(t, cloneDataset)
	if origin := cloneRow.Origin; "e2e-node:"+origin != snapshot.GetSnapshotId() {
		t.Errorf("origin %q, snapshot %q", origin, snapshot.GetSnapshotId())
	}
	if used := cloneRow.Usedbydataset; used > 1<<20 {
		t.Errorf("the clone uses %d bytes of its own: it does not share its snapshot's blocks", used)
	}
	cloneDir := mountDataset(t, cloneDataset)
	if got := mustRun(t, "sha256sum", filepath.Join(cloneDir, "data")); strings.Fields(got)[0] != strings.Fields(written)[0] {
		t.Errorf("clone reads %s, source wrote %s", got, written)
	}
}

func TestSnapshotWithClonesIsDestroyedDeferred(t *testing.T) {
	d := startDriver(t, testParent(t))
	source := d.createVolume(volumeRequest("source", 16<<20, mountCap(""), nil))
	snapshot := d.createSnapshot("snap", source.GetVolumeId())
	clone := d.createVolume(&csi.CreateVolumeRequest{Name: "clone", VolumeCapabilities: []*csi.VolumeCapability{mountCap("")},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot.GetSnapshotId()}}}})
	if _, err := d.controller.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snapshot.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	zfsSnapshot := strings.TrimPrefix(snapshot.GetSnapshotId(), nodeID+":")
	if got := zfsGet(t, "defer_destroy", zfsSnapshot); got != "on" {
		t.Errorf("defer_destroy is %q", got)
	}
	list, err := d.controller.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{})
	if err != nil || len(list.GetEntries()) != 0 {
		t.Errorf("deferred snapshot still listed: %v %v", list, err)
	}
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: clone.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if exists(t, zfsSnapshot) {
		t.Error("the snapshot outlived its last clone")
	}
}

// The reaper runs only when woken here (its interval is an hour): deleting
// the copy must wake it for the internal snapshot, deleting the clone for
// the volume marked deleted, whose mark the clone's origin inherits.
func TestDeletedVolumeWithDependentsLeavesNoOrphan(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent, "--reap-interval", "1h")
	source := d.createVolume(volumeRequest("db", 16<<20, mountCap(""), nil))
	snapshot := d.createSnapshot("snap", source.GetVolumeId())
	clone := d.createVolume(&csi.CreateVolumeRequest{Name: "restore", VolumeCapabilities: []*csi.VolumeCapability{mountCap("")},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot.GetSnapshotId()}}}})
	fromVolume := d.createVolume(&csi.CreateVolumeRequest{Name: "copy-of-db", VolumeCapabilities: []*csi.VolumeCapability{mountCap("")},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: source.GetVolumeId()}}}})
	for _, call := range []func() error{
		func() error {
			_, err := d.controller.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snapshot.GetSnapshotId()})
			return err
		},
		func() error {
			_, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: source.GetVolumeId()})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	sourceDataset := datasetOf(t, source.GetVolumeId())
	if zfsGet(t, "zfs.csi.dev:deleted", sourceDataset) != "true" || zfsGet(t, "readonly", sourceDataset) != "on" {
		t.Fatal("the held volume is not marked deleted and read-only")
	}
	again := d.createVolume(volumeRequest("db", 16<<20, mountCap(""), nil))
	if again.GetVolumeId() == source.GetVolumeId() {
		t.Fatalf("the new volume reuses the held dataset")
	}
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: fromVolume.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() string {
		if snapshots := zfsNames(t, gozfs.Snapshots, sourceDataset); len(snapshots) != 1 {
			return "want only the deferred CSI snapshot left on the source (the internal one reaped):\n" + strings.Join(snapshots, "\n")
		}
		return ""
	})
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: clone.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() string {
		left := strings.Join(zfsNames(t, gozfs.Datasets, parent), "\n")
		if want := parent + "\n" + datasetOf(t, again.GetVolumeId()); left != want {
			return "left under the parent:\n" + left
		}
		return ""
	})
}

func TestNamesAtTheLimitAndBeyondASCII(t *testing.T) {
	d := startDriver(t, testParent(t))
	names := []string{strings.Repeat("n", 128), strings.Repeat("ü", 64), "データベース/ボリューム:1"}
	for _, name := range names {
		volume := d.createVolume(volumeRequest(name, 16<<20, mountCap(""), nil))
		if len(volume.GetVolumeId()) > 128 {
			t.Errorf("volume ID %q is %d bytes", volume.GetVolumeId(), len(volume.GetVolumeId()))
		}
		if got := zfsGet(t, "zfs.csi.dev:csi-name", datasetOf(t, volume.GetVolumeId())); got != name {
			t.Errorf("csi-name is %q, want %q", got, name)
		}
		snapshot := d.createSnapshot(name, volume.GetVolumeId())
		if len(snapshot.GetSnapshotId()) > 128 {
			t.Errorf("snapshot ID %q is %d bytes", snapshot.GetSnapshotId(), len(snapshot.GetSnapshotId()))
		}
		if again := d.createVolume(volumeRequest(name, 16<<20, mountCap(""), nil)); again.GetVolumeId() != volume.GetVolumeId() {
			t.Errorf("the same name gave %q, then %q", volume.GetVolumeId(), again.GetVolumeId())
		}
	}
}

func TestDatasetsTheDriverDoesNotOwnAreLeftAlone(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	operator := parent + "/operator-data"
	mustRun(t, "zfs", "create", "-o", "com.example:owner=ops", operator)
	mustRun(t, "zfs", "snapshot", operator+"@keep")
	before := mustRun(t, "zfs", "list", "-H", "-p", "-o", "name,refquota,readonly,compression", "-t", "all", "-r", pool())
	for _, id := range []string{nodeID + ":" + operator, nodeID + ":" + parent, nodeID + ":" + pool(), "other-node:" + operator} {
		d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: id})
		d.controller.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: id + "@keep"})
		_, err := d.controller.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: id,
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
		if status.Code(err) != codes.NotFound {
			t.Errorf("expand %s: %v", id, err)
		}
		_, err = d.controller.ControllerModifyVolume(ctx(t), &csi.ControllerModifyVolumeRequest{VolumeId: id,
			MutableParameters: map[string]string{"zfs.compression": "off"}})
		if status.Code(err) != codes.NotFound {
			t.Errorf("modify %s: %v", id, err)
		}
		_, err = d.controller.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "x", SourceVolumeId: id})
		if status.Code(err) != codes.NotFound {
			t.Errorf("snapshot of %s: %v", id, err)
		}
	}
	if _, err := d.controller.CreateVolume(ctx(t), volumeRequest("operator-data", 16<<20, mountCap(""), nil)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("creating over the operator's dataset: %v", err)
	}
	if after := mustRun(t, "zfs", "list", "-H", "-p", "-o", "name,refquota,readonly,compression", "-t", "all", "-r", pool()); after != before {
		t.Errorf("datasets changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestExpandAndModifyOnZFS(t *testing.T) {
	d := startDriver(t, testParent(t))
	fs := d.createVolume(volumeRequest("grow-fs", 16<<20, mountCap(""), nil))
	zvol := d.createVolume(volumeRequest("grow-zvol", 16<<20, blockCap(), nil))
	for _, volume := range []*csi.Volume{fs, zvol} {
		response, err := d.controller.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
			VolumeId: volume.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}})
		if err != nil || response.GetCapacityBytes() != 32<<20 {
			t.Fatalf("expand %s: %v %v", volume.GetVolumeId(), response, err)
		}
	}
	if got := zfsGet(t, "refquota", datasetOf(t, fs.GetVolumeId())); got != strconv.Itoa(32<<20) {
		t.Errorf("refquota %s", got)
	}
	zvolDataset := datasetOf(t, zvol.GetVolumeId())
	if got := zfsDataset(t, zvolDataset).Volsize; got != 32<<20 {
		t.Errorf("volsize %d", got)
	}
	if reserved, _ := strconv.Atoi(zfsGet(t, "refreservation", zvolDataset)); reserved < 32<<20 {
		t.Errorf("a thick zvol's reservation did not grow with it: %d", reserved)
	}
	if _, err := d.controller.ControllerModifyVolume(ctx(t), &csi.ControllerModifyVolumeRequest{VolumeId: fs.GetVolumeId(),
		MutableParameters: map[string]string{"zfs.compression": "gzip", "zfs.atime": "off"}}); err != nil {
		t.Fatal(err)
	}
	if zfsGet(t, "compression", datasetOf(t, fs.GetVolumeId())) != "gzip" || zfsGet(t, "atime", datasetOf(t, fs.GetVolumeId())) != "off" {
		t.Error("modify did not set the properties")
	}
}
