// Command zfs-csi is a CSI plugin that turns a host's ZFS pool into volumes
// for Kubernetes and Nomad. It is the one place that knows every package: it
// reads flags and environment, builds the zfs client and the services, and
// hands them to the driver package to serve.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zfs-csi/zfs-csi/controller"
	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/metrics"
	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// version is stamped at build time: -ldflags "-X main.version=…".
var version = "dev"

// options are the daemon's settings; every flag can also come from the
// environment variable named next to it.
type options struct {
	driver.Config
	endpoint     string
	logLevel     string
	logFormat    string
	reapInterval time.Duration
	stopTimeout  time.Duration
	node         node.Options
	kubernetes   bool // host.go: serve and register in kubeletDir too
	kubeletDir   string
	// metricsAddress is where Prometheus metrics are served; "" for nowhere.
	metricsAddress string
}

// stringList is a repeatable flag; from the environment it is comma-separated.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(value string) error {
	*l = append(*l, value)
	return nil
}

// subcommands are the tools besides the daemon, each in its own file
// (cmd_<name>.go). With no subcommand, or with "serve", the daemon runs.
var subcommands = map[string]struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}{}

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	} else if len(args) > 0 {
		if command, ok := subcommands[args[0]]; ok {
			if err := command.run(args[1:], os.Stdout, os.Stderr); err != nil {
				fmt.Fprintf(os.Stderr, "zfs-csi %s: %v\n", args[0], err)
				os.Exit(1)
			}
			return
		}
	}
	if err := run(args, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "zfs-csi:", err)
		os.Exit(exitCode(err))
	}
}

// driverFlags registers the flags that say which datasets are the driver's,
// shared by the daemon and the operator commands; finish completes cfg
// after parsing (parents from the environment) and validates it.
func driverFlags(flags *flag.FlagSet, cfg *driver.Config) (finish func() error) {
	hostname, _ := os.Hostname()
	parents := &stringList{}
	flags.StringVar(&cfg.DriverName, "driver-name", env("ZFS_CSI_DRIVER_NAME", "zfs.csi.dev"), "CSI driver name [ZFS_CSI_DRIVER_NAME]")
	flags.StringVar(&cfg.NodeID, "node-id", env("ZFS_CSI_NODE_ID", hostname), "this node's ID [ZFS_CSI_NODE_ID] (default: the hostname)")
	flags.Var(parents, "parent-dataset", "dataset volumes are created under; repeat for several, the first is the default [ZFS_CSI_PARENT_DATASETS, comma-separated]")
	return func() error {
		cfg.ParentDatasets = *parents
		if len(*parents) == 0 {
			for _, parent := range strings.Split(os.Getenv("ZFS_CSI_PARENT_DATASETS"), ",") {
				if parent = strings.TrimSpace(parent); parent != "" {
					cfg.ParentDatasets = append(cfg.ParentDatasets, parent)
				}
			}
		}
		return cfg.Validate()
	}
}

