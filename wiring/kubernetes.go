package wiring

import (
	"context"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
)

// KubernetesServices adapts the services for the socket Kubernetes uses,
// where every host runs its own sidecars against its own daemon and no
// controller instance can reach another node's volumes.
//
// Expansion: the upstream external-resizer has no per-node mode (it acts on
// every PVC of the driver, so a resizer on each node would call
// ControllerExpandVolume for other nodes' volumes, fail, and race the owner
// over the PVC's status). So this socket leaves EXPAND_VOLUME out of the
// controller capabilities, the resizer falls back to its "trivial" mode
// (it only records the new size and asks kubelet for a node expansion), and
// NodeExpandVolume, which kubelet calls on the node that has the volume,
// first grows the dataset or zvol (ControllerExpandVolume, in process) and
// then its filesystem. One resizer instance (leader-elected) serves the
// cluster. The limit: a volume grows when a pod uses it, not while it is
// unpublished.
//
// MODIFY_VOLUME is left out for the same reason: the resizer's modifier
// would call ControllerModifyVolume for every node's volumes from one place.
//
// With the peer channel (services.Forward) that one place can reach every
// node: each call goes to its volume's daemon, so both capabilities are
// advertised, the resizer expands volumes whether or not a pod uses them,
// and VolumeAttributesClass changes after creation reach ZFS. The node
// expansion's in-process step then finds the volume grown already.
func KubernetesServices(services rpc.Services) rpc.Services {
	adapted := services
	if services.Controller != nil {
		if services.Forward == nil {
			adapted.Controller = kubernetesController{services.Controller}
		}
		if services.Node != nil {
			adapted.Node = kubernetesNode{NodeServer: services.Node, controller: services.Controller}
		}
	}
	return adapted
}

// hiddenFromKubernetes are the controller capabilities the Kubernetes socket
// does not advertise (see KubernetesServices).
var hiddenFromKubernetes = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
}

type kubernetesController struct {
	csi.ControllerServer
}

// ControllerGetCapabilities implements csi.ControllerServer.
func (c kubernetesController) ControllerGetCapabilities(ctx context.Context, req *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp, err := c.ControllerServer.ControllerGetCapabilities(ctx, req)
	if err != nil {
		return nil, err
	}
	kept := make([]*csi.ControllerServiceCapability, 0, len(resp.GetCapabilities()))
	for _, capability := range resp.GetCapabilities() {
		if !slices.Contains(hiddenFromKubernetes, capability.GetRpc().GetType()) {
			kept = append(kept, capability)
		}
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: kept}, nil
}

type kubernetesNode struct {
	csi.NodeServer
	controller csi.ControllerServer
}

// NodeExpandVolume implements csi.NodeServer: the volume grows on this host
// (refquota or volsize), then its filesystem, if it has one of its own.
func (n kubernetesNode) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	grown, err := n.controller.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
		VolumeId:         req.GetVolumeId(),
		CapacityRange:    req.GetCapacityRange(),
		VolumeCapability: req.GetVolumeCapability(),
		Secrets:          req.GetSecrets(),
	})
	if err != nil {
		return nil, err
	}
	resp, err := n.NodeServer.NodeExpandVolume(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.GetCapacityBytes() == 0 {
		resp.CapacityBytes = grown.GetCapacityBytes()
	}
	return resp, nil
}
