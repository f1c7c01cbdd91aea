package daemon

// What ties the daemon to its host: the service manager's readiness protocol,
// Kubernetes registration through kubelet's plugin directory, and the exit
// code that tells systemd a restart cannot help.

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/zfs-csi/zfs-csi/cli/daemon/kubelet"
	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/driver"
)

// ExitCode is the process status for the error Run returned: a
// configuration error (envflag.ConfigError) exits envflag.ExitConfig, which
// the unit's RestartPreventExitStatus=78 keeps systemd from restarting;
// other failures (a pool not imported yet) exit 1 and are retried.
func ExitCode(err error) int {
	if errors.As(err, new(envflag.ConfigError)) {
		return envflag.ExitConfig
	}
	return 1
}

// startKubelet serves the CSI services at <kubelet-dir>/plugins/<driver>/
// csi.sock and registers them with kubelet, in Kubernetes mode only (nil
// otherwise). The --endpoint socket keeps serving beside it, for the
// operator's tools and for Nomad on a host that runs both.
func startKubelet(log zerolog.Logger, opts options, services driver.Services, extra ...grpc.UnaryServerInterceptor) (*kubelet.Server, error) {
	if !opts.kubernetes {
		return nil, nil
	}
	kubelet := kubelet.New(log, kubelet.Config{Dir: opts.kubeletDir, DriverName: opts.DriverName}, services, extra...)
	return kubelet, kubelet.Listen()
}

// notifyReady tells systemd (Type=notify) that every socket listens; it is
// called after the parent datasets were checked.
func notifyReady(log zerolog.Logger, opts options) {
	sockets := []string{opts.endpoint}
	if opts.kubernetes {
		sockets = append(sockets, kubelet.Config{Dir: opts.kubeletDir, DriverName: opts.DriverName}.CSISocket())
	}
	notify(log, notifyReadyLine, notifyStatusLine("serving "+strings.Join(sockets, " and ")))
}

func notify(log zerolog.Logger, lines ...string) {
	if sent, err := sdNotify(lines...); err != nil {
		log.Warn().Err(err).Msg("cannot notify the service manager")
	} else if sent {
		log.Debug().Strs("state", lines).Msg("notified the service manager")
	}
}

// stopServing tells systemd the daemon is stopping, then stops the kubelet
// sockets (registration first) and the main server side by side, so that
// one's calls under way do not eat the other's share of the stop timeout.
func stopServing(ctx context.Context, log zerolog.Logger, kubelet *kubelet.Server, server *driver.Server) {
	notify(log, notifyStoppingLine, notifyStatusLine("stopping"))
	var wg sync.WaitGroup
	if kubelet != nil {
		wg.Go(func() { kubelet.Stop(ctx) })
	}
	wg.Go(func() { server.Stop(ctx) })
	wg.Wait()
}
