// Package metrics exposes zfs-csi's Prometheus metrics: every CSI call and
// every zfs command by outcome and duration, and what ZFS itself says about
// the pools and volumes (read when a scrape finds the last read old, in the
// background, so that a scrape never waits long for zfs).
//
// It knows nothing of CSI handlers or of how volumes are recognised: the
// daemon hands it a gRPC interceptor slot, a zfs command hook and a function
// that reads the current State. Each Metrics has its own registry, so tests
// and several instances never share counters.
package metrics

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// namespace prefixes every metric name.
const namespace = "zfs_csi"

// Config configures Metrics.
type Config struct {
	// DriverName and Version label zfs_csi_build_info.
	DriverName string
	Version    string
	// Read reports the pools and volumes. A scrape that finds the last read
	// older than CacheFor starts one (never two at once); nil leaves the pool
	// and volume metrics out.
	Read func(ctx context.Context) (State, error)
	// CacheFor is how long a State read serves scrapes without another
	// read; 0 means 10 s.
	CacheFor time.Duration
	// ScrapeWait is how long a scrape waits for the read it started; past
	// it the scrape shows the last read's State (zfs_state_age_seconds says
	// how old), or, before any read finished, no pool or volume metrics. 0
	// means 5 s: below Prometheus' default scrape timeout of 10 s.
	ScrapeWait time.Duration
	// ReadTimeout bounds one Read; 0 means 10 minutes. A read runs in the
	// background: the bound only ends one stuck on a suspended pool.
	ReadTimeout time.Duration
	// Log gets a warning when Read fails, and a debug line with each read's
	// duration.
	Log zerolog.Logger
	// WithoutProcessMetrics leaves out the Go runtime and process collectors
	// (tests compare whole expositions).
	WithoutProcessMetrics bool
}

// State is what the pool and volume metrics show.
type State struct {
	Pools []zfs.Pool
	// Parents are the configured parent datasets that exist.
	Parents []Parent
	// Volumes are the live volumes (not those marked deleted).
	Volumes []Volume
	// ReaperBacklog counts volumes marked deleted that still exist, waiting
	// for their snapshots and clones to go.
	ReaperBacklog int
}

// Parent is one parent dataset's space, from the listing that finds the
// volumes (its row comes with them: no command of its own).
type Parent struct {
	Name string
	Pool string
	// Available is what new volumes under it can still take (zfs list -o
	// available): ZFS has already taken thick volumes' refreservations and
	// any quota of the parent out of it, which zpool's free space ignores.
	// CreateVolume answers RESOURCE_EXHAUSTED when a volume does not fit in it.
	Available uint64
	Used      uint64
}

// Volume is one live volume's space accounting.
type Volume struct {
	ID           string // the CSI volume ID
	CSIName      string
	Kind         string // "dataset" or "zvol"
	PVCNamespace string // empty unless the CO passed it
	PVCName      string
	Capacity     uint64
	LogicalUsed  uint64
	Referenced   uint64
	// UsedBySnapshots is the space only the volume's snapshots hold.
	UsedBySnapshots uint64
	CompressRatio   float64
}

// Metrics holds the registry and the instruments the daemon feeds.
type Metrics struct {
	registry        *prometheus.Registry
	state           *stateCollector // nil without Config.Read
	rpcDuration     *prometheus.HistogramVec
	otherNode       *prometheus.CounterVec
	commandDuration *prometheus.HistogramVec
}

// durationBuckets cover a poll answered from memory up to a zfs send of a
// large volume; zfs commands take 0.1 to 1 s each on a slow machine.
var durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// New builds the instruments and registers them, with the state collector
// when cfg.Read is set.
func New(cfg Config) *Metrics {
	if cfg.CacheFor == 0 {
		cfg.CacheFor = 10 * time.Second
	}
	if cfg.ScrapeWait == 0 {
		cfg.ScrapeWait = 5 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 10 * time.Minute
	}
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "rpc_duration_seconds",
			Help:    "CSI calls served, by method and gRPC code, and how long they took (_count is the number of calls).",
			Buckets: durationBuckets,
		}, []string{"method", "code"}),
		otherNode: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "rpc_other_node_refusals_total",
			Help: "CSI calls refused because they belong to another node (Nomad tries each node in turn; a restore asked of a node " +
				"without the snapshot is rescheduled), by method and gRPC code: the driver working as designed, not counted in rpc_duration_seconds.",
		}, []string{"method", "code"}),
		commandDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "zfs_command_duration_seconds",
			Help:    "zfs and zpool commands run, by subcommand and result, and how long they took (_count is the number of commands).",
			Buckets: durationBuckets,
		}, []string{"subcommand", "result"}),
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info", Help: "Always 1; labelled with the driver name and version.",
		ConstLabels: prometheus.Labels{"driver": cfg.DriverName, "version": cfg.Version},
	})
	buildInfo.Set(1)
	m.registry.MustRegister(m.rpcDuration, m.otherNode, m.commandDuration, buildInfo)
	if cfg.Read != nil {
		m.state = newStateCollector(cfg)
	}
	if !cfg.WithoutProcessMetrics {
		m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// UnaryInterceptor counts and times every call. Give it to rpc.NewServer,
// which runs it outside the error mapping, so the code is the one the CO got.
// A refusal of another node's call is counted apart (rpc_other_node_refusals_total):
// on a healthy multi-node Nomad cluster most controller calls a node sees are
// such refusals, and an error ratio that counted them would always fire.
func (m *Metrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		if rpc.RefusedForOtherNode(err) {
			m.otherNode.WithLabelValues(method, status.Code(err).String()).Inc()
		} else {
			m.rpcDuration.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
		}
		return resp, err
	}
}

