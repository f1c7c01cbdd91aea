package daemon

// The daemon's metrics listener (--metrics-address): the metrics package
// counts calls and zfs commands, and reads pools and volumes through the
// inventory package when Prometheus scrapes. The page names PVCs and their
// namespaces, so --metrics-web-config puts TLS and basic authentication in
// front of it with the Prometheus exporters' own web configuration file
// (exporter-toolkit), which Prometheus users already know how to write.

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"
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
}

// newTelemetry listens on opts.metricsAddress, or returns nil when it is empty.
func newTelemetry(log zerolog.Logger, opts options, read func(context.Context) (metrics.State, error)) (*telemetry, error) {
	if opts.metricsAddress == "" {
		return nil, nil
	}
	// Both settings passed their rules (settingRules) before the daemon
	// started anything.
	address, err := metrics.ListenAddress(opts.metricsAddress)
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	m := metrics.New(metrics.Config{DriverName: opts.DriverName, Version: opts.Version, Read: read, Log: log})
	httpLog := stdlog.New(debugWriter{log.With().Str("component", "metrics").Logger()}, "", 0)
	return &telemetry{metrics: m, listener: listener, webConfig: opts.metricsWebConfig,
		server: &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpLog}}, nil
}

// checkWebConfig reads the web configuration file, its certificate and key
// once at start (the rule of --metrics-web-config): a file that cannot serve
// is the operator's mistake, which a restart cannot mend (exit 78), better
// said now than on every scrape.
// exporter-toolkit reads the file again for each connection and request, so
// a renewed certificate or a changed password needs no restart.
func checkWebConfig(path string) error {
	if path == "" {
		return nil
	}
	err := web.Validate(path)
	var prefix bcrypt.InvalidHashPrefixError
	if errors.As(err, &prefix) || errors.Is(err, bcrypt.ErrHashTooShort) {
		// bcrypt's message quotes the first byte of what it was given, which
		// is a password's when one was written where its hash belongs.
		err = errors.New("a password in basic_auth_users is not a bcrypt hash")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
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

// serve blocks serving /metrics until stop.
func (t *telemetry) serve(log zerolog.Logger) {
	if t == nil {
		return
	}
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

func (t *telemetry) stop(ctx context.Context) {
	if t != nil {
		t.server.Shutdown(ctx)
	}
}
