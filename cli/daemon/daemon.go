// Package daemon is zfs-csi's CSI daemon (zfs-csi [serve]): it reads flags
// and environment, makes the logger, follows signals and speaks the service
// manager's protocol; everything it runs (the zfs runner, the services,
// their sockets, the peer channel, the reaper and the metrics listener) is
// built by wiring.NewDaemon, the constructor the tests use too.
package daemon

import (
	"context"
	"errors"
	"flag"
	"io"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/controller"
	"github.com/zfs-csi/zfs-csi/metrics"
	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/wiring"
)

// options are the daemon's settings; every flag can also come from the
// environment variable named next to it.
type options struct {
	rules.Config
	endpoint     string
	logLevel     string
	logFormat    string
	reapInterval time.Duration
	stopTimeout  time.Duration
	node         node.Options
	kubernetes   bool // host.go: serve and register in kubeletDir too
	kubeletDir   string
	// nomadDataDir is the Nomad client's data_dir, below which Nomad keeps
	// its staging and per-allocation mount points.
	nomadDataDir string
	// metricsAddress is where Prometheus metrics are served; "" for nowhere.
	metricsAddress string
	// metricsWebConfig is exporter-toolkit's web configuration file (TLS,
	// basic authentication) for that listener; "" for plain HTTP.
	metricsWebConfig string
	// peer is the channel between daemons (peer.go); off unless configured.
	peer peer.Config
	// operatorSocket serves the operator's acts (operator.go); "" for
	// operator.sock beside the CSI socket.
	operatorSocket string
}

// Flags is the daemon's flag set, for the help and the manual page, which
// are made from it so that they cannot drift from what the daemon takes.
func Flags() *flag.FlagSet {
	flags, _, _ := declareFlags(&options{})
	return flags
}

// Rules are the daemon's flags with the rule each one's value must meet.
func Rules() (*flag.FlagSet, []envflag.Rule) {
	flags, rules, _ := declareFlags(&options{})
	return flags, rules
}

// parseOptions reads the command line and the environment (systemd put the
// unit's EnvironmentFile there) and checks every setting before anything
// starts: a wrong one is a ConfigError of one line.
func parseOptions(version string, args []string, stderr io.Writer) (options, error) {
	opts := options{Config: rules.Config{Version: version}}
	flags, rules, complete := declareFlags(&opts)
	if err := envflag.Parse(flags, args, envflag.Environment(), rules, stderr); err != nil {
		return opts, err
	}
	return opts, complete()
}

// declareFlags declares the daemon's flags into opts, and their rules;
// complete, after envflag.Parse, fills in what the flags do not set
// directly and checks what the settings must be together.
func declareFlags(opts *options) (flags *flag.FlagSet, flagRules []envflag.Rule, complete func() error) {
	flags = flag.NewFlagSet("zfs-csi", flag.ContinueOnError)
	driverRules, completeConfig := envflag.DeclareDriverConfig(flags, &opts.Config)
	envflag.Endpoint(flags, &opts.endpoint)
	flags.StringVar(&opts.logLevel, "log-level", "info", "debug, info, warn or error; SIGUSR1 and SIGUSR2 raise and lower it at run time [ZFS_CSI_LOG_LEVEL]")
	flags.StringVar(&opts.logFormat, "log-format", "auto", "json, console, journal, or auto: journal under systemd, console on a terminal, json otherwise [ZFS_CSI_LOG_FORMAT]")
	flags.StringVar(&opts.metricsAddress, "metrics-address", "", "serve Prometheus metrics at http://ADDRESS/metrics; a bare port binds loopback; off when empty [ZFS_CSI_METRICS_ADDRESS]")
	flags.StringVar(&opts.metricsWebConfig, "metrics-web-config", "", "Prometheus web configuration file (exporter-toolkit's YAML: TLS, basic auth) for the metrics listener; read again for every connection; plain HTTP when empty [ZFS_CSI_METRICS_WEB_CONFIG]")
	flags.DurationVar(&opts.reapInterval, "reap-interval", time.Minute, "how often deleted volumes held by dependents are checked [ZFS_CSI_REAP_INTERVAL]")
	allowPoolProperties := &envflag.List{}
	flags.Var(allowPoolProperties, controller.AllowPoolPropertiesFlag, "a ZFS property that spends the whole pool ("+strings.Join(controller.PoolPropertyNames(), ", ")+") which volume parameters may set; refused otherwise; repeat for several ["+controller.AllowPoolPropertiesEnv+", comma-separated]")
	flags.Int64Var(&opts.node.MaxVolumesPerNode, "max-volumes-per-node", 0, "volumes the CO may place on this node, 0 for no limit [ZFS_CSI_MAX_VOLUMES_PER_NODE]")
	flags.DurationVar(&opts.node.DeviceTimeout, "device-timeout", node.DefaultDeviceTimeout, "how long staging waits for a zvol's device (its /dev/zvol link, or the node that names it) [ZFS_CSI_DEVICE_TIMEOUT]")
	flags.BoolVar(&opts.kubernetes, "kubernetes", false, "also serve at <kubelet-dir>/plugins/<driver-name>/csi.sock and register with kubelet [ZFS_CSI_KUBERNETES]")
	flags.StringVar(&opts.kubeletDir, "kubelet-dir", rules.DefaultKubeletDir, "kubelet's root directory: staging and target paths may lie below it; with --kubernetes the socket kubelet finds [ZFS_CSI_KUBELET_DIR]")
	flags.StringVar(&opts.nomadDataDir, "nomad-data-dir", node.DefaultNomadDataDir, "the Nomad client's data_dir: staging and target paths may lie below it [ZFS_CSI_NOMAD_DATA_DIR]")
	allowPaths := &envflag.List{}
	flags.Var(allowPaths, "allow-paths", "another directory staging and target paths may lie below, besides kubelet's and Nomad's; repeat for several [ZFS_CSI_ALLOW_PATHS, comma-separated]")
	flags.DurationVar(&opts.stopTimeout, "stop-timeout", 30*time.Second, "how long calls under way may finish on SIGTERM; keep it below the unit's TimeoutStopSec=45s [ZFS_CSI_STOP_TIMEOUT]")
	peerRules, completePeer := declarePeerFlags(flags, &opts.peer)
	operatorRules := declareOperatorFlags(flags, &opts.AllowMoves, &opts.operatorSocket)
	flagRules = slices.Concat(driverRules, settingRules(opts), peerRules, operatorRules)
	return flags, flagRules, func() error {
		if err := completeConfig(envflag.Environment()); err != nil {
			return err
		}
		opts.AllowedPoolProperties = *allowPoolProperties
		opts.node.PathRoots = append([]string{opts.kubeletDir, opts.nomadDataDir}, *allowPaths...)
		if err := completePeer(opts.NodeID); err != nil {
			return envflag.ConfigError{Err: err}
		}
		return checkOperatorSocket(opts.endpoint, opts.operatorSocket, []string{opts.kubeletDir, opts.nomadDataDir})
	}
}

