package wiring

// The daemon's metrics listener (DaemonOptions.MetricsAddress): the metrics
// package counts calls and zfs commands, and reads pools and volumes through
// the inventory package when Prometheus scrapes. The page names PVCs and
// their namespaces, so MetricsWebConfig puts TLS and basic authentication in
// front of it with the Prometheus exporters' own web configuration file
// (exporter-toolkit), which Prometheus users already know how to write.

import (
	"context"
	"errors"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/zfs-csi/zfs-csi/metrics"
)

// telemetry is the metrics listener; a nil *telemetry (metrics off) does nothing.
type telemetry struct {
	metrics  *metrics.Metrics
	listener net.Listener
	server   *http.Server
	// webConfig is the exporter-toolkit web configuration file; "" serves
	// plain HTTP to anyone who reaches the address.
	webConfig string
	// served is closed when serve returns.
	served chan struct{}
}

// listenMetrics listens on opts.MetricsAddress, or returns nil when it is
// empty; read is what a scrape shows of pools and volumes.
func listenMetrics(opts DaemonOptions, read func(context.Context) (metrics.State, error)) (*telemetry, error) {
	if opts.MetricsAddress == "" {
		return nil, nil
	}
	// The command held both settings to their rules before the daemon
	// started anything.
	address, err := metrics.ListenAddress(opts.MetricsAddress)
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	log := opts.Log
	m := metrics.New(metrics.Config{DriverName: opts.Config.DriverName, Version: opts.Config.Version, Read: read, Log: log})
	httpLog := stdlog.New(debugWriter{log.With().Str("component", "metrics").Logger()}, "", 0)
	return &telemetry{metrics: m, listener: listener, webConfig: opts.MetricsWebConfig, served: make(chan struct{}),
		server: &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpLog}}, nil
}

// debugWriter takes net/http's own complaints (a TLS handshake given up, a
// plain-HTTP request at the TLS port) to the log at debug level: whoever
// reaches the port can cause them, and they must not flood the journal.
type debugWriter struct{ log zerolog.Logger }

func (w debugWriter) Write(line []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimSuffix(string(line), "\n"))
	return len(line), nil
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

// address is where the listener listens; "" when metrics are off.
func (t *telemetry) address() string {
	if t == nil {
		return ""
	}
	return t.listener.Addr().String()
}

// serve blocks serving /metrics until stop.
func (t *telemetry) serve(log zerolog.Logger) {
	if t == nil {
		return
	}
	defer close(t.served)
	var err error
	if t.webConfig == "" {
		log.Info().Str("address", "http://"+t.listener.Addr().String()+"/metrics").Msg("serving metrics")
		err = t.server.Serve(t.listener)
	} else {
		// web.Serve adds TLS and basic authentication as the file says,
		// reading it again for each connection, and logs which it turned on.
		log.Info().Str("address", t.listener.Addr().String()).Str("web_config", t.webConfig).Msg("serving metrics")
		webLog := slog.New(zerolog.NewSlogHandler(log.With().Str("component", "metrics").Logger()))
		err = web.Serve(t.listener, t.server, &web.FlagConfig{WebConfigFile: &t.webConfig}, webLog)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error().Err(err).Msg("metrics listener failed")
	}
}

// stop ends serve, letting scrapes under way finish within ctx.
func (t *telemetry) stop(ctx context.Context) {
	if t != nil {
		t.server.Shutdown(ctx)
	}
}

// close closes the listener of a daemon that never served it.
func (t *telemetry) close() {
	if t != nil {
		t.listener.Close()
	}
}

// wait returns once serve has returned.
func (t *telemetry) wait() {
	if t != nil {
		<-t.served
	}
}
