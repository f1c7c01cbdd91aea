package driver

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
)

// stubNode answers NodeGetInfo, which kubelet calls right after GetInfo, and
// records NodeExpandVolume.
type stubNode struct {
	csi.UnimplementedNodeServer
	expanded chan *csi.NodeExpandVolumeRequest
}

func (stubNode) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: "node-a"}, nil
}

func (n stubNode) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if n.expanded != nil {
		n.expanded <- req
	}
	return &csi.NodeExpandVolumeResponse{}, nil
}

// stubController advertises expansion and modification and records the
// sizes ControllerExpandVolume was asked for.
type stubController struct {
	csi.UnimplementedControllerServer
	expanded chan int64
}

func (stubController) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var capabilities []*csi.ControllerServiceCapability
	for _, rpc := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	} {
		capabilities = append(capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: rpc}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: capabilities}, nil
}

func (c stubController) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	c.expanded <- req.GetCapacityRange().GetRequiredBytes()
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
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
	cfg := KubeletConfig{Dir: shortTempDir(t), DriverName: "zfs.csi.dev", CheckInterval: 20 * time.Millisecond}
	kubelet := NewKubelet(zerolog.New(zerolog.NewTestWriter(t)), cfg, Services{Node: stubNode{}})
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
	cfg := KubeletConfig{Dir: shortTempDir(t), DriverName: "zfs.csi.dev"}
	first := NewKubelet(zerolog.Nop(), cfg, Services{Node: stubNode{}})
	if err := first.Listen(); err != nil {
		t.Fatal(err)
	}
	defer first.Stop(context.Background())
	second := NewKubelet(zerolog.Nop(), cfg, Services{Node: stubNode{}})
	if err := second.Listen(); err == nil {
		second.Stop(context.Background())
		t.Fatal("a second daemon took over the sockets of a running one")
	}
	registerLikeKubelet(t, cfg.RegistrationSocket())
}

func TestKubernetesServices(t *testing.T) {
	controller := stubController{expanded: make(chan int64, 1)}
	node := stubNode{expanded: make(chan *csi.NodeExpandVolumeRequest, 1)}
	services := KubernetesServices(Services{Controller: controller, Node: node})

	t.Run("expansion and modification are not advertised, the rest is", func(t *testing.T) {
		resp, err := services.Controller.ControllerGetCapabilities(t.Context(), &csi.ControllerGetCapabilitiesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var got []csi.ControllerServiceCapability_RPC_Type
		for _, capability := range resp.GetCapabilities() {
			got = append(got, capability.GetRpc().GetType())
		}
		want := []csi.ControllerServiceCapability_RPC_Type{
			csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
			csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		}
		if !slices.Equal(got, want) {
			t.Errorf("capabilities = %v, want %v", got, want)
		}
	})

	t.Run("a node expansion grows the volume first, then its filesystem", func(t *testing.T) {
		resp, err := services.Node.NodeExpandVolume(t.Context(), &csi.NodeExpandVolumeRequest{
			VolumeId: "node-a:tank/csi/v", VolumePath: "/var/lib/kubelet/pods/p/volumes/v/mount",
			CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := <-controller.expanded; got != 2<<30 {
			t.Errorf("ControllerExpandVolume asked for %d bytes", got)
		}
		if req := <-node.expanded; req.GetVolumeId() != "node-a:tank/csi/v" {
			t.Errorf("the Node service got %v", req)
		}
		if resp.GetCapacityBytes() != 2<<30 {
			t.Errorf("capacity = %d, want the grown size", resp.GetCapacityBytes())
		}
	})

	t.Run("a node expansion without a volume path grows nothing", func(t *testing.T) {
		_, err := services.Node.NodeExpandVolume(t.Context(), &csi.NodeExpandVolumeRequest{VolumeId: "node-a:tank/csi/v"})
		if err == nil {
			t.Fatal("accepted a request without volume_path")
		}
		select {
		case got := <-controller.expanded:
			t.Errorf("ControllerExpandVolume ran for %d bytes", got)
		default:
		}
	})

	t.Run("without a controller the services are served as they are", func(t *testing.T) {
		nodeOnly := KubernetesServices(Services{Node: node})
		if _, ok := nodeOnly.Node.(stubNode); !ok {
			t.Errorf("node service = %T, want it unchanged", nodeOnly.Node)
		}
	})
}
