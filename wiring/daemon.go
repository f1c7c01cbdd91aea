package wiring

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/metrics"
	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rpc/kubelet"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// DaemonOptions are what the daemon serves and where; the command fills
// them from its flags, the tests from their fixtures.
type DaemonOptions struct {
	Config rules.Config
	Log    zerolog.Logger
	// Endpoint is the CSI socket; OperatorSocket the operator's ("" for
	// operator.sock beside it, rpc.OperatorEndpoint).
	Endpoint       string
	OperatorSocket string
	Node           node.Options
	// Kubernetes also serves the services at kubelet's socket, adapted
	// (KubernetesServices), and registers them with kubelet in KubeletDir.
	Kubernetes bool
	KubeletDir string
	// Peer is the channel between daemons; off unless configured.
	Peer         peer.Config
	ReapInterval time.Duration
	// StopTimeout is how long calls under way may finish once Run's
	// context is done.
	StopTimeout time.Duration
	// Interceptors wrap every call of every socket, outermost (metrics);
	// OnCommand sees every zfs command (metrics).
	Interceptors []grpc.UnaryServerInterceptor
	OnCommand    func(command string, took time.Duration, err error)
	// Ready is told the sockets once they all listen and Run serves;
	// Stopping is called when the stop begins, before the CSI sockets go,
	// with the stop timeout's context. Either may be nil.
	Ready    func(sockets []string)
	Stopping func(ctx context.Context)
	// ZFS and Mounter are the host; nil means the real ones (zfs.Exec,
	// node.NewMounter). Tests give fakes.
	ZFS     zfs.Interface
	Mounter node.Mounter
}

// Daemon is everything the daemon runs: the services over one ZFS and one
// host, the CSI socket, the operator's socket, kubelet's sockets, the peer
// channel and the reaper.
type Daemon struct {
	opts     DaemonOptions
	zfs      zfs.Interface
	plugin   *Plugin
	server   *rpc.Server
	operator *rpc.Server
	kubelet  *kubelet.Server
	peers    *peer.Server
}

// NewDaemon checks that the parent datasets can hold volumes, wires the
// services and listens on every socket; Run serves them. A parent that is
// missing fails it ("cannot start"): the service manager tries again.
func NewDaemon(ctx context.Context, opts DaemonOptions) (*Daemon, error) {
	log := opts.Log
	z := opts.ZFS
	if z == nil {
		z = zfs.NewExec(zfs.ExecConfig{Logger: log, OnCommand: opts.OnCommand})
	}
	mounter := opts.Mounter
	if mounter == nil {
		mounter = node.NewMounter(log)
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err := inventory.CheckParents(startCtx, z, opts.Config)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("cannot start: %w", err)
	}
	plugin, err := New(opts.Config, z, mounter, log, opts.Node)
	if err != nil {
		return nil, err
	}
	d := &Daemon{opts: opts, zfs: z, plugin: plugin}
	if d.peers, err = plugin.ConnectPeers(opts.Peer, log); err != nil {
		return nil, err
	}
	plugin.ForwardCalls(opts.Config, d.peers)
	d.server = rpc.NewServer(log, plugin.Services, opts.Interceptors...)
	if err := d.server.Listen(opts.Endpoint); err != nil {
		return nil, err
	}
	if err := d.listenOperator(); err != nil {
		d.Close()
		return nil, err
	}
	if opts.Kubernetes {
		d.kubelet = kubelet.New(log, d.kubeletConfig(), KubernetesServices(plugin.Services), opts.Interceptors...)
		if err := d.kubelet.Listen(); err != nil {
			d.kubelet = nil
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

func (d *Daemon) kubeletConfig() kubelet.Config {
	return kubelet.Config{Dir: d.opts.KubeletDir, DriverName: d.opts.Config.DriverName}
}

// listenOperator listens on the operator's socket and serves it.
func (d *Daemon) listenOperator() error {
	endpoint, err := rpc.OperatorEndpoint(d.opts.Endpoint, d.opts.OperatorSocket)
	if err != nil {
		return err
	}
	server := d.plugin.OperatorServer(d.opts.Log, d.opts.Interceptors...)
	if err := server.Listen(endpoint); err != nil {
		return err
	}
	d.operator = server
	go func() {
		if err := server.Serve(); err != nil {
			d.opts.Log.Error().Err(err).Msg("the operator's socket stopped")
		}
	}()
	return nil
}

// ReadMetrics reads the pool and volume state the metrics show
// (MetricsState) from the daemon's ZFS.
func (d *Daemon) ReadMetrics(ctx context.Context) (metrics.State, error) {
	return MetricsState(ctx, d.zfs, d.opts.Config)
}

// Sockets are the CSI sockets the daemon serves: its endpoint, and
// kubelet's in Kubernetes mode.
func (d *Daemon) Sockets() []string {
	sockets := []string{d.opts.Endpoint}
	if d.kubelet != nil {
		sockets = append(sockets, d.kubeletConfig().CSISocket())
	}
	return sockets
}

// Run serves until ctx is done, then lets calls under way finish for
// StopTimeout and removes the sockets.
func (d *Daemon) Run(ctx context.Context) error {
	log := d.opts.Log
	if d.peers != nil {
		go func() {
			if err := d.peers.Serve(); err != nil {
				log.Error().Err(err).Msg("peer channel stopped")
			}
		}()
	}
	go d.plugin.Controller.RunReaper(ctx, d.opts.ReapInterval)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		log.Info().Msg("stopping")
		stopCtx, cancel := context.WithTimeout(context.Background(), d.opts.StopTimeout)
		defer cancel()
		d.stop(stopCtx, true)
	}()
	cfg := d.opts.Config
	log.Info().Str("driver", cfg.DriverName).Str("version", cfg.Version).Str("node", cfg.NodeID).
		Strs("parents", cfg.ParentDatasets).Msg("started")
	if d.opts.Ready != nil {
		d.opts.Ready(d.Sockets())
	}
	if err := d.server.Serve(); err != nil {
		return err
	}
	// Serve returns as soon as the gRPC server stops, before the sockets are
	// removed: wait, or a restart finds them left behind and kubelet keeps
	// a registration whose plugin is gone.
	<-stopped
	return nil
}

// Close stops at once what NewDaemon started, for a daemon that is not run.
func (d *Daemon) Close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.stop(ctx, false)
}

// stop stops the peer channel and the operator's socket, then (after
// Stopping, when the daemon ran) the kubelet sockets (registration first)
// and the main server side by side, so that one's calls under way do not
// eat the other's share of the stop timeout.
func (d *Daemon) stop(ctx context.Context, ran bool) {
	d.plugin.Controller.Close()
	if d.peers != nil {
		d.peers.Stop(ctx)
	}
	if d.operator != nil {
		d.operator.Stop(ctx)
	}
	if ran && d.opts.Stopping != nil {
		d.opts.Stopping(ctx)
	}
	var wg sync.WaitGroup
	if d.kubelet != nil {
		wg.Go(func() { d.kubelet.Stop(ctx) })
	}
	wg.Go(func() { d.server.Stop(ctx) })
	wg.Wait()
}
