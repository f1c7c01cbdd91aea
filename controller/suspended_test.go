package controller

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// newTwoPoolHarness is a controller with the parents tank/csi (the default)
// and other/csi, each in a pool of its own.
func newTwoPoolHarness(t *testing.T) *harness {
	t.Helper()
	fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40, "other": 1 << 40})
	for _, name := range []string{"tank/csi", "other/csi"} {
		if err := fake.Create(context.Background(), name, zfs.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rules.Config{DriverName: "zfs.csi.dev", Version: "test", NodeID: testNode, ParentDatasets: []string{"tank/csi", "other/csi"}}
	server, err := New(cfg, fake, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, fake: fake, server: server, props: rules.NewUserProps(cfg.DriverName)}
}

// A pool whose I/O is suspended fails every command that touches it (ZFS ≥
// 2.2 answers at once; see e2e TestASuspendedPoolWedgesNoOtherVolume). The
// node-wide listings a call makes (other parents for the name, snapshot
// names, the reaper's pass) must leave it out, or one stuck pool stops
// every volume of the node.
func TestASuspendedPoolStopsNoWorkInTheOthers(t *testing.T) {
	h := newTwoPoolHarness(t)
	elsewhere := createRequest("elsewhere", 1<<30, mountCapability(""))
	elsewhere.Parameters = map[string]string{ParamParentDataset: "other/csi"}
	stuck := h.create(elsewhere)
	doomed := h.create(createRequest("doomed", 1<<30, mountCapability("")))
	h.fake.SetPoolHealth("other", "SUSPENDED")

	volume := h.create(createRequest("healthy", 1<<30, mountCapability("")))
	snapshot := h.snapshot("healthy-snapshot", volume.GetVolumeId())
	h.deleteSnapshot(snapshot.GetSnapshotId())
	h.deleteVolume(doomed.GetVolumeId())
	if err := h.server.Reap(context.Background()); err != nil {
		t.Fatalf("reaper pass with another pool suspended: %v", err)
	}
	if h.fake.Exists("tank/csi/doomed") {
		t.Error("the reaper left a deleted volume of the healthy pool while another pool was suspended")
	}

	if _, err := h.server.CreateVolume(context.Background(), elsewhere); code(err) != codes.Unavailable {
		t.Errorf("CreateVolume in the suspended pool: %v, want UNAVAILABLE", err)
	}
	if _, err := h.server.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: stuck.GetVolumeId()}); code(err) != codes.Unavailable {
		t.Errorf("DeleteVolume in the suspended pool: %v, want UNAVAILABLE", err)
	}
	h.fake.SetPoolHealth("other", "ONLINE")
	h.deleteVolume(stuck.GetVolumeId())
}

// The snapshot index stands in for a listing of every parent; a listing that
// left a suspended pool out must not become the index, or a snapshot name
// taken in that pool would look free once it is back.
func TestASnapshotNameInASuspendedPoolStaysTaken(t *testing.T) {
	h := newTwoPoolHarness(t)
	elsewhere := createRequest("elsewhere", 1<<30, mountCapability(""))
	elsewhere.Parameters = map[string]string{ParamParentDataset: "other/csi"}
	h.snapshot("taken", h.create(elsewhere).GetVolumeId())
	h.server.snapshots = snapshotIndex{} // as after a restart
	h.fake.SetPoolHealth("other", "SUSPENDED")
	if err := h.server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.fake.SetPoolHealth("other", "ONLINE")
	volume := h.create(createRequest("healthy", 1<<30, mountCapability("")))
	if _, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "taken", SourceVolumeId: volume.GetVolumeId()}); code(err) != codes.AlreadyExists {
		t.Errorf("a snapshot name taken in a pool that was suspended during the reaper's pass: %v, want ALREADY_EXISTS", err)
	}
}
