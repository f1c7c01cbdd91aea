package controller

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

const testNode = "node-a"

// harness is a controller over a fake pool "tank" (1 TiB) with the parent
// datasets tank/csi and tank/other, and an unrelated dataset tank/csi/keep
// that belongs to the operator.
type harness struct {
	t      *testing.T
	fake   *zfstest.Fake
	server *Server
	props  rules.UserProps
}

func newHarness(t *testing.T, parents ...string) *harness {
	t.Helper()
	if len(parents) == 0 {
		parents = []string{"tank/csi"}
	}
	fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40})
	for _, name := range []string{"tank/csi", "tank/other", "tank/csi/keep"} {
		if err := fake.Create(context.Background(), name, zfs.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rules.Config{DriverName: "zfs.csi.dev", Version: "test", NodeID: testNode, ParentDatasets: parents}
	server, err := New(cfg, fake, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	fake.ResetCalls()
	return &harness{t: t, fake: fake, server: server, props: rules.NewUserProps(cfg.DriverName)}
}

// code is the gRPC code a handler's error gets from the server's interceptor.
func code(err error) codes.Code { return status.Code(rpc.Status(err)) }

func mountCapability(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func createRequest(name string, size int64, capability *csi.VolumeCapability) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{capability},
	}
}

func (h *harness) create(req *csi.CreateVolumeRequest) *csi.Volume {
	h.t.Helper()
	response, err := h.server.CreateVolume(context.Background(), req)
	if err != nil {
		h.t.Fatalf("CreateVolume(%q): %v", req.GetName(), err)
	}
	return response.GetVolume()
}

func (h *harness) snapshot(name, volumeID string) *csi.Snapshot {
	h.t.Helper()
	response, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		h.t.Fatalf("CreateSnapshot(%q): %v", name, err)
	}
	return response.GetSnapshot()
}

func (h *harness) deleteVolume(volumeID string) {
	h.t.Helper()
	if _, err := h.server.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: volumeID}); err != nil {
		h.t.Fatalf("DeleteVolume(%q): %v", volumeID, err)
	}
}

func (h *harness) deleteSnapshot(snapshotID string) {
	h.t.Helper()
	if _, err := h.server.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: snapshotID}); err != nil {
		h.t.Fatalf("DeleteSnapshot(%q): %v", snapshotID, err)
	}
}

// dataset reads a dataset as zfs would show it, with the driver's properties.
func (h *harness) dataset(name string) zfs.Dataset {
	h.t.Helper()
	row, err := zfs.Get(context.Background(), h.fake, name, h.props.All())
	if err != nil {
		h.t.Fatalf("zfs list %s: %v", name, err)
	}
	return row
}

// datasetOf is the dataset a volume ID names.
func datasetOf(t *testing.T, volumeID string) string {
	t.Helper()
	_, dataset, err := rules.ParseVolumeID(volumeID)
	if err != nil {
		t.Fatal(err)
	}
	return dataset
}

func (h *harness) listVolumeIDs() []string {
	h.t.Helper()
	response, err := h.server.ListVolumes(context.Background(), &csi.ListVolumesRequest{})
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, entry := range response.GetEntries() {
		ids = append(ids, entry.GetVolume().GetVolumeId())
	}
	return ids
}
