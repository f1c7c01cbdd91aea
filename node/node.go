// Package node implements the CSI Node service: it tells the CO which node it
// is and where that node sits in the topology. Staging and publishing
// (mounting datasets, formatted zvols and raw block devices) come next; until
// then those RPCs answer UNIMPLEMENTED and no node capability is advertised.
package node

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/driver"
)

// Server is the CSI Node service.
type Server struct {
	csi.UnimplementedNodeServer
	cfg               driver.Config
	maxVolumesPerNode int64
}

// New builds the service; maxVolumesPerNode 0 means unlimited.
func New(cfg driver.Config, maxVolumesPerNode int64) *Server {
	return &Server{cfg: cfg, maxVolumesPerNode: maxVolumesPerNode}
}

// NodeGetInfo implements csi.NodeServer: the node ID and the topology segment
// the controller puts on every volume of this node.
func (s *Server) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             s.cfg.NodeID,
		MaxVolumesPerNode:  s.maxVolumesPerNode,
		AccessibleTopology: &csi.Topology{Segments: s.cfg.Topology()},
	}, nil
}

// NodeGetCapabilities implements csi.NodeServer.
func (s *Server) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}
