// Package wiringtest builds hosts for the tests of the operator tools and
// the metrics: a fake ZFS pool whose volumes are made by the real controller
// (so they carry exactly the properties the driver sets), a mount table file,
// a /dev directory with zvol links, and the daemon (wiring.NewDaemon, run by
// RunDaemon) serving that pool on its sockets for the tools that talk to
// them and for the tests of what the daemon runs.
package wiringtest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"

	"github.com/zfs-csi/zfs-csi/controller"
	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/node/nodetest"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/wiring"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// NodeID is the node every fixture's IDs name.
const NodeID = "node-a"

// Fixture is a fake host: pool "tank" (100 GiB) with the parent tank/csi.
type Fixture struct {
	T          *testing.T
	Fake       *zfstest.Fake
	Controller *controller.Server
	Config     rules.Config
	Props      rules.UserProps
	Host       inventory.Host
	// OperatorEndpoint is the operator's socket Serve serves beside the
	// CSI one.
	OperatorEndpoint string
	mountLines       []string
}

// New makes a fixture with an empty mount table and /dev.
func New(t *testing.T) *Fixture {
	t.Helper()
	fake := zfstest.NewFake(map[string]uint64{"tank": 100 << 30})
	if err := fake.Create(context.Background(), "tank/csi", zfs.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rules.Config{DriverName: "zfs.csi.dev", Version: "test", NodeID: NodeID, ParentDatasets: []string{"tank/csi"}}
	server, err := controller.New(cfg, fake, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := &Fixture{T: t, Fake: fake, Controller: server, Config: cfg, Props: rules.NewUserProps(cfg.DriverName),
		Host: inventory.Host{MountInfo: filepath.Join(dir, "mountinfo"), DevDir: filepath.Join(dir, "dev"), CODirs: inventory.DefaultCODirs()}}
	f.writeMountInfo()
	return f
}

// Serve serves what the daemon serves (wiring.NewDaemon) over the
// fixture's pool, with mounter as its host, on a unix socket until the test
// ends; it returns the endpoint.
func (f *Fixture) Serve(mounter node.Mounter) string {
	f.T.Helper()
	return f.ServeDaemon(wiring.DaemonOptions{Log: zerolog.Nop(), Mounter: mounter}).Sockets()[0]
}

// ServeDaemon runs the daemon over the fixture's pool until the test ends,
// with what opts asks besides (its log, metrics, a host: the fake mounter
// when Mounter is nil); the fixture gives it its configuration, its ZFS,
// sockets in a temporary directory, path roots and timers fit for a test.
func (f *Fixture) ServeDaemon(opts wiring.DaemonOptions) *wiring.Daemon {
	f.T.Helper()
	dir := f.T.TempDir()
	f.OperatorEndpoint = "unix://" + filepath.Join(dir, "operator.sock")
	opts.Config, opts.ZFS = f.Config, f.Fake
	opts.Endpoint, opts.OperatorSocket = "unix://"+filepath.Join(dir, "csi.sock"), f.OperatorEndpoint
	opts.ReapInterval, opts.StopTimeout = time.Hour, time.Second
	// The tests' staging and target paths are temporary directories.
	opts.Node.PathRoots = []string{os.TempDir()}
	if opts.Mounter == nil {
		opts.Mounter = nodetest.NewFakeMounter()
	}
	daemon, _ := RunDaemon(f.T, opts)
	return daemon
}

// RunDaemon builds the daemon as the command does (wiring.NewDaemon) and
// runs it until stop, or the end of the test: either stops it as SIGTERM
// does and checks that Run returned no error.
func RunDaemon(t *testing.T, opts wiring.DaemonOptions) (daemon *wiring.Daemon, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	daemon, err := wiring.NewDaemon(ctx, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return daemon, stop
}

// Mount capabilities.
func Mount(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// Block is the raw block capability.
func Block() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// CreateVolume makes a volume through the controller and returns its ID.
func (f *Fixture) CreateVolume(name string, size int64, capability *csi.VolumeCapability, parameters map[string]string) string {
	f.T.Helper()
	response, err := f.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name,
		CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: []*csi.VolumeCapability{capability},
		Parameters: parameters})
	if err != nil {
		f.T.Fatalf("CreateVolume(%q): %v", name, err)
	}
	return response.GetVolume().GetVolumeId()
}

// CloneVolume makes a volume from a snapshot and returns its ID.
func (f *Fixture) CloneVolume(name, snapshotID string, capability *csi.VolumeCapability) string {
	f.T.Helper()
	response, err := f.Controller.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name,
		VolumeCapabilities: []*csi.VolumeCapability{capability},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshotID}}}})
	if err != nil {
		f.T.Fatalf("CreateVolume(%q) from %s: %v", name, snapshotID, err)
	}
	return response.GetVolume().GetVolumeId()
}