// endpointFlag registers --endpoint, the daemon's socket.
func endpointFlag(flags *flag.FlagSet, endpoint *string) {
	flags.StringVar(endpoint, "endpoint", env("CSI_ENDPOINT", "unix:///run/zfs-csi/csi.sock"), "CSI unix socket [CSI_ENDPOINT]")
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	opts := options{Config: driver.Config{Version: version}}
	flags := flag.NewFlagSet("zfs-csi", flag.ContinueOnError)
	flags.SetOutput(stderr)
	finishConfig := driverFlags(flags, &opts.Config)
	endpointFlag(flags, &opts.endpoint)
	flags.StringVar(&opts.logLevel, "log-level", env("ZFS_CSI_LOG_LEVEL", "info"), "debug, info, warn or error; SIGUSR1 and SIGUSR2 raise and lower it at run time [ZFS_CSI_LOG_LEVEL]")
	flags.StringVar(&opts.logFormat, "log-format", env("ZFS_CSI_LOG_FORMAT", "auto"), "json, console, journal, or auto: journal under systemd, console on a terminal, json otherwise [ZFS_CSI_LOG_FORMAT]")
	flags.StringVar(&opts.metricsAddress, "metrics-address", env("ZFS_CSI_METRICS_ADDRESS", ""), "serve Prometheus metrics at http://ADDRESS/metrics; a bare port binds loopback; off when empty [ZFS_CSI_METRICS_ADDRESS]")
	flags.DurationVar(&opts.reapInterval, "reap-interval", envDuration("ZFS_CSI_REAP_INTERVAL", time.Minute), "how often deleted volumes held by dependents are checked [ZFS_CSI_REAP_INTERVAL]")
	flags.Int64Var(&opts.node.MaxVolumesPerNode, "max-volumes-per-node", envInt("ZFS_CSI_MAX_VOLUMES_PER_NODE", 0), "volumes the CO may place on this node, 0 for no limit [ZFS_CSI_MAX_VOLUMES_PER_NODE]")
	flags.DurationVar(&opts.node.DeviceTimeout, "device-timeout", envDuration("ZFS_CSI_DEVICE_TIMEOUT", node.DefaultDeviceTimeout), "how long staging waits for a zvol's /dev/zvol link [ZFS_CSI_DEVICE_TIMEOUT]")
	flags.BoolVar(&opts.kubernetes, "kubernetes", envBool("ZFS_CSI_KUBERNETES", false), "also serve at <kubelet-dir>/plugins/<driver-name>/csi.sock and register with kubelet [ZFS_CSI_KUBERNETES]")
	flags.StringVar(&opts.kubeletDir, "kubelet-dir", env("ZFS_CSI_KUBELET_DIR", driver.DefaultKubeletDir), "kubelet's root directory, for --kubernetes [ZFS_CSI_KUBELET_DIR]")
	flags.DurationVar(&opts.stopTimeout, "stop-timeout", envDuration("ZFS_CSI_STOP_TIMEOUT", 30*time.Second), "how long calls under way may finish on SIGTERM [ZFS_CSI_STOP_TIMEOUT]")
	if err := flags.Parse(args); err != nil {
		return opts, err
	}
	if flags.NArg() > 0 {
		return opts, fmt.Errorf("unexpected arguments %q", flags.Args())
	}
	if opts.node.MaxVolumesPerNode < 0 {
		return opts, fmt.Errorf("--max-volumes-per-node must not be negative")
	}
	return opts, finishConfig()
}

func run(args []string, stderr io.Writer) error {
	opts, err := parseOptions(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return configError{err}
	}
	log, level, err := newLogger(opts.logLevel, opts.logFormat, stderr)
	if err != nil {
		return configError{err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	level.followSignals(ctx, log)

	var z *zfs.Exec
	telemetry, err := newTelemetry(log, opts, func(ctx context.Context) (metrics.State, error) { return metricsState(ctx, z, opts.Config) })
	if err != nil {
		return err
	}
	z = zfs.NewExec(zfs.ExecConfig{Logger: log, OnCommand: telemetry.onCommand()})
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = driver.CheckParents(startCtx, z, opts.Config)
	cancel()
	if err != nil {
		return fmt.Errorf("cannot start: %w", err)
	}
	controllerService, err := controller.New(opts.Config, z, log)
	if err != nil {
		return err
	}
	ready := func(ctx context.Context) error { return driver.CheckParents(ctx, z, opts.Config) }
	services := driver.Services{
		Identity:   driver.NewIdentity(opts.Config, log, ready, true),
		Controller: controllerService,
		Node:       node.New(opts.Config, z, node.NewMounter(log), log, opts.node),
	}
	server := driver.NewServer(log, services, telemetry.interceptors()...)
	if err := server.Listen(opts.endpoint); err != nil {
		return err
	}
	kubelet, err := startKubelet(log, opts, services, telemetry.interceptors()...)
	if err != nil {
		server.Stop(ctx)
		return err
	}
	go controllerService.RunReaper(ctx, opts.reapInterval)
	go telemetry.serve(log)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		log.Info().Msg("stopping")
		controllerService.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), opts.stopTimeout)
		defer cancel()
		telemetry.stop(stopCtx)
		stopServing(stopCtx, log, kubelet, server)
	}()
	log.Info().Str("driver", opts.DriverName).Str("version", version).Str("node", opts.NodeID).
		Strs("parents", opts.ParentDatasets).Msg("started")
	notifyReady(log, opts)
	if err := server.Serve(); err != nil {
		return err
	}
	// Serve returns as soon as the gRPC server stops, before the sockets are
	// removed: wait, or a restart finds them left behind and kubelet keeps
	// a registration whose plugin is gone.
	<-stopped
	return nil
}

func env(name, fallback string) string {
	if value, ok := os.LookupEnv(name); ok {
		return value
	}
	return fallback
}

func envInt(name string, fallback int64) int64 {
	if value, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return value
	}
	return fallback
}

func envDuration(name string, fallback time.Duration) time.Duration {
	if value, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return value
	}
	return fallback
}