// settingRules is what each of the daemon's own settings must be, whichever
// source gave it (the driver's and the peer channel's rules are declared
// with their flags): envflag.Parse holds them to it before anything starts,
// so that a wrong value stops the daemon (exit 78) instead of failing later
// and restarting forever. TestEveryFlagHasARule keeps it whole.
func settingRules(opts *options) []envflag.Rule {
	pathRoot := envflag.Check{Allowed: "an absolute directory other than /", Test: func(value any) error {
		return node.CheckPathRoots([]string{value.(string)})
	}}
	listenAddress := envflag.Check{Allowed: "PORT or HOST:PORT with a port number", Test: func(value any) error {
		address, err := metrics.ListenAddress(value.(string))
		if err != nil {
			return err
		}
		return envflag.CheckHostPort(address)
	}}
	webConfig := envflag.Check{Allowed: "a Prometheus web configuration file that serves, with --metrics-address set", Test: func(value any) error {
		if opts.metricsAddress == "" {
			return errors.New("--metrics-address is not set: there is no metrics listener to protect")
		}
		return checkWebConfig(value.(string))
	}}
	poolProperties := envflag.Check{Allowed: "some of " + strings.Join(controller.PoolPropertyNames(), ", "), Test: func(value any) error {
		return controller.CheckAllowedPoolProperties(value.([]string))
	}}
	return []envflag.Rule{
		{Flag: "endpoint", Check: envflag.UnixEndpoint},
		{Flag: "log-level", Check: envflag.LogLevel},
		{Flag: "log-format", Check: envflag.OneOf(logFormats...)},
		{Flag: "metrics-address", Check: envflag.Optional(listenAddress, "no metrics listener")},
		{Flag: "metrics-web-config", Check: envflag.Optional(webConfig, "plain HTTP")},
		{Flag: "reap-interval", Check: envflag.PositiveDuration},
		{Flag: controller.AllowPoolPropertiesFlag, Check: poolProperties},
		{Flag: "max-volumes-per-node", Check: envflag.AtLeast(0)},
		{Flag: "device-timeout", Check: envflag.PositiveDuration},
		{Flag: "kubernetes", Check: envflag.Boolean},
		{Flag: "kubelet-dir", Check: envflag.And(pathRoot, envflag.When(&opts.kubernetes, "with --kubernetes (kubelet's --root-dir)", envflag.Directory))},
		{Flag: "nomad-data-dir", Check: pathRoot},
		{Flag: "allow-paths", Check: envflag.Each(pathRoot)},
		{Flag: "stop-timeout", Check: envflag.PositiveDuration},
	}
}

// Run runs the daemon until SIGTERM or SIGINT; version is the binary's.
// An error in the flags or the environment is an envflag.ConfigError (ExitCode).
func Run(version string, args []string, stderr io.Writer) error {
	opts, err := parseOptions(version, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return envflag.ConfigError{Err: err}
	}
	log, level, err := newLogger(opts.logLevel, opts.logFormat, stderr)
	if err != nil {
		return envflag.ConfigError{Err: err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	level.followSignals(ctx, log)

	daemon, err := wiring.NewDaemon(ctx, daemonOptions(opts, log))
	if err != nil {
		return err
	}
	return daemon.Run(ctx)
}

// daemonOptions are what the daemon runs, as its settings say; the command
// adds only the service manager's notifications.
func daemonOptions(opts options, log zerolog.Logger) wiring.DaemonOptions {
	return wiring.DaemonOptions{
		Config: opts.Config, Log: log, Endpoint: opts.endpoint, OperatorSocket: opts.operatorSocket, Node: opts.node,
		Kubernetes: opts.kubernetes, KubeletDir: opts.kubeletDir, Peer: opts.peer,
		ReapInterval: opts.reapInterval, StopTimeout: opts.stopTimeout,
		MetricsAddress: opts.metricsAddress, MetricsWebConfig: opts.metricsWebConfig,
		Ready:    func(sockets []string) { notifyReady(log, sockets) },
		Stopping: func(context.Context) { notify(log, notifyStoppingLine, notifyStatusLine("stopping")) },
	}
}
