package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/node/nodetest"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// harness is a node on a fake host with a fake ZFS holding tank/csi.
type harness struct {
	t    *testing.T
	zfs  *zfstest.Fake
	host *nodetest.FakeMounter
	// mounter is what the server acts through: host, or the kernel's.
	mounter node.Mounter
	server  *node.Server
	cfg     rules.Config
	opts    node.Options
	props   rules.UserProps
	dir     string
}

const testNode = "node-1"

func newHarness(t *testing.T) *harness {
	t.Helper()
	cfg := rules.Config{DriverName: "zfs.csi.dev", Version: "test", NodeID: testNode, ParentDatasets: []string{"tank/csi"}}
	fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40})
	if err := fake.Create(context.Background(), "tank/csi", zfs.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := nodetest.NewFakeMounter()
	host.Datasets = fake.Exists
	host.DatasetSpace = func(name string) (uint64, uint64, bool) {
		row, err := zfs.Get(context.Background(), fake, name, nil)
		return row.Referenced, row.Available, err == nil
	}
	dir := t.TempDir()
	opts := node.Options{MaxVolumesPerNode: 7, DeviceTimeout: 50 * time.Millisecond, PathRoots: []string{dir}}
	server := node.New(cfg, fake, host, zerolog.Nop(), opts)
	return &harness{t: t, zfs: fake, host: host, mounter: host, server: server, cfg: cfg, opts: opts,
		props: rules.NewUserProps(cfg.DriverName), dir: dir}
}

// allowPaths restarts the node with these path roots instead of the test's
// directory.
func (h *harness) allowPaths(roots ...string) {
	h.opts.PathRoots = roots
	h.server = node.New(h.cfg, h.zfs, h.mounter, zerolog.Nop(), h.opts)
}

// testVolume is a volume made as the controller makes it, with the paths a
// CO would use for it.
type testVolume struct {
	id, dataset string
	fsType      string // zfs, ext4, xfs, btrfs, or block for a raw zvol
	capability  *csi.VolumeCapability
	context     map[string]string
	staging     string
	target      string
}

// volume creates a volume: a dataset (fsType "zfs"), a zvol formatted on
// first stage (ext4, xfs, btrfs) or a raw block zvol ("block"); zvols get
// their device. The staging directory exists, the target does not.
func (h *harness) volume(name, fsType string) *testVolume {
	h.t.Helper()
	v := &testVolume{dataset: "tank/csi/" + name, fsType: fsType, staging: filepath.Join(h.dir, name, "staging"),
		target: filepath.Join(h.dir, name, "target")}
	v.id = rules.VolumeID(testNode, v.dataset)
	properties := map[string]string{h.props.Managed: "true", h.props.CSIName: name}
	options := zfs.CreateOptions{Properties: properties}
	switch fsType {
	case "zfs":
		properties["mountpoint"], properties["refquota"] = "legacy", "1073741824"
		v.capability = mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		v.context = map[string]string{rules.ContextKind: rules.KindDataset, rules.ContextFSType: "zfs"}
	case "block":
		options.VolSize = 1 << 30
		v.capability = blockCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		v.context = map[string]string{rules.ContextKind: rules.KindZvol, rules.ContextFSType: ""}
	default:
		options.VolSize = 1 << 30
		properties[h.props.FSType] = fsType
		v.capability = mountCapability(fsType, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		v.context = map[string]string{rules.ContextKind: rules.KindZvol, rules.ContextFSType: fsType}
	}
	if err := h.zfs.Create(context.Background(), v.dataset, options); err != nil {
		h.t.Fatal(err)
	}
	if options.VolSize > 0 {
		h.host.AddDevice(node.ZvolDeviceDir+"/"+v.dataset, options.VolSize)
	}
	if err := os.MkdirAll(v.staging, 0o750); err != nil {
		h.t.Fatal(err)
	}
	return v
}

func mountCapability(fsType string, mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCapability(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func (h *harness) stageRequest(v *testVolume) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.capability, VolumeContext: v.context}
}

func (h *harness) publishRequest(v *testVolume, readOnly bool) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target,
		VolumeCapability: v.capability, Readonly: readOnly, VolumeContext: v.context}
}

func (h *harness) stage(v *testVolume) error {
	_, err := h.server.NodeStageVolume(context.Background(), h.stageRequest(v))
	return err
}

func (h *harness) publish(v *testVolume, readOnly bool) error {
	_, err := h.server.NodePublishVolume(context.Background(), h.publishRequest(v, readOnly))
	return err
}

func (h *harness) unpublish(v *testVolume) error {
	_, err := h.server.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target})
	return err
}

func (h *harness) unstage(v *testVolume) error {
	_, err := h.server.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
	return err
}

// mustStageAndPublish stages and publishes read-write.
func (h *harness) mustStageAndPublish(v *testVolume) {
	h.t.Helper()
	if err := h.stage(v); err != nil {
		h.t.Fatalf("stage: %v", err)
	}
	if err := h.publish(v, false); err != nil {
		h.t.Fatalf("publish: %v", err)
	}
}

// mountAt is what the fake host has mounted at path, or nil.
func (h *harness) mountAt(path string) *node.MountInfo {
	return node.MountAt(h.host.MountTable(), path)
}

// mountPoints lists every mount point, oldest first.
func (h *harness) mountPoints() []string {
	var paths []string
	for _, mount := range h.host.MountTable() {
		paths = append(paths, mount.MountPoint)
	}
	return paths
}

func (h *harness) device(v *testVolume) string { return node.ZvolDeviceDir + "/" + v.dataset }

// wantCode checks the code a call's error gets as the server answers it
// (rpc.Status): the handlers return typed errors too.
func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(rpc.Status(err)) != code {
		t.Fatalf("got %v, want code %s", err, code)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
