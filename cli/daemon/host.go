package daemon

// What ties the daemon to its host: the service manager's readiness
// protocol and the exit code that tells systemd a restart cannot help.

import (
	"errors"
	"strings"

	"github.com/rs/zerolog"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
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

// notifyReady tells systemd (Type=notify) that every socket listens; it is
// called after the parent datasets were checked.
func notifyReady(log zerolog.Logger, sockets []string) {
	notify(log, notifyReadyLine, notifyStatusLine("serving "+strings.Join(sockets, " and ")))
}

func notify(log zerolog.Logger, lines ...string) {
	if sent, err := sdNotify(lines...); err != nil {
		log.Warn().Err(err).Msg("cannot notify the service manager")
	} else if sent {
		log.Debug().Strs("state", lines).Msg("notified the service manager")
	}
}
