package wiring

import (
	"context"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
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

func TestKubernetesServices(t *testing.T) {
	controller := stubController{expanded: make(chan int64, 1)}
	node := stubNode{expanded: make(chan *csi.NodeExpandVolumeRequest, 1)}
	services := KubernetesServices(rpc.Services{Controller: controller, Node: node})

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

	t.Run("with calls forwarded to their nodes expansion and modification are advertised", func(t *testing.T) {
		forwarding := KubernetesServices(rpc.Services{Controller: controller, Node: node, Forward: forward.Forward(rules.Config{NodeID: "node-a"}, nil)})
		resp, err := forwarding.Controller.ControllerGetCapabilities(t.Context(), &csi.ControllerGetCapabilitiesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var got []csi.ControllerServiceCapability_RPC_Type
		for _, capability := range resp.GetCapabilities() {
			got = append(got, capability.GetRpc().GetType())
		}
		for _, want := range hiddenFromKubernetes {
			if !slices.Contains(got, want) {
				t.Errorf("capabilities = %v, want %v among them", got, want)
			}
		}
	})

	t.Run("without a controller the services are served as they are", func(t *testing.T) {
		nodeOnly := KubernetesServices(rpc.Services{Node: node})
		if _, ok := nodeOnly.Node.(stubNode); !ok {
			t.Errorf("node service = %T, want it unchanged", nodeOnly.Node)
		}
	})
}