// ObserveCommand counts and times one zfs or zpool command; it fits
// zfs.ExecConfig.OnCommand.
func (m *Metrics) ObserveCommand(subcommand string, took time.Duration, err error) {
	m.commandDuration.WithLabelValues(subcommand, CommandResult(err)).Observe(took.Seconds())
}

// commandResults name the typed zfs errors as metric label values.
var commandResults = []struct {
	err  error
	name string
}{
	{zfs.ErrNotFound, "not_found"},
	{zfs.ErrExists, "exists"},
	{zfs.ErrBusy, "busy"},
	{zfs.ErrNoSpace, "no_space"},
	{zfs.ErrHasDependents, "has_dependents"},
	{zfs.ErrInvalid, "invalid"},
	{zfs.ErrPoolSuspended, "pool_suspended"},
	{zfs.ErrPoolNotFound, "pool_not_found"},
	{zfs.ErrPermission, "permission"},
	{zfs.ErrParentMissing, "parent_missing"},
	{zfs.ErrHeld, "held"},
	{zfs.ErrReadOnlyPool, "pool_read_only"},
	{zfs.ErrCrossPool, "cross_pool"},
	{zfs.ErrIO, "io_error"},
	{zfs.ErrProgram, "program_error"},
	{context.DeadlineExceeded, "timeout"},
	{context.Canceled, "canceled"},
}

// CommandResult is the result label of a command's error: "ok", the typed
// error's name, or "error" for anything zfs did not explain.
func CommandResult(err error) string {
	if err == nil {
		return "ok"
	}
	for _, result := range commandResults {
		if errors.Is(err, result.err) {
			return result.name
		}
	}
	return "error"
}

// Handler serves the exposition at /metrics, in the text format: the
// registry's instruments, then the pool and volume series written straight
// from the state (stateCollector), gzipped when the scraper accepts it.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	registry := promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		// The registry's handler writes the text format, uncompressed, to
		// the body this handler owns, so that the state's series can follow.
		inner := r.Clone(r.Context())
		inner.Header.Set("Accept", "text/plain;version=0.0.4")
		inner.Header.Del("Accept-Encoding")
		body := io.Writer(w)
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			compressed := gzip.NewWriter(w)
			defer compressed.Close()
			body = compressed
		}
		page := &pageWriter{ResponseWriter: w, body: body}
		registry.ServeHTTP(page, inner)
		if page.status != http.StatusOK || m.state == nil {
			return
		}
		if err := m.state.write(body); err != nil {
			m.state.log.Debug().Err(err).Msg("metrics: writing the page")
		}
	})
	return mux
}

// pageWriter passes the registry handler's headers on and takes its body.
type pageWriter struct {
	http.ResponseWriter
	body   io.Writer
	status int
}

func (p *pageWriter) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
		p.ResponseWriter.WriteHeader(status)
	}
}

func (p *pageWriter) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return p.body.Write(b)
}

// Registry is where the instruments are registered, for tests and for
// adding collectors. The pool and volume series are not in it.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// ListenAddress completes an operator's address: a bare port ("9100") or an
// address without a host (":9100") binds loopback, so metrics are never
// exposed beyond the host unless a host is named ("0.0.0.0:9100").
func ListenAddress(address string) (string, error) {
	if !strings.Contains(address, ":") {
		address = ":" + address
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return "", err
	}
	if port == "" {
		return "", errors.New("metrics address " + address + " has no port")
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
