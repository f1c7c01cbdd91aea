package node_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/zfs-csi/zfs-csi/node/nodetest"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func TestVolumeStats(t *testing.T) {
	for _, test := range []struct {
		fsType string
		units  []csi.VolumeUsage_Unit
		total  int64
	}{
		{"zfs", []csi.VolumeUsage_Unit{csi.VolumeUsage_BYTES, csi.VolumeUsage_INODES}, nodetest.DatasetBytes},
		{"ext4", []csi.VolumeUsage_Unit{csi.VolumeUsage_BYTES, csi.VolumeUsage_INODES}, 1 << 30},
		{"block", []csi.VolumeUsage_Unit{csi.VolumeUsage_BYTES}, 1 << 30},
	} {
		t.Run("a published "+test.fsType+" volume reports its usage at the target and at the staging path", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", test.fsType)
			h.mustStageAndPublish(v)
			for _, path := range []string{v.target, v.staging} {
				stats, err := h.server.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: path})
				if err != nil {
					t.Fatal(err)
				}
				usage := stats.GetUsage()
				if len(usage) != len(test.units) || usage[0].GetTotal() != test.total {
					t.Fatalf("%s: usage %v, want %v with %d bytes", path, usage, test.units, test.total)
				}
				for i, unit := range test.units {
					if usage[i].GetUnit() != unit || usage[i].GetTotal() <= 0 {
						t.Errorf("%s: usage %v", path, usage[i])
					}
				}
			}
		})
	}
	for _, test := range []struct {
		name string
		path func(h *harness, v, other *testVolume) string
	}{
		{"a path that does not exist", func(h *harness, v, other *testVolume) string { return filepath.Join(h.dir, "nowhere") }},
		{"a directory where nothing is mounted", func(h *harness, v, other *testVolume) string { return filepath.Dir(v.target) }},
		{"another volume's target", func(h *harness, v, other *testVolume) string { return other.target }},
	} {
		t.Run(test.name+" is NOT_FOUND", func(t *testing.T) {
			h := newHarness(t)
			v, other := h.volume("vol", "zfs"), h.volume("other", "zfs")
			h.mustStageAndPublish(v)
			h.mustStageAndPublish(other)
			_, err := h.server.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: test.path(h, v, other)})
			wantCode(t, err, codes.NotFound)
		})
	}
}

func TestRequestsMissingRequiredFieldsAreInvalid(t *testing.T) {
	h := newHarness(t)
	v := h.volume("vol", "zfs")
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"stage without a volume ID": func() error {
			_, err := h.server.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{StagingTargetPath: v.staging, VolumeCapability: v.capability})
			return err
		},
		"stage without a staging path": func() error {
			_, err := h.server.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "nonsense", VolumeCapability: v.capability})
			return err
		},
		"stage without a capability": func() error {
			_, err := h.server.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "nonsense", StagingTargetPath: v.staging})
			return err
		},
		"publish without a target": func() error {
			_, err := h.server.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "nonsense", StagingTargetPath: v.staging})
			return err
		},
		"unpublish without a target": func() error {
			_, err := h.server.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "nonsense"})
			return err
		},
		"unstage without a volume ID": func() error {
			_, err := h.server.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: v.staging})
			return err
		},
		"stats without a path": func() error {
			_, err := h.server.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "nonsense"})
			return err
		},
		"expand without a path": func() error {
			_, err := h.server.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "nonsense"})
			return err
		},
	} {
		t.Run(name+" is INVALID_ARGUMENT", func(t *testing.T) { wantCode(t, call(), codes.InvalidArgument) })
	}
}

func TestNodeInfoAndCapabilities(t *testing.T) {
	h := newHarness(t)
	info, err := h.server.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != testNode || info.GetMaxVolumesPerNode() != 7 ||
		info.GetAccessibleTopology().GetSegments()["zfs.csi.dev/node"] != testNode {
		t.Errorf("NodeGetInfo: %v, %v", info, err)
	}
	capabilities, err := h.server.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[csi.NodeServiceCapability_RPC_Type]bool{}
	for _, capability := range capabilities.GetCapabilities() {
		got[capability.GetRpc().GetType()] = true
	}
	for _, want := range []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER} {
		if !got[want] {
			t.Errorf("capability %s missing", want)
		}
	}
	if got[csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP] {
		t.Error("VOLUME_MOUNT_GROUP is advertised but cannot be honoured")
	}
}

func TestDatasetStatsFollowTheVolume(t *testing.T) {
	h := newHarness(t)
	v := h.volume("vol", "zfs")
	h.mustStageAndPublish(v)
	if err := h.zfs.Write(v.dataset, 300<<20); err != nil {
		t.Fatal(err)
	}
	stats, err := h.server.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: v.target})
	if err != nil {
		t.Fatal(err)
	}
	bytes, inodes := stats.GetUsage()[0], stats.GetUsage()[1]
	// The refquota (1 GiB) bounds the volume; 300 MiB written are used.
	if bytes.GetTotal() != 1<<30 || bytes.GetUsed() < 300<<20 || bytes.GetUsed() > 301<<20 ||
		bytes.GetAvailable() != bytes.GetTotal()-bytes.GetUsed() {
		t.Errorf("bytes: total %d, used %d, available %d; want 1 GiB, 300 MiB used, the rest available",
			bytes.GetTotal(), bytes.GetUsed(), bytes.GetAvailable())
	}
	if inodes.GetAvailable() != bytes.GetAvailable()/512 || inodes.GetUsed() != 6 || inodes.GetTotal() != inodes.GetAvailable()+6 {
		t.Errorf("inodes: total %d, used %d, available %d; want one free per 512 available bytes, 6 used",
			inodes.GetTotal(), inodes.GetUsed(), inodes.GetAvailable())
	}
}

func TestASizeBeyondInt64IsNeverNegative(t *testing.T) {
	h := newHarness(t)
	v := h.volume("vol", "block")
	h.mustStageAndPublish(v)
	h.host.SetDeviceSize(h.device(v), 1<<63+4096)
	stats, err := h.server.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: v.id, VolumePath: v.target})
	if err != nil {
		t.Fatal(err)
	}
	if total := stats.GetUsage()[0].GetTotal(); total != math.MaxInt64 {
		t.Errorf("a device of 2^63+4096 bytes reports %d, want the most int64 holds", total)
	}
}
