// Package wiring builds what the daemon runs, in one constructor
// (NewDaemon): the CSI services zfs-csi serves (Identity, Controller with
// GroupController, Node and SnapshotMetadata over one ZFS and one host),
// the peer channel's services and the forwarding of calls to other nodes,
// the services as the socket kubelet uses adapts them
// (KubernetesServices), the sockets that serve them, the reaper and the
// metrics listener. It is the only place they are wired, so that what the
// daemon runs (cli/daemon keeps only its flags, signals, logger and
// service-manager notifications) and what the csi-sanity test and the
// commands' tests run against the fakes cannot drift apart.
package wiring

import (
	"context"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/zfs-csi/zfs-csi/controller"
	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/snapmeta"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Services are the CSI services wired together: what a rpc.Server serves
// (CSI), and the controller again for the reaper the daemon runs beside it.
type Services struct {
	CSI        rpc.Services
	Controller *controller.Server
	// Peers dials other nodes' daemons; nil until ConnectPeers configures
	// the channel.
	Peers *peer.Client
	cfg   rules.Config
	zfs   zfs.Interface
}

// newServices wires the services over z and the host mounter reaches.
// Identity's Probe reports ready while the parent datasets can hold
// volumes.
func newServices(cfg rules.Config, z zfs.Interface, mounter node.Mounter, log zerolog.Logger, nodeOptions node.Options) (*Services, error) {
	controllerService, err := controller.New(cfg, z, log)
	if err != nil {
		return nil, err
	}
	ready := func(ctx context.Context) error { return inventory.CheckParents(ctx, z, cfg) }
	nodeService := node.New(cfg, z, mounter, log, nodeOptions)
	// A move's final round asks whether this host still uses the volume.
	controllerService.UseHost(nodeService.InUse, nodeService.ContentOf)
	return &Services{Controller: controllerService, cfg: cfg, zfs: z, CSI: rpc.Services{
		Identity:         rpc.NewIdentity(cfg, log, ready, true),
		Controller:       controllerService,
		GroupController:  controllerService.Group(),
		Node:             nodeService,
		SnapshotMetadata: snapmeta.New(cfg, z),
	}}, nil
}

// OperatorServer is the server of the operator's socket: the acts only the
// host's operator may start (a move's rounds), never served where a CO
// calls. Extra interceptors (metrics) run outermost, as on the CSI sockets.
func (s *Services) OperatorServer(log zerolog.Logger, extra ...grpc.UnaryServerInterceptor) *rpc.Server {
	return rpc.NewOperatorServer(log, &controller.OperatorServiceDesc, s.Controller, extra...)
}

// ConnectPeers opens the channel between daemons when cfg configures it
// (decision 14; off otherwise, and then it returns nil and changes
// nothing). The controller pulls other nodes' snapshots through it; the
// server sends this node's (peer.Transfer). The files are checked at
// once, so a daemon with a broken configuration stops at start. The returned server, listening already
// when cfg.Listen is set (nil when not), is where services for peers are
// registered; the caller serves and stops it.
func (s *Services) ConnectPeers(cfg peer.Config, log zerolog.Logger) (*peer.Server, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	s.Peers = peer.NewClient(cfg)
	s.Controller.UseTransfers(s.Peers)
	if cfg.Listen == "" {
		return nil, nil
	}
	server := peer.NewServer(cfg, log)
	peer.NewTransfer(s.cfg, s.zfs, cfg.MaxStreams).Register(server)
	forward.RegisterPeerOnly(server, &controller.PullsServiceDesc, s.Controller, peer.CallerNode)
	if err := server.Listen(); err != nil {
		return nil, err
	}
	return server, nil
}
