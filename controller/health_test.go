package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// reasons lists the (status, reason) pairs of a volume's health.
func reasons(health *csi.VolumeHealth) []string {
	var out []string
	for _, entry := range health.GetHealthStatuses() {
		out = append(out, entry.GetStatus().String()+"/"+entry.GetReason())
	}
	return out
}

func TestVolumeHealthFollowsThePoolAndTheDataset(t *testing.T) {
	h := newHarness(t)
	a := h.create(createRequest("a", 1<<30, mountCapability(""))).GetVolumeId()
	b := h.create(createRequest("b", 1<<30, blockCapability())).GetVolumeId()
	get := func(id string) []string {
		t.Helper()
		response, err := h.server.ControllerGetVolumeHealth(context.Background(), &csi.ControllerGetVolumeHealthRequest{VolumeId: id})
		if err != nil {
			t.Fatal(err)
		}
		return reasons(response.GetVolumeHealth())
	}
	list := func(max int32, token string) (*csi.ControllerListVolumeHealthResponse, error) {
		return h.server.ControllerListVolumeHealth(context.Background(), &csi.ControllerListVolumeHealthRequest{MaxEntries: max, StartingToken: token})
	}
	t.Run("a healthy pool: nothing to report, one zpool status and one zfs list", func(t *testing.T) {
		h.fake.ResetCalls()
		if got := get(a); len(got) != 0 {
			t.Errorf("got %v", got)
		}
		if calls := h.fake.Calls(); calls["PoolStatus"] != 1 || calls["List"] != 1 || h.fake.TotalCalls() != 2 {
			t.Errorf("calls %v", calls)
		}
		if listed, err := list(0, ""); err != nil || len(listed.GetEntries()) != 0 {
			t.Errorf("ListVolumeHealth: %v, %v", listed, err)
		}
	})
	t.Run("a degraded pool with errors: every volume says so, page by page", func(t *testing.T) {
		h.fake.SetPoolHealth("tank", "DEGRADED")
		h.fake.SetPoolErrors("tank", zfs.PoolStatus{ChecksumErrors: 12, DataErrors: 2, Unhealthy: []string{"mirror-0 DEGRADED"}})
		defer h.fake.SetPoolErrors("tank", zfs.PoolStatus{})
		defer h.fake.SetPoolHealth("tank", "ONLINE")
		want := "[DEGRADED/PoolDegraded DEGRADED/PoolDeviceErrors DATA_LOSS/PoolDataErrors]"
		if got := get(b); fmt.Sprint(got) != want {
			t.Errorf("got %v, want %s", got, want)
		}
		first, err := list(1, "")
		if err != nil || len(first.GetEntries()) != 1 || first.GetNextToken() == "" || first.GetEntries()[0].GetVolumeId() != a {
			t.Fatalf("first page: %v, %v", first, err)
		}
		second, err := list(1, first.GetNextToken())
		if err != nil || len(second.GetEntries()) != 1 || second.GetNextToken() != "" || second.GetEntries()[0].GetVolumeId() != b ||
			fmt.Sprint(reasons(second.GetEntries()[0])) != want {
			t.Fatalf("second page: %v, %v", second, err)
		}
		if _, err := list(1, "not-a-token"); code(err) != codes.Aborted {
			t.Errorf("a foreign token: got %v, want Aborted", err)
		}
	})
	t.Run("a suspended pool: inaccessible, and no zfs list that would hang", func(t *testing.T) {
		h.fake.SetPoolHealth("tank", "SUSPENDED")
		defer h.fake.SetPoolHealth("tank", "ONLINE")
		h.fake.ResetCalls()
		if got := fmt.Sprint(get(a)); got != "[INACCESSIBLE/PoolUnreachable]" {
			t.Errorf("got %s", got)
		}
		if calls := h.fake.Calls(); calls["List"] != 0 {
			t.Errorf("listed a suspended pool: %v", calls)
		}
	})
	t.Run("a dataset destroyed behind the driver's back is NOT_FOUND, as the spec's table says", func(t *testing.T) {
		if err := h.fake.Destroy(context.Background(), datasetOf(t, b), zfs.DestroyOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := h.server.ControllerGetVolumeHealth(context.Background(), &csi.ControllerGetVolumeHealthRequest{VolumeId: b})
		if code(err) != codes.NotFound {
			t.Errorf("got %v, want NotFound", err)
		}
	})
	t.Run("IDs that are not ours are not found", func(t *testing.T) {
		for _, id := range []string{"node-b:tank/csi/a", testNode + ":tank/csi/keep", "garbage"} {
			if _, err := h.server.ControllerGetVolumeHealth(context.Background(), &csi.ControllerGetVolumeHealthRequest{VolumeId: id}); code(err) != codes.NotFound {
				t.Errorf("%s: got %v, want NotFound", id, err)
			}
		}
	})
}
