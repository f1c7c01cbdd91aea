package node_test

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func TestExpand(t *testing.T) {
	t.Run("a formatted zvol's filesystem grows to the zvol's new size", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		h.mustStageAndPublish(v)
		h.host.SetDeviceSize(h.device(v), 2<<30)
		h.zfs.ResetCalls()
		response, err := h.server.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.target,
			StagingTargetPath: v.staging, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}, VolumeCapability: v.capability})
		if err != nil {
			t.Fatal(err)
		}
		if _, size, _ := h.host.Filesystem(h.device(v)); size != 2<<30 || response.GetCapacityBytes() != 2<<30 {
			t.Errorf("the filesystem has %d bytes, the response says %d; want 2 GiB", size, response.GetCapacityBytes())
		}
		if h.zfs.TotalCalls() != 0 {
			t.Errorf("expand ran zfs commands %v", h.zfs.Calls())
		}
	})
	t.Run("a capacity the zvol does not have yet is OUT_OF_RANGE", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "xfs")
		h.mustStageAndPublish(v)
		_, err := h.server.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.target,
			CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}})
		wantCode(t, err, codes.OutOfRange)
	})
	for _, fsType := range []string{"zfs", "block"} {
		t.Run("a "+fsType+" volume needs nothing from the node", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			h.mustStageAndPublish(v)
			if _, err := h.server.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.target}); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("a volume that is not at the path is NOT_FOUND", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		_, err := h.server.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.staging})
		wantCode(t, err, codes.NotFound)
	})
	for _, test := range []struct{ fsType, asked string }{
		{"ext4", "block"}, {"ext4", "xfs"}, {"zfs", "ext4"}, {"zfs", "block"}, {"block", "ext4"}, {"block", "zfs"},
	} {
		t.Run("a "+test.fsType+" volume asked to expand as "+test.asked+" is INVALID_ARGUMENT, and nothing grows", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", test.fsType)
			h.mustStageAndPublish(v)
			if test.fsType != "zfs" {
				h.host.SetDeviceSize(h.device(v), 2<<30)
			}
			capability := mountCapability(test.asked, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
			if test.asked == "block" {
				capability = blockCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
			}
			_, err := h.server.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.target,
				StagingTargetPath: v.staging, VolumeCapability: capability})
			wantCode(t, err, codes.InvalidArgument)
			if _, size, _ := h.host.Filesystem(h.device(v)); test.fsType == "ext4" && size != 1<<30 {
				t.Errorf("the filesystem grew to %d bytes", size)
			}
		})
	}
	t.Run("a capability the driver never serves is INVALID_ARGUMENT", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		h.mustStageAndPublish(v)
		_, err := h.server.NodeExpandVolume(context.Background(), &csi.NodeExpandVolumeRequest{VolumeId: v.id, VolumePath: v.target,
			VolumeCapability: mountCapability("ext4", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)})
		wantCode(t, err, codes.InvalidArgument)
	})
}
