package daemon

// The daemon's metrics listener (--metrics-address): the metrics package
// counts calls and zfs commands, and reads pools and volumes through the
// inventory package when Prometheus scrapes.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/metrics"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// telemetry is the metrics listener; a nil *telemetry (metrics off) does nothing.
type telemetry struct {
	metrics  *metrics.Metrics
	listener net.Listener
	server   *http.Server
}

// newTelemetry listens on opts.metricsAddress, or returns nil when it is empty.
func newTelemetry(log zerolog.Logger, opts options, read func(context.Context) (metrics.State, error)) (*telemetry, error) {
	if opts.metricsAddress == "" {
		return nil, nil
	}
	address, err := metrics.ListenAddress(opts.metricsAddress)
	if err != nil {
		return nil, configError{err}
	}
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	m := metrics.New(metrics.Config{DriverName: opts.DriverName, Version: opts.Version, Read: read, Log: log})
	return &telemetry{metrics: m, listener: listener,
		server: &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}}, nil
}

func (t *telemetry) onCommand() func(string, time.Duration, error) {
	if t == nil {
		return nil
	}
	return t.metrics.ObserveCommand
}

func (t *telemetry) interceptors() []grpc.UnaryServerInterceptor {
	if t == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{t.metrics.UnaryInterceptor()}
}

// serve blocks serving /metrics until stop.
func (t *telemetry) serve(log zerolog.Logger) {
	if t == nil {
		return
	}
	log.Info().Str("address", "http://"+t.listener.Addr().String()+"/metrics").Msg("serving metrics")
	if err := t.server.Serve(t.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error().Err(err).Msg("metrics listener failed")
	}
}

func (t *telemetry) stop(ctx context.Context) {
	if t != nil {
		t.server.Shutdown(ctx)
	}
}

// metricsState reads what the pool and volume metrics show: one zfs list of
// the volumes (not their snapshots) and one zpool list per pool.
func metricsState(ctx context.Context, z zfs.Interface, cfg driver.Config) (metrics.State, error) {
	inv, err := inventory.ReadVolumes(ctx, z, cfg)
	if err != nil {
		return metrics.State{}, err
	}
	state := metrics.State{Pools: inv.Pools, ReaperBacklog: inv.ReaperBacklog()}
	for _, volume := range inv.Live() {
		state.Volumes = append(state.Volumes, metrics.Volume{
			ID: volume.ID, CSIName: volume.CSIName, Kind: volume.Kind, PVCNamespace: volume.PVCNamespace, PVCName: volume.PVCName,
			Capacity: volume.Capacity, LogicalUsed: volume.LogicalUsed, Referenced: volume.Referenced,
			UsedBySnapshots: volume.UsedBySnapshots, CompressRatio: volume.CompressRatio,
		})
	}
	return state, nil
}
