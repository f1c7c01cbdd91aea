package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// TestCommandsPerRPC counts the zfs/zpool commands each Controller RPC runs on
// its happy path. Under emulation every command costs 150-500 ms, so the count
// is the latency; each budget is the count the RPC was cut to. Run with -v to see the table.
//
// long: a table of RPCs and their command budgets, one a row
func TestCommandsPerRPC(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	source := h.create(createRequest("source", 1<<30, mountCapability("")))
	snapshot := h.snapshot("base", source.GetVolumeId())
	volume := h.create(createRequest("victim", 1<<30, mountCapability("")))
	origin := h.create(createRequest("origin", 1<<30, mountCapability("")))
	for i := range 5 {
		h.create(createRequest(fmt.Sprintf("filler-%d", i), 1<<20, mountCapability("")))
	}
	steps := []struct {
		rpc    string
		budget int
		call   func() error
	}{
		{"CreateVolume (dataset)", 1, func() error {
			_, err := h.server.CreateVolume(ctx, createRequest("new-fs", 1<<30, mountCapability("")))
			return err
		}},
		{"CreateVolume (zvol)", 1, func() error {
			_, err := h.server.CreateVolume(ctx, createRequest("new-zvol", 1<<30, blockCapability()))
			return err
		}},
		{"CreateVolume (again, idempotent)", 2, func() error {
			_, err := h.server.CreateVolume(ctx, createRequest("new-fs", 1<<30, mountCapability("")))
			return err
		}},
		{"CreateVolume (from a snapshot not seen since start)", 2, func() error {
			_, err := h.server.CreateVolume(ctx, fromSnapshot(createRequest("from-snap", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
			return err
		}},
		{"CreateVolume (from volume)", 4, func() error {
			_, err := h.server.CreateVolume(ctx, fromVolume(createRequest("from-vol", 1<<30, mountCapability("")), source.GetVolumeId()))
			return err
		}},
		{"CreateSnapshot", 1, func() error {
			_, err := h.server.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: volume.GetVolumeId()})
			return err
		}},
		{"CreateSnapshot (of another volume)", 1, func() error {
			_, err := h.server.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "origin-snap", SourceVolumeId: origin.GetVolumeId()})
			return err
		}},
		{"CreateVolume (from a snapshot this service made)", 1, func() error {
			_, err := h.server.CreateVolume(ctx, fromSnapshot(createRequest("from-snap-made", 1<<30, mountCapability("")),
				testNode+":"+datasetOf(t, origin.GetVolumeId())+"@origin-snap"))
			return err
		}},
		{"ListSnapshots", 1, func() error {
			_, err := h.server.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: 2})
			return err
		}},
		{"GetSnapshot", 1, func() error {
			_, err := h.server.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: snapshot.GetSnapshotId()})
			return err
		}},
		{"DeleteSnapshot", 1, func() error {
			_, err := h.server.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: testNode + ":" + datasetOf(t, volume.GetVolumeId()) + "@snap"})
			return err
		}},
		{"ListVolumes (one page)", 1, func() error {
			_, err := h.server.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: 3})
			return err
		}},
		{"ControllerGetVolume", 1, func() error {
			_, err := h.server.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: volume.GetVolumeId()})
			return err
		}},
		{"ValidateVolumeCapabilities", 1, func() error {
			_, err := h.server.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: volume.GetVolumeId(),
				VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")}})
			return err
		}},
		{"GetCapacity", 1, func() error {
			_, err := h.server.GetCapacity(ctx, &csi.GetCapacityRequest{})
			return err
		}},
		{"ControllerExpandVolume", 2, func() error {
			_, err := h.server.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: volume.GetVolumeId(),
				CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}})
			return err
		}},
		{"ControllerModifyVolume", 2, func() error {
			_, err := h.server.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: volume.GetVolumeId(),
				MutableParameters: map[string]string{"zfs.compression": "zstd"}})
			return err
		}},
		{"DeleteVolume", 1, func() error {
			_, err := h.server.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()})
			return err
		}},
		{"DeleteVolume (held by a clone: marked)", 2, func() error {
			_, err := h.server.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: source.GetVolumeId()})
			return err
		}},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-40s %8s %6s  %s\n", "RPC", "commands", "budget", "by method")
	for _, step := range steps {
		h.fake.ResetCalls()
		if err := step.call(); err != nil {
			t.Fatalf("%s: %v", step.rpc, err)
		}
		n := h.fake.TotalCalls()
		fmt.Fprintf(&table, "%-40s %8d %6d  %v\n", step.rpc, n, step.budget, h.fake.Calls())
		if n > step.budget {
			t.Errorf("%s ran %d zfs commands, over its budget of %d: %v", step.rpc, n, step.budget, h.fake.Calls())
		}
	}
	t.Log(table.String())
}
