package wiring

import (
	"context"

	"google.golang.org/grpc"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/rules"
)

// PeerConns is the peer channel's client as the forwarding of controller
// calls uses it (forward.Peers).
type PeerConns struct{ Client *peer.Client }

// Conn implements forward.Peers.
func (p PeerConns) Conn(ctx context.Context, nodeID string) (grpc.ClientConnInterface, error) {
	conn, err := p.Client.Dial(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// ForwardCalls, once ConnectPeers opened the channel, sends the controller
// calls for other nodes' volumes to their daemons (forward.Forward) and
// answers theirs for this node's on server (nil when this node does not
// serve peers). Without a channel it changes nothing: every call is
// answered here, another node's refused as before. Call it before the
// services are served.
func (s *Services) ForwardCalls(cfg rules.Config, server *peer.Server) {
	if s.Peers == nil {
		return
	}
	s.CSI.Forward = forward.Forward(cfg, PeerConns{Client: s.Peers})
	s.CSI.ForwardStreams = forward.ForwardStreams(cfg, PeerConns{Client: s.Peers})
	if server != nil {
		forward.RegisterPeerServices(server, cfg, s.CSI, peer.CallerNode)
	}
}
