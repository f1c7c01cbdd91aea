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
	// MetricsAddress is where Prometheus metrics are served ("" for
	// nowhere; a bare port binds loopback: metrics.ListenAddress), behind
	// MetricsWebConfig, exporter-toolkit's web configuration file ("" for
	// plain HTTP). The metrics count every call of every socket and every
	// zfs command.
	MetricsAddress   string
	MetricsWebConfig string
	// Ready is told the sockets once they all listen and Run serves;
	// Stopping is called when the stop begins, once the metrics listener
	// stopped and before the CSI sockets go, with the stop timeout's
	// context. Either may be nil.
	Ready    func(sockets []string)
	Stopping func(ctx context.Context)
	// ZFS and Mounter are the host; nil means the real ones (zfs.Exec,
	// node.NewMounter). Tests give fakes.
	ZFS     zfs.Interface
	Mounter node.Mounter
}

// Daemon is everything the daemon runs: the services over one ZFS and one
// host, the CSI socket, the operator's socket, kubelet's sockets, the peer
// channel, the reaper and the metrics listener.
type Daemon struct {
	opts      DaemonOptions
	zfs       zfs.Interface
	services  *Services
	server    *rpc.Server
	operator  *rpc.Server
	kubelet   *kubelet.Server
	peers     *peer.Server
	telemetry *telemetry
}

// NewDaemon listens for metrics, checks that the parent datasets can hold
// volumes, wires the services and listens on every socket; Run serves
// them. A parent that is missing fails it ("cannot start"): the service
// manager tries again.
func NewDaemon(ctx context.Context, opts DaemonOptions) (*Daemon, error) {
	d := &Daemon{opts: opts, zfs: opts.ZFS}
	var err error
	// The metrics come first: the zfs runner reports every command to them.
	if d.telemetry, err = listenMetrics(opts, d.readMetrics); err != nil {
		return nil, err
	}
	if d.zfs == nil {
		d.zfs = zfs.NewExec(zfs.ExecConfig{Logger: opts.Log, OnCommand: d.telemetry.onCommand()})
	}
	mounter := opts.Mounter
	if mounter == nil {
		mounter = node.NewMounter(opts.Log)
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = inventory.CheckParents(startCtx, d.zfs, opts.Config)
	cancel()
	if err != nil {
		d.telemetry.close()
		return nil, fmt.Errorf("cannot start: %w", err)
	}
	if d.services, err = newServices(opts.Config, d.zfs, mounter, opts.Log, opts.Node); err != nil {
		d.telemetry.close()
		return nil, err
	}
	if err := d.listen(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// listen opens the peer channel, then the CSI, operator's and kubelet's
// sockets, the interceptors of the metrics outermost on each.
func (d *Daemon) listen() error {
	var err error
	if d.peers, err = d.services.ConnectPeers(d.opts.Peer, d.opts.Log); err != nil {
		return err
	}
	d.services.ForwardCalls(d.opts.Config, d.peers)
	interceptors := d.telemetry.interceptors()
	d.server = rpc.NewServer(d.opts.Log, d.services.CSI, interceptors...)
	if err := d.server.Listen(d.opts.Endpoint); err != nil {
		d.server = nil
		return err
	}
	if err := d.listenOperator(interceptors); err != nil {
		return err
	}
	if d.opts.Kubernetes {
		d.kubelet = kubelet.New(d.opts.Log, d.kubeletConfig(), KubernetesServices(d.services.CSI), interceptors...)
		if err := d.kubelet.Listen(); err != nil {
			d.kubelet = nil
			return err
		}
	}
	return nil
}

func (d *Daemon) kubeletConfig() kubelet.Config {
	return kubelet.Config{Dir: d.opts.KubeletDir, DriverName: d.opts.Config.DriverName}
}

// listenOperator listens on the operator's socket and serves it.
func (d *Daemon) listenOperator(interceptors []grpc.UnaryServerInterceptor) error {
	endpoint, err := rpc.OperatorEndpoint(d.opts.Endpoint, d.opts.OperatorSocket)
	if err != nil {
		return err
	}
	server := d.services.OperatorServer(d.opts.Log, interceptors...)
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

// readMetrics reads the pool and volume state the metrics show
// (MetricsState) from the daemon's ZFS.
func (d *Daemon) readMetrics(ctx context.Context) (metrics.State, error) {
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
	go d.telemetry.serve(log)
	if d.peers != nil {
		go func() {
			if err := d.peers.Serve(); err != nil {
				log.Error().Err(err).Msg("peer channel stopped")
			}
		}()
	}
	go d.services.Controller.RunReaper(ctx, d.opts.ReapInterval)
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
	d.telemetry.wait()
	return nil
}

// Close stops at once what NewDaemon started, for a daemon that is not run.
func (d *Daemon) Close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.stop(ctx, false)
}

// stop stops the peer channel, the operator's socket and the metrics
// listener, then (after Stopping, when the daemon ran) the kubelet sockets
// (registration first) and the main server side by side, so that one's
// calls under way do not eat the other's share of the stop timeout. The
// connections to peers go last: a call under way may still forward.
func (d *Daemon) stop(ctx context.Context, ran bool) {
	d.services.Controller.Close()
	if d.peers != nil {
		d.peers.Stop(ctx)
	}
	if d.operator != nil {
		d.operator.Stop(ctx)
	}
	if ran {
		d.telemetry.stop(ctx)
		if d.opts.Stopping != nil {
			d.opts.Stopping(ctx)
		}
	} else {
		d.telemetry.close()
	}
	var wg sync.WaitGroup
	if d.kubelet != nil {
		wg.Go(func() { d.kubelet.Stop(ctx) })
	}
	if d.server != nil {
		wg.Go(func() { d.server.Stop(ctx) })
	}
	wg.Wait()
	d.services.Peers.Close()
}

// MetricsAddress is where the metrics listener listens (host:port, the
// port the kernel chose when MetricsAddress asked for 0); "" when metrics
// are off.
func (d *Daemon) MetricsAddress() string { return d.telemetry.address() }

// PeerAddress is where the peer channel listens (host:port); "" when this
// node serves no peers.
func (d *Daemon) PeerAddress() string {
	if d.peers == nil {
		return ""
	}
	return d.peers.Addr().String()
}
