package controller

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// warmHarness is a harness whose snapshot index has had its sweep, so
// CreateSnapshot takes the guarded path that fills sourceIndex.
func warmHarness(t *testing.T) *harness {
	h := newHarness(t)
	if err := h.server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestVolumesFromRememberedSnapshots(t *testing.T) {
	ctx := context.Background()
	t.Run("a clone of a remembered snapshot is answered as a listed one would be, in one zfs clone", func(t *testing.T) {
		kinds := []struct {
			name       string
			capability *csi.VolumeCapability
		}{{"dataset", mountCapability("")}, {"ext4 zvol", mountCapability("ext4")}, {"raw zvol", blockCapability()}}
		for _, kind := range kinds {
			h := warmHarness(t)
			source := h.create(createRequest("source", 3<<30, kind.capability))
			snapshot := h.snapshot("snap", source.GetVolumeId())
			cold, err := New(h.server.cfg, h.fake, h.server.log) // remembers nothing
			if err != nil {
				t.Fatal(err)
			}
			requests := []*csi.CreateVolumeRequest{
				{Name: "default-size", VolumeCapabilities: []*csi.VolumeCapability{kind.capability}},
				createRequest("too-small", 1<<30, kind.capability),
				createRequest("other-kind", 3<<30, mountCapability("xfs")),
			}
			for _, request := range requests {
				fromSnapshot(request, snapshot.GetSnapshotId())
				h.fake.ResetCalls()
				warm, warmErr := h.server.CreateVolume(ctx, proto.Clone(request).(*csi.CreateVolumeRequest))
				warmCalls := h.fake.Calls()
				if warmErr == nil {
					h.deleteVolume(warm.GetVolume().GetVolumeId())
				}
				listed, listedErr := cold.CreateVolume(ctx, proto.Clone(request).(*csi.CreateVolumeRequest))
				if code(warmErr) != code(listedErr) || !proto.Equal(warm, listed) {
					t.Errorf("%s, %s: remembered %v (%v), listed %v (%v)", kind.name, request.GetName(), warm, warmErr, listed, listedErr)
				}
				if warmCalls["List"] != 0 {
					t.Errorf("%s, %s: the remembered snapshot was listed: %v", kind.name, request.GetName(), warmCalls)
				}
				if listedErr == nil {
					if _, err := cold.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: listed.GetVolume().GetVolumeId()}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	})
	t.Run("a snapshot destroyed behind the driver's back is not found, and forgotten", func(t *testing.T) {
		h := warmHarness(t)
		source := h.create(createRequest("source", 1<<30, mountCapability("")))
		snapshot := h.snapshot("snap", source.GetVolumeId())
		name := datasetOf(t, source.GetVolumeId()) + "@snap"
		if err := h.fake.Destroy(ctx, name, zfs.DestroyOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := h.server.CreateVolume(ctx, fromSnapshot(createRequest("late", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
		if code(err) != codes.NotFound {
			t.Errorf("got %v, want NOT_FOUND", err)
		}
		if _, ok := h.server.sources.lookup(name); ok {
			t.Error("the gone snapshot is still remembered")
		}
	})
	t.Run("a default-size clone has the size its source volume had at the snapshot", func(t *testing.T) {
		h := warmHarness(t)
		source := h.create(createRequest("source", 1<<30, mountCapability("")))
		snapshot := h.snapshot("snap", source.GetVolumeId())
		if _, err := h.server.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: source.GetVolumeId(),
			CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}}); err != nil {
			t.Fatal(err)
		}
		clone := h.create(fromSnapshot(&csi.CreateVolumeRequest{Name: "clone",
			VolumeCapabilities: []*csi.VolumeCapability{mountCapability("")}}, snapshot.GetSnapshotId()))
		if clone.GetCapacityBytes() != 1<<30 {
			t.Errorf("capacity %d, want the %d the source had when the snapshot was taken", clone.GetCapacityBytes(), 1<<30)
		}
	})
}

func TestSourceIndexDropsAFillThatRacedAForget(t *testing.T) {
	var x sourceIndex
	epoch := x.begin()
	x.forget("tank/csi/v@s") // a DeleteSnapshot while the fill was reading ZFS
	x.remember(epoch, source{snapshot: "tank/csi/v@s", size: 1})
	if _, ok := x.lookup("tank/csi/v@s"); ok {
		t.Error("a fill older than a forget was kept")
	}
	x.remember(x.begin(), source{snapshot: "tank/csi/v@s", size: 1})
	x.forgetVolume("tank/csi/v")
	if _, ok := x.lookup("tank/csi/v@s"); ok {
		t.Error("forgetVolume kept the volume's snapshot")
	}
}
