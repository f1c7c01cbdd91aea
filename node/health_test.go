package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/zfs"
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
		if got := h.volumeHealth(other, "", ""); got != "[INACCESSIBLE/DatasetMissing]" {
			t.Errorf("got %s", got)
		}
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