// Snapshot makes a CSI snapshot and returns its ID.
func (f *Fixture) Snapshot(name, volumeID string) string {
	f.T.Helper()
	response, err := f.Controller.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		f.T.Fatalf("CreateSnapshot(%q): %v", name, err)
	}
	return response.GetSnapshot().GetSnapshotId()
}

// DeleteVolume deletes a volume through the controller.
func (f *Fixture) DeleteVolume(volumeID string) {
	f.T.Helper()
	if _, err := f.Controller.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: volumeID}); err != nil {
		f.T.Fatalf("DeleteVolume(%q): %v", volumeID, err)
	}
}

// DeleteSnapshot deletes a snapshot through the controller.
func (f *Fixture) DeleteSnapshot(snapshotID string) {
	f.T.Helper()
	if _, err := f.Controller.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: snapshotID}); err != nil {
		f.T.Fatalf("DeleteSnapshot(%q): %v", snapshotID, err)
	}
}

// Set sets properties behind the driver's back, as an operator (or a bug) would.
func (f *Fixture) Set(dataset string, properties map[string]string) {
	f.T.Helper()
	if err := f.Fake.Set(context.Background(), dataset, properties); err != nil {
		f.T.Fatal(err)
	}
}

// Dataset is the dataset of a volume ID.
func Dataset(volumeID string) string {
	_, dataset, _ := strings.Cut(volumeID, ":")
	return dataset
}

// ZvolDevice makes the device node name (zd0, …) in the fixture's /dev and
// the /dev/zvol link of dataset pointing at it; it returns the node's path.
func (f *Fixture) ZvolDevice(dataset, name string) string {
	f.T.Helper()
	device := filepath.Join(f.Host.DevDir, name)
	link := f.Host.ZvolLink(dataset)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		f.T.Fatal(err)
	}
	if err := os.WriteFile(device, nil, 0o600); err != nil {
		f.T.Fatal(err)
	}
	if err := os.Symlink(device, link); err != nil {
		f.T.Fatal(err)
	}
	return device
}

// MountDataset adds a mount of a dataset (a staging mount or a bind of it).
func (f *Fixture) MountDataset(dataset, path string) {
	f.addMount("/", path, "zfs", dataset)
}

// MountFilesystem adds a filesystem on a device node.
func (f *Fixture) MountFilesystem(device, fsType, path string) {
	f.addMount("/", path, fsType, device)
}

// BindDevice adds a bind mount of a device node (name like "zd0"), as raw
// block staging and publishing make; deleted marks the node gone.
func (f *Fixture) BindDevice(name, path string, deleted bool) {
	root := "/" + name
	if deleted {
		root += "//deleted"
	}
	f.addMount(root, path, "devtmpfs", "udev")
}

func (f *Fixture) addMount(root, path, fsType, source string) {
	id := 200 + len(f.mountLines)
	f.mountLines = append(f.mountLines, strings.Join([]string{strconv.Itoa(id), "25", "0:50", root, path,
		"rw,relatime", "shared:1", "-", fsType, source, "rw"}, " "))
	f.writeMountInfo()
}

func (f *Fixture) writeMountInfo() {
	lines := append([]string{"25 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw"}, f.mountLines...)
	if err := os.WriteFile(f.Host.MountInfo, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		f.T.Fatal(err)
	}
}

// Read reads the inventory and places it on the mount table, as the
// operator commands do.
func (f *Fixture) Read() inventory.Inventory {
	f.T.Helper()
	inv, err := inventory.Read(context.Background(), f.Fake, f.Config)
	if err != nil {
		f.T.Fatal(err)
	}
	mounts, err := f.Host.Mounts()
	if err != nil {
		f.T.Fatal(err)
	}
	f.Host.Place(&inv, mounts)
	return inv
}
