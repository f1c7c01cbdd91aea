// Package nomadbridge is `zfs-csi nomad-bridge`, which makes the host's
// daemon Nomad's CSI plugin without giving any Nomad job its socket.
//
// Nomad registers CSI plugins only through a task's csi_plugin block. Its
// plugin supervisor makes a socket directory for each allocation of such a
// task on the host, <data_dir>/client/csi/plugins/<alloc ID> (0700, root's),
// binds it into the task at csi_plugin.mount_dir, and connects to csi.sock in
// it. The bridge runs on the host as root (zfs-csi-nomad.service), not in a
// job: it watches those directories, asks the local Nomad agent whose
// allocation each one is, and listens in the directories of the plugin job's
// allocations only (its namespace, its job ID, its csi_plugin id, this
// client), copying each connection byte for byte to the daemon's socket. The
// plugin job's task itself runs unprivileged and does nothing: it exists so
// that Nomad supervises the plugin. No host volume exposes the daemon.
//
// gRPC over HTTP/2 passes through a stream proxy unchanged, so the bridge
// knows nothing of CSI.
package nomadbridge

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/zfs-csi/zfs-csi/cli/envflag"
	"github.com/zfs-csi/zfs-csi/rpc"
)

// bridgeDialTimeout bounds the connection to the daemon; a daemon that is
// down makes the Nomad side see a closed connection at once.
const bridgeDialTimeout = 5 * time.Second

// scanInterval is how often the plugin socket directories are read. Nomad
// probes a new plugin every 5 s until its health_timeout.
const scanInterval = 2 * time.Second

// Run runs the bridge until SIGTERM or SIGINT. A setting that is wrong is
// an envflag.ConfigError (exit 78), found before anything starts.
func Run(args []string, _, stderr io.Writer) error {
	var s settings
	flags, rules := declareFlags(&s)
	err := envflag.Parse(flags, args, envflag.Environment(), rules, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	level, err := envflag.ParseLogLevel(s.logLevel)
	if err != nil {
		return envflag.ConfigError{Err: err}
	}
	cfg := s.host
	if cfg.Target, err = rpc.SocketPath(s.endpoint); err != nil {
		return envflag.ConfigError{Err: err}
	}
	// What newNomadAPI refuses is the agent's address and TLS files: the
	// operator's to mend.
	nomad, err := newNomadAPI(s.address, s.tokenFile, s.caCert, s.clientCert, s.clientKey)
	if err != nil {
		return envflag.ConfigError{Err: err}
	}
	// JSON lines on stderr: journald keeps them under zfs-csi-nomad.service.
	log := zerolog.New(stderr).Level(level).With().Timestamp().Str("component", "nomad-bridge").Logger()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return newHost(cfg, nomad, log).run(ctx, scanInterval)
}

// bridge forwards connections from one unix socket to another.
type bridge struct {
	listenPath string
	targetPath string
	log        zerolog.Logger
	listener   *net.UnixListener
	file       os.FileInfo
}

// newBridge listens at once, so that a caller knows the socket exists
// when it returns.
func newBridge(listen, target string, log zerolog.Logger) (*bridge, error) {
	listenPath, err := rpc.SocketPath(listen)
	if err != nil {
		return nil, err
	}
	targetPath, err := rpc.SocketPath(target)
	if err != nil {
		return nil, err
	}
	if listenPath == targetPath {
		return nil, fmt.Errorf("the bridge would forward %s to itself", listenPath)
	}
	listener, file, err := rpc.ListenUnix(listenPath)
	if err != nil {
		return nil, err
	}
	return &bridge{listenPath: listenPath, targetPath: targetPath, log: log, listener: listener, file: file}, nil
}

// serve forwards connections until ctx ends, then closes them all and
// removes its socket. Nomad stops plugin tasks only after the tasks that use
// their volumes, so cutting connections under way is rare; the daemon
// finishes a call even when its caller went away.
func (b *bridge) serve(ctx context.Context) error {
	b.log.Info().Str("listen", b.listenPath).Str("target", b.targetPath).Msg("bridging Nomad to the daemon")
	var open sync.WaitGroup
	conns := map[net.Conn]bool{}
	var mu sync.Mutex
	track := func(conn net.Conn, add bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if add && ctx.Err() != nil {
			return false
		}
		if add {
			conns[conn] = true
		} else {
			delete(conns, conn)
		}
		return true
	}
	go func() {
		<-ctx.Done()
		b.listener.Close()
		mu.Lock()
		defer mu.Unlock()
		for conn := range conns {
			conn.Close()
		}
	}()
	defer b.removeSocket()
	for {
		conn, err := b.listener.AcceptUnix()
		if err != nil {
			open.Wait()
			if ctx.Err() != nil {
				b.log.Info().Msg("bridge stopped")
				return nil
			}
			return err
		}
		if !track(conn, true) {
			conn.Close()
			continue
		}
		open.Go(func() {
			defer track(conn, false)
			b.forward(conn, track)
		})
	}
}

// forward copies one connection both ways until both sides are done. Each
// direction passes the end of its stream on as a half-close, so neither side
// loses bytes the other still sends. The daemon's side is tracked too, so
// that stopping the bridge closes it.
func (b *bridge) forward(client *net.UnixConn, track func(net.Conn, bool) bool) {
	defer client.Close()
	upstream, err := net.DialTimeout("unix", b.targetPath, bridgeDialTimeout)
	if err != nil {
		b.log.Warn().Err(err).Str("target", b.targetPath).Msg("cannot reach the daemon (is zfs-csi.service running?)")
		return
	}
	defer upstream.Close()
	if !track(upstream, true) {
		return
	}
	defer track(upstream, false)
	b.log.Debug().Msg("connection opened")
	var both sync.WaitGroup
	both.Go(func() {
		io.Copy(upstream, client)
		upstream.(*net.UnixConn).CloseWrite()
	})
	both.Go(func() {
		io.Copy(client, upstream)
		client.CloseWrite()
	})
	both.Wait()
	b.log.Debug().Msg("connection closed")
}

func (b *bridge) removeSocket() {
	if b.holdsSocket() {
		os.Remove(b.listenPath)
	}
}

// holdsSocket reports whether the listening path is still this bridge's
// socket, not removed or replaced.
func (b *bridge) holdsSocket() bool {
	file, err := os.Lstat(b.listenPath)
	return err == nil && os.SameFile(file, b.file)
}
