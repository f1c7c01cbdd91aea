package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/node/nodetest"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

func (h *harness) volumeHealth(v *testVolume, staging, target string) string {
	h.t.Helper()
	response, err := h.server.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: v.id,
		StagingTargetPath: staging, VolumePublishPath: target})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, entry := range response.GetVolumeHealth().GetHealthStatuses() {
		out = append(out, entry.GetStatus().String()+"/"+entry.GetReason())
	}
	return fmt.Sprint(out)
}

func TestNodeVolumeHealthSeesMountsDevicesAndThePool(t *testing.T) {
	h := newHarness(t)
	fs, block := h.volume("fs", "zfs"), h.volume("blk", "block")
	h.mustStageAndPublish(fs)
	h.mustStageAndPublish(block)
	for _, v := range []*testVolume{fs, block} {
		if got := h.volumeHealth(v, v.staging, v.target); got != "[]" {
			t.Errorf("%s staged and published: %s", v.fsType, got)
		}
	}
	t.Run("a staging mount unmounted by hand", func(t *testing.T) {
		if err := h.host.Unmount(fs.target); err != nil {
			t.Fatal(err)
		}
		if err := h.host.Unmount(fs.staging); err != nil {
			t.Fatal(err)
		}
		if got := h.volumeHealth(fs, fs.staging, fs.target); got != "[INACCESSIBLE/StagingMountMissing INACCESSIBLE/PublishMountMissing]" {
			t.Errorf("got %s", got)
		}
		if got := h.volumeHealth(fs, "", ""); got != "[]" {
			t.Errorf("without paths: got %s", got)
		}
	})
	t.Run("a zvol whose device vanished", func(t *testing.T) {
		h.host.RemoveDevice(h.device(block))
		if got := h.volumeHealth(block, "", ""); got != "[INACCESSIBLE/DeviceMissing]" {
			t.Errorf("got %s", got)
		}
	})
	t.Run("a dataset destroyed by hand", func(t *testing.T) {
		other := h.volume("gone", "zfs")
		if err := h.zfs.Destroy(context.Background(), other.dataset, zfs.DestroyOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := h.server.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: other.id})
		wantCode(t, err, codes.NotFound)
	})
	t.Run("the pool, and the node's storage", func(t *testing.T) {
		storage := func() string {
			response, err := h.server.NodeGetStorageHealth(context.Background(), &csi.NodeGetStorageHealthRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, backend := range response.GetBackendHealth() {
				out = append(out, backend.GetStatus().String()+"/"+backend.GetReason())
			}
			return fmt.Sprint(out)
		}
		if got := storage(); got != "[]" {
			t.Errorf("healthy: %s", got)
		}
		h.zfs.SetPoolHealth("tank", "DEGRADED")
		if got := storage(); got != "[STORAGE_DEGRADED/PoolDegraded]" {
			t.Errorf("degraded: %s", got)
		}
		h.zfs.SetPoolHealth("tank", "SUSPENDED")
		if got := storage(); got != "[STORAGE_UNREACHABLE/PoolUnreachable]" {
			t.Errorf("suspended: %s", got)
		}
		h.zfs.ResetCalls()
		if got := h.volumeHealth(fs, "", ""); got != "[INACCESSIBLE/PoolUnreachable]" || h.zfs.Calls()["List"] != 0 {
			t.Errorf("a volume of the suspended pool: %s, calls %v", got, h.zfs.Calls())
		}
	})
}

func TestStorageHealthNamesEachConditionOnce(t *testing.T) {
	fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40, "fast": 1 << 40})
	for _, parent := range []string{"tank/csi", "fast/csi"} {
		if err := fake.Create(context.Background(), parent, zfs.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rules.Config{DriverName: "zfs.csi.dev", Version: "test", NodeID: testNode, ParentDatasets: []string{"tank/csi", "fast/csi"}}
	server := node.New(cfg, fake, nodetest.NewFakeMounter(), zerolog.Nop(), node.Options{})
	fake.SetPoolHealth("tank", "DEGRADED")
	fake.SetPoolHealth("fast", "DEGRADED")
	response, err := server.NodeGetStorageHealth(context.Background(), &csi.NodeGetStorageHealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	backends := response.GetBackendHealth()
	if len(backends) != 1 || backends[0].GetReason() != "PoolDegraded" ||
		!strings.Contains(backends[0].GetMessage(), "pool tank") || !strings.Contains(backends[0].GetMessage(), "pool fast") {
		t.Fatalf("two degraded pools: %v, want one PoolDegraded entry naming both", backends)
	}
}
