package kubelet

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/zfs-csi/zfs-csi/rpc"
)

// stubNode answers NodeGetInfo, which kubelet calls right after GetInfo.
type stubNode struct {
	csi.UnimplementedNodeServer
}

func (stubNode) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: "node-a"}, nil
}

// shortTempDir keeps socket paths under the 108-byte limit of sun_path.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// waitFor polls until ok or fails the test after a few seconds.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isSocket(path string) bool {
	info, err := os.Lstat(path)
	return err == nil && info.Mode()&os.ModeSocket != 0
}

// registerLikeKubelet does what kubelet's plugin watcher does with a new
// registration socket: GetInfo, NodeGetInfo on the endpoint it names, then
// NotifyRegistrationStatus.
func registerLikeKubelet(t *testing.T, registrationSocket string) *registerapi.PluginInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	registration := registerapi.NewRegistrationClient(dial(t, registrationSocket))
	info, err := registration.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	node, err := csi.NewNodeClient(dial(t, info.GetEndpoint())).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatalf("NodeGetInfo on the endpoint GetInfo named: %v", err)
	}
	if node.GetNodeId() != "node-a" {
		t.Errorf("NodeGetInfo node ID = %q", node.GetNodeId())
	}
	if _, err := registration.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	return info
}

func TestKubeletRegistration(t *testing.T) {
	cfg := Config{Dir: shortTempDir(t), DriverName: "zfs.csi.dev", CheckInterval: 20 * time.Millisecond}
	kubelet := New(zerolog.New(zerolog.NewTestWriter(t)), cfg, rpc.Services{Node: stubNode{}})
	if err := kubelet.Listen(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			kubelet.Stop(context.Background())
		}
	})

	t.Run("the sockets are where kubelet looks, readable by root only", func(t *testing.T) {
		for _, path := range []string{
			filepath.Join(cfg.Dir, "plugins", "zfs.csi.dev", "csi.sock"),
			filepath.Join(cfg.Dir, "plugins_registry", "zfs.csi.dev-reg.sock"),
		} {
			info, err := os.Lstat(path)
			if err != nil || info.Mode()&os.ModeSocket == 0 || info.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, %v; want a socket with mode 0600", path, info, err)
			}
		}
	})

	t.Run("kubelet gets the plugin info and registers the plugin", func(t *testing.T) {
		info := registerLikeKubelet(t, cfg.RegistrationSocket())
		want := &registerapi.PluginInfo{Type: "CSIPlugin", Name: "zfs.csi.dev", Endpoint: cfg.CSISocket(), SupportedVersions: []string{"1.0.0"}}
		if info.GetType() != want.Type || info.GetName() != want.Name || info.GetEndpoint() != want.Endpoint ||
			!slices.Equal(info.GetSupportedVersions(), want.SupportedVersions) {
			t.Errorf("GetInfo = %v, want %v", info, want)
		}
		if status := kubelet.RegistrationStatus(); !status.GetPluginRegistered() {
			t.Errorf("registration status = %v, want registered", status)
		}
	})

	t.Run("a refusal from kubelet is recorded with its reason", func(t *testing.T) {
		registration := registerapi.NewRegistrationClient(dial(t, cfg.RegistrationSocket()))
		_, err := registration.NotifyRegistrationStatus(t.Context(), &registerapi.RegistrationStatus{Error: "version 1.0.0 unsupported"})
		if err != nil {
			t.Fatal(err)
		}
		if status := kubelet.RegistrationStatus(); status.GetPluginRegistered() || status.GetError() != "version 1.0.0 unsupported" {
			t.Errorf("registration status = %v", status)
		}
	})

	t.Run("removed sockets are recreated and serve again", func(t *testing.T) {
		for _, path := range []string{cfg.CSISocket(), cfg.RegistrationSocket()} {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "both sockets to come back", func() bool {
			return isSocket(cfg.CSISocket()) && isSocket(cfg.RegistrationSocket())
		})
		registerLikeKubelet(t, cfg.RegistrationSocket())
	})

	t.Run("a removed plugin directory is recreated with its socket", func(t *testing.T) {
		if err := os.RemoveAll(filepath.Dir(cfg.CSISocket())); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the CSI socket to come back", func() bool { return isSocket(cfg.CSISocket()) })
		registerLikeKubelet(t, cfg.RegistrationSocket())
	})

	t.Run("stopping removes both sockets", func(t *testing.T) {
		stopped = true
		kubelet.Stop(context.Background())
		for _, path := range []string{cfg.CSISocket(), cfg.RegistrationSocket()} {
			if _, err := os.Lstat(path); !os.IsNotExist(err) {
				t.Errorf("%s still exists after Stop (%v)", path, err)
			}
		}
	})
}

func TestKubeletListenRefusesASocketAnotherProcessServes(t *testing.T) {
	cfg := Config{Dir: shortTempDir(t), DriverName: "zfs.csi.dev"}
	first := New(zerolog.Nop(), cfg, rpc.Services{Node: stubNode{}})
	if err := first.Listen(); err != nil {
		t.Fatal(err)
	}
	defer first.Stop(context.Background())
	second := New(zerolog.Nop(), cfg, rpc.Services{Node: stubNode{}})
	if err := second.Listen(); err == nil {
		second.Stop(context.Background())
		t.Fatal("a second daemon took over the sockets of a running one")
	}
	registerLikeKubelet(t, cfg.RegistrationSocket())
}
