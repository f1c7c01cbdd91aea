package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

func fromSnapshot(req *csi.CreateVolumeRequest, snapshotID string) *csi.CreateVolumeRequest {
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshotID}}}
	return req
}

func fromVolume(req *csi.CreateVolumeRequest, volumeID string) *csi.CreateVolumeRequest {
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: volumeID}}}
	return req
}

// long: subtests on one shared fixture, one behaviour each
func TestVolumesFromContentSources(t *testing.T) {
	t.Run("a volume from a snapshot is a clone of it, at least as large as the snapshot's volume", func(t *testing.T) {
		h := newHarness(t)
		source := h.create(createRequest("src", 2<<30, mountCapability("")))
		if err := h.fake.Write(datasetOf(t, source.GetVolumeId()), 100<<20); err != nil {
			t.Fatal(err)
		}
		snapshot := h.snapshot("snap", source.GetVolumeId())
		h.fake.ResetCalls()
		clone := h.create(fromSnapshot(createRequest("clone", 0, mountCapability("")), snapshot.GetSnapshotId()))
		// The snapshot program reported its source when it made it: the
		// clone needs no look at it.
		if calls := h.fake.TotalCalls(); calls != 1 {
			t.Errorf("ran %d commands, want 1 (clone): %v", calls, h.fake.Calls())
		}
		row := h.dataset(datasetOf(t, clone.GetVolumeId()))
		if !strings.HasSuffix(row.Origin, "@snap") || row.RefQuota != 2<<30 || clone.GetContentSource().GetSnapshot().GetSnapshotId() != snapshot.GetSnapshotId() {
			t.Errorf("clone %+v, content source %v", row, clone.GetContentSource())
		}
	})
	t.Run("a smaller size than the source is out of range when the limit forbids growing", func(t *testing.T) {
		h := newHarness(t)
		source := h.create(createRequest("src", 2<<30, blockCapability()))
		snapshot := h.snapshot("snap", source.GetVolumeId())
		req := fromSnapshot(createRequest("clone", 1<<30, blockCapability()), snapshot.GetSnapshotId())
		req.CapacityRange.LimitBytes = 1 << 30
		if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.OutOfRange {
			t.Fatalf("got %v, want OutOfRange", err)
		}
	})
	t.Run("a larger zvol clone grows to the requested size and keeps a reservation", func(t *testing.T) {
		h := newHarness(t)
		source := h.create(createRequest("src", 1<<30, blockCapability()))
		snapshot := h.snapshot("snap", source.GetVolumeId())
		clone := h.create(fromSnapshot(createRequest("clone", 2<<30, blockCapability()), snapshot.GetSnapshotId()))
		row := h.dataset(datasetOf(t, clone.GetVolumeId()))
		if row.VolSize != 2<<30 || row.RefReservation != zfs.ThickReservation(2<<30, 16<<10) || clone.GetCapacityBytes() != 2<<30 {
			t.Errorf("clone volsize=%d refreservation=%d capacity=%d", row.VolSize, row.RefReservation, clone.GetCapacityBytes())
		}
	})
	t.Run("a volume from a volume clones a hidden snapshot that goes with the clone", func(t *testing.T) {
		h := newHarness(t)
		source := h.create(createRequest("src", 1<<30, mountCapability("")))
		clone := h.create(fromVolume(createRequest("clone", 1<<30, mountCapability("")), source.GetVolumeId()))
		origin := h.dataset(datasetOf(t, clone.GetVolumeId())).Origin
		if !strings.HasPrefix(origin, datasetOf(t, source.GetVolumeId())+"@"+rules.InternalSnapshotPrefix) || !h.dataset(origin).DeferDestroy {
			t.Fatalf("origin %q is not a deferred internal snapshot", origin)
		}
		if snapshots := h.listSnapshotIDs(&csi.ListSnapshotsRequest{}); len(snapshots) != 0 {
			t.Errorf("internal snapshot is listed: %v", snapshots)
		}
		h.deleteVolume(clone.GetVolumeId())
		if h.fake.Exists(origin) {
			t.Errorf("internal snapshot %s outlived its clone", origin)
		}
	})
	t.Run("copy mode makes an independent volume with no origin and no leftover snapshot", func(t *testing.T) {
		h := newHarness(t)
		source := h.create(createRequest("src", 1<<30, mountCapability("")))
		if err := h.fake.Write(datasetOf(t, source.GetVolumeId()), 10<<20); err != nil {
			t.Fatal(err)
		}
		req := fromVolume(createRequest("copy", 1<<30, mountCapability("")), source.GetVolumeId())
		req.Parameters = map[string]string{ParamSourceMode: "copy"}
		copied := datasetOf(t, h.create(req).GetVolumeId())
		if row := h.dataset(copied); row.Origin != "" || row.Referenced != 10<<20 || row.RefQuota != 1<<30 {
			t.Errorf("copy %+v", row)
		}
		for _, name := range h.fake.Names() {
			if strings.Contains(name, "@") {
				t.Errorf("snapshot %s left behind", name)
			}
		}
		h.deleteVolume(source.GetVolumeId())
		if h.fake.Exists(datasetOf(t, source.GetVolumeId())) {
			t.Error("the copy still depends on its source")
		}
	})
	t.Run("a missing source is not found", func(t *testing.T) {
		h := newHarness(t)
		for _, req := range []*csi.CreateVolumeRequest{
			fromSnapshot(createRequest("a", 1<<30, mountCapability("")), testNode+":tank/csi/nope@snap"),
			fromSnapshot(createRequest("b", 1<<30, mountCapability("")), "garbage"),
			fromVolume(createRequest("c", 1<<30, mountCapability("")), testNode+":tank/csi/nope"),
			fromVolume(createRequest("d", 1<<30, mountCapability("")), testNode+":tank/csi/keep"),
		} {
			if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.NotFound {
				t.Errorf("%s: got %v, want NotFound", req.GetName(), err)
			}
		}
	})
	t.Run("a dataset snapshot cannot become a block volume", func(t *testing.T) {
		h := newHarness(t)
		source := h.create(createRequest("src", 1<<30, mountCapability("")))
		snapshot := h.snapshot("snap", source.GetVolumeId())
		req := fromSnapshot(createRequest("clone", 1<<30, blockCapability()), snapshot.GetSnapshotId())
		if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.InvalidArgument {
			t.Fatalf("got %v, want InvalidArgument", err)
		}
	})
}

