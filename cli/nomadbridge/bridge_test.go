package nomadbridge

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/node/nodetest"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/wiring"
	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// bridgeFixture is a daemon (Identity and a real Controller over the
// stateful fake ZFS) on its own socket, and a bridge in front of it on the
// socket Nomad would use.
type bridgeFixture struct {
	fake          *zfstest.Fake
	daemonSocket  string
	bridgeSocket  string
	stopDaemon    func()
	stopBridge    context.CancelFunc
	bridgeStopped chan error
}

func startDaemon(t *testing.T, fake *zfstest.Fake, socket string) func() {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t))
	cfg := rules.Config{DriverName: "zfs.csi.dev", Version: "test", NodeID: "node-a", ParentDatasets: []string{"tank/csi"}}
	_, stop := wiringtest.RunDaemon(t, wiring.DaemonOptions{Config: cfg, Log: log, ZFS: fake, Mounter: nodetest.NewFakeMounter(),
		Endpoint: "unix://" + socket, ReapInterval: time.Hour, StopTimeout: time.Second})
	return stop
}

func newBridgeFixture(t *testing.T) *bridgeFixture {
	t.Helper()
	dir, err := os.MkdirTemp("", "bridge")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &bridgeFixture{
		fake:          zfstest.NewFake(map[string]uint64{"tank": 1 << 40}),
		daemonSocket:  filepath.Join(dir, "daemon", "csi.sock"),
		bridgeSocket:  filepath.Join(dir, "nomad", "csi.sock"),
		bridgeStopped: make(chan error, 1),
	}
	if err := f.fake.Create(context.Background(), "tank/csi", zfs.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.stopDaemon = startDaemon(t, f.fake, f.daemonSocket)
	t.Cleanup(func() { f.stopDaemon() })

	bridge, err := newBridge("unix://"+f.bridgeSocket, "unix://"+f.daemonSocket, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.stopBridge = cancel
	go func() { f.bridgeStopped <- bridge.serve(ctx) }()
	t.Cleanup(cancel)
	return f
}

// client dials the bridge the way Nomad's CSI client does.
func (f *bridgeFixture) client(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+f.bridgeSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func datasets(t *testing.T, fake *zfstest.Fake) []string {
	t.Helper()
	rows, err := fake.List(context.Background(), zfs.ListOptions{Roots: []string{"tank"}, Depth: -1,
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, row := range rows {
		names = append(names, row.Name)
	}
	return names
}

// long: subtests on one shared fixture, one behaviour each
func TestNomadBridge(t *testing.T) {
	f := newBridgeFixture(t)
	conn := f.client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	t.Run("an Identity call reaches the daemon through the bridge", func(t *testing.T) {
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if info.GetName() != "zfs.csi.dev" || info.GetVendorVersion() != "test" {
			t.Errorf("GetPluginInfo = %v", info)
		}
		probe, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
		if err != nil || !probe.GetReady().GetValue() {
			t.Errorf("Probe = %v, %v", probe, err)
		}
	})

	t.Run("the bridge socket is owner-only", func(t *testing.T) {
		info, err := os.Lstat(f.bridgeSocket)
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("bridge socket: %v, %v", info, err)
		}
	})

	controllerClient := csi.NewControllerClient(conn)
	mount := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}

	// Nomad sends controller calls to any node that runs the plugin: these
	// are the answers a node gives when the volume is not its own.
	tests := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{
			name: "a create whose topology requires another node is refused and creates nothing",
			call: func() error {
				_, err := controllerClient.CreateVolume(ctx, &csi.CreateVolumeRequest{
					Name: "elsewhere", VolumeCapabilities: mount,
					AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{
						{Segments: map[string]string{"zfs.csi.dev/node": "node-b"}},
					}},
				})
				return err
			},
			want: codes.ResourceExhausted,
		},
		{
			name: "deleting another node's volume fails so that the CO does not forget it",
			call: func() error {
				_, err := controllerClient.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "node-b:tank/csi/pvc-1"})
				return err
			},
			want: codes.FailedPrecondition,
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			before := datasets(t, f.fake)
			if err := test.call(); status.Code(err) != test.want {
				t.Errorf("code = %v (%v), want %v", status.Code(err), err, test.want)
			}
			if after := datasets(t, f.fake); strings.Join(after, " ") != strings.Join(before, " ") {
				t.Errorf("datasets changed: %v → %v", before, after)
			}
		})
	}

	t.Run("a create for this node goes through and lands on this node", func(t *testing.T) {
		resp, err := controllerClient.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: "here", VolumeCapabilities: mount,
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
			AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{
				{Segments: map[string]string{"zfs.csi.dev/node": "node-a"}},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(resp.GetVolume().GetVolumeId(), "node-a:tank/csi/") {
			t.Errorf("volume ID = %q", resp.GetVolume().GetVolumeId())
		}
	})
}

func TestNomadBridgeFollowsTheDaemon(t *testing.T) {
	f := newBridgeFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// The daemon started again serves the later subtests too: it stops
	// with the whole test, not with the subtest that starts it.
	whole := t

	t.Run("with the daemon down a call fails and the bridge keeps running", func(t *testing.T) {
		f.stopDaemon()
		_, err := csi.NewIdentityClient(f.client(t)).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("code = %v (%v), want Unavailable", status.Code(err), err)
		}
		select {
		case err := <-f.bridgeStopped:
			t.Fatalf("the bridge stopped: %v", err)
		default:
		}
	})

	t.Run("once the daemon is back new connections reach it", func(t *testing.T) {
		f.stopDaemon = startDaemon(whole, f.fake, f.daemonSocket)
		if _, err := csi.NewIdentityClient(f.client(t)).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil {
			t.Error(err)
		}
	})

	t.Run("stopping the bridge closes open connections and removes its socket", func(t *testing.T) {
		conn := f.client(t)
		if _, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil {
			t.Fatal(err)
		}
		f.stopBridge()
		select {
		case err := <-f.bridgeStopped:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the bridge did not stop with a connection open")
		}
		if _, err := os.Lstat(f.bridgeSocket); !os.IsNotExist(err) {
			t.Errorf("socket still there: %v", err)
		}
	})
}

func TestNomadBridgeRefusesToForwardToItself(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "csi.sock")
	if _, err := newBridge("unix://"+socket, socket, zerolog.Nop()); err == nil {
		t.Error("a bridge from a socket to itself was accepted")
	}
}