// A volume nothing depends on is destroyed in one command.
func TestDeleteVolumeWithoutDependentsIsOneCommand(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	h.fake.ResetCalls()
	h.deleteVolume(volume.GetVolumeId())
	if h.fake.Exists(datasetOf(t, volume.GetVolumeId())) {
		t.Error("still exists")
	}
	if calls := h.fake.TotalCalls(); calls != 1 {
		t.Errorf("ran %d commands, want 1: %v", calls, h.fake.Calls())
	}
	h.deleteVolume(volume.GetVolumeId()) // again: still OK
}

// Only a clone whose going can free something wakes the reaper, which lists every volume.
func TestDeleteVolumeWakesTheReaperOnlyForAClonesGoingThatFreesSomething(t *testing.T) {
	h := newHarness(t)
	before := h.fake.Names()
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", volume.GetVolumeId())
	woke := func() bool {
		t.Helper()
		select {
		case <-h.server.reap:
			return true
		default:
			return false
		}
	}
	plain := h.create(createRequest("plain", 1<<30, mountCapability("")))
	h.deleteVolume(plain.GetVolumeId())
	if woke() {
		t.Error("deleting a volume that is no clone woke the reaper")
	}
	clone := h.create(fromSnapshot(createRequest("clone", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
	h.deleteVolume(clone.GetVolumeId())
	if woke() {
		t.Error("deleting the clone of a CSI snapshot of a live volume woke the reaper: nothing is due")
	}
	copied := h.create(fromVolume(createRequest("copy", 1<<30, mountCapability("")), volume.GetVolumeId()))
	h.deleteVolume(copied.GetVolumeId())
	if !woke() {
		t.Error("deleting a clone of a volume did not wake the reaper for its internal snapshot")
	}
	clone = h.create(fromSnapshot(createRequest("clone-2", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
	h.deleteVolume(volume.GetVolumeId()) // marked deleted: its snapshot and the clone hold it
	h.deleteSnapshot(snapshot.GetSnapshotId())
	woke()
	h.deleteVolume(clone.GetVolumeId())
	if !woke() {
		t.Error("deleting the last clone of a volume marked deleted did not wake the reaper")
	}
	if err := h.server.Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if names := h.fake.Names(); !slices.Equal(names, before) {
		t.Errorf("after the pass the reaper was woken for: %v, want what was there before %v", names, before)
	}
}

// IDs that are malformed or point at datasets the driver does not own are OK and touch nothing.
func TestDeleteVolumeOfMalformedOrForeignDatasetIDsIsOKAndTouchesNothing(t *testing.T) {
	h := newHarness(t)
	before := h.fake.Names()
	for _, id := range []string{"garbage", testNode + ":tank/csi/keep", testNode + ":tank/other", testNode + ":tank",
		testNode + ":tank/csi", testNode + ":tank/csi/keep/../x", testNode + ":tank/csi/keep@s"} {
		h.deleteVolume(id)
	}
	if after := h.fake.Names(); !slices.Equal(before, after) {
		t.Errorf("datasets changed from %v to %v", before, after)
	}
}

// A volume of another node is refused, not forgotten.
func TestDeleteVolumeOfAnotherNodeIsRefused(t *testing.T) {
	h := newHarness(t)
	_, err := h.server.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "node-b:tank/csi/v"})
	if code(err) != codes.FailedPrecondition {
		t.Fatalf("got %v, want FailedPrecondition", err)
	}
}

// A volume with a CSI snapshot is hidden and kept until the snapshot goes.
func TestDeleteVolumeWithACSISnapshotHidesItUntilTheSnapshotGoes(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", volume.GetVolumeId())
	h.deleteVolume(volume.GetVolumeId())
	dataset := datasetOf(t, volume.GetVolumeId())
	if row := h.dataset(dataset); row.User[h.props.Deleted] != "true" || !row.ReadOnly {
		t.Fatalf("not marked deleted and read-only: %+v", row)
	}
	if ids := h.listVolumeIDs(); len(ids) != 0 {
		t.Errorf("deleted volume still listed: %v", ids)
	}
	if ids := h.listSnapshotIDs(&csi.ListSnapshotsRequest{}); len(ids) != 1 {
		t.Errorf("its snapshot should stay listed: %v", ids)
	}
	h.deleteSnapshot(snapshot.GetSnapshotId())
	if err := h.server.Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.fake.Exists(dataset) {
		t.Error("reaper left the volume behind")
	}
}

// A volume whose snapshot has a clone waits for the clone, and its name can be reused meanwhile.
func TestDeleteVolumeWhoseSnapshotHasACloneWaitsForTheClone(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", volume.GetVolumeId())
	clone := h.create(fromSnapshot(createRequest("clone", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
	h.deleteSnapshot(snapshot.GetSnapshotId())
	h.deleteVolume(volume.GetVolumeId())
	again := h.create(createRequest("v", 1<<30, mountCapability("")))
	if again.GetVolumeId() == volume.GetVolumeId() {
		t.Fatalf("re-created volume reuses the held dataset %s", again.GetVolumeId())
	}
	if ids := h.listVolumeIDs(); !slices.Equal(ids, []string{clone.GetVolumeId(), again.GetVolumeId()}) {
		t.Errorf("listed %v", ids)
	}
	if err := h.server.Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !h.fake.Exists(datasetOf(t, volume.GetVolumeId())) {
		t.Fatal("reaped while a clone still depends on it")
	}
	h.deleteVolume(clone.GetVolumeId())
	if err := h.server.Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range h.fake.Names() {
		if strings.HasPrefix(name, datasetOf(t, volume.GetVolumeId())+"@") || name == datasetOf(t, volume.GetVolumeId()) {
			t.Errorf("orphan left: %s", name)
		}
	}
	if !h.fake.Exists(datasetOf(t, again.GetVolumeId())) {
		t.Error("the new volume of the same name went too")
	}
}

// A mounted volume is refused with FAILED_PRECONDITION and kept.
func TestDeleteVolumeOfAMountedVolumeIsRefused(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	h.fake.SetBusy(datasetOf(t, volume.GetVolumeId()), true)
	_, err := h.server.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()})
	if code(err) != codes.FailedPrecondition || !h.fake.Exists(datasetOf(t, volume.GetVolumeId())) {
		t.Fatalf("got %v", err)
	}
}

func (h *harness) listSnapshotIDs(req *csi.ListSnapshotsRequest) []string {
	h.t.Helper()
	response, err := h.server.ListSnapshots(context.Background(), req)
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, entry := range response.GetEntries() {
		ids = append(ids, entry.GetSnapshot().GetSnapshotId())
	}
	return ids
}

func TestDeleteVolumeWaitsOutAZvolBusyForAMoment(t *testing.T) {
	busy := &zfs.CommandError{Argv: []string{"zfs", "destroy"}, Stderr: "cannot destroy: dataset is busy", Kind: zfs.ErrBusy}
	t.Run("a zvol that udev holds open for a moment is destroyed on a later try", func(t *testing.T) {
		h := newHarness(t)
		volume := h.create(createRequest("v", 1<<30, blockCapability()))
		h.fake.FailNext("DestroyGuarded", busy)
		h.fake.FailNext("DestroyGuarded", busy)
		h.deleteVolume(volume.GetVolumeId())
		if h.fake.Exists(datasetOf(t, volume.GetVolumeId())) {
			t.Error("still exists")
		}
	})
	t.Run("a dataset that is busy is mounted and in use: no retry, FAILED_PRECONDITION", func(t *testing.T) {
		h := newHarness(t)
		volume := h.create(createRequest("v", 1<<30, mountCapability("")))
		h.fake.FailNext("DestroyGuarded", busy)
		h.fake.ResetCalls()
		_, err := h.server.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()})
		if code(err) != codes.FailedPrecondition || h.fake.Calls()["DestroyGuarded"] != 1 {
			t.Errorf("got %v after %d destroys", err, h.fake.Calls()["DestroyGuarded"])
		}
	})
	t.Run("a zvol busy for good gives up with FAILED_PRECONDITION", func(t *testing.T) {
		h := newHarness(t)
		volume := h.create(createRequest("v", 1<<30, blockCapability()))
		h.fake.SetBusy(datasetOf(t, volume.GetVolumeId()), true)
		_, err := h.server.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()})
		if code(err) != codes.FailedPrecondition || !h.fake.Exists(datasetOf(t, volume.GetVolumeId())) {
			t.Errorf("got %v", err)
		}
	})
}

func TestCallsForAnotherNodeTellNomadToTryTheNext(t *testing.T) {
	h := newHarness(t)
	req := createRequest("v", 1<<30, mountCapability(""))
	req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{"zfs.csi.dev/node": "node-b"}}}}
	_, createErr := h.server.CreateVolume(context.Background(), req)
	_, deleteErr := h.server.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "node-b:tank/csi/v"})
	_, snapshotErr := h.server.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: "node-b:tank/csi/v@s"})
	for _, err := range []error{createErr, deleteErr, snapshotErr} {
		if err == nil || !strings.Contains(err.Error(), otherNodeMarker) {
			t.Errorf("%v does not carry %q", err, otherNodeMarker)
		}
	}
}
