// Package nomadbridge is `zfs-csi nomad-bridge`. Nomad registers CSI plugins
// only through a task's csi_plugin block, and talks to the plugin on the
// socket it names in the task's $CSI_ENDPOINT. The daemon runs on the host
// under systemd, so a raw_exec task runs this bridge: it listens on
// $CSI_ENDPOINT and copies each connection byte for byte to the daemon's
// socket. gRPC over HTTP/2 passes through a stream proxy unchanged, so the
// bridge knows nothing of CSI.
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
	"github.com/zfs-csi/zfs-csi/driver"
)

// bridgeDialTimeout bounds the connection to the daemon; a daemon that is
// down makes the Nomad side see a closed connection at once.
const bridgeDialTimeout = 5 * time.Second

// Run runs the bridge until SIGTERM or SIGINT.
func Run(args []string, _, stderr io.Writer) error {
	flags := flag.NewFlagSet("zfs-csi nomad-bridge", flag.ContinueOnError)
	flags.SetOutput(stderr)
	listen := flags.String("listen", os.Getenv("CSI_ENDPOINT"), "socket Nomad connects to [CSI_ENDPOINT, set by Nomad for csi_plugin tasks]")
	target := flags.String("target", envflag.String("ZFS_CSI_BRIDGE_TARGET", "unix:///run/zfs-csi/csi.sock"), "the daemon's socket (its --endpoint) [ZFS_CSI_BRIDGE_TARGET]")
	logLevel := flags.String("log-level", envflag.String("ZFS_CSI_LOG_LEVEL", "info"), "debug, info, warn or error [ZFS_CSI_LOG_LEVEL]")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *listen == "" {
		return fmt.Errorf("no socket to listen on: run under Nomad (csi_plugin sets CSI_ENDPOINT) or pass --listen")
	}
	level, err := zerolog.ParseLevel(*logLevel)
	if err != nil || *logLevel == "" {
		return fmt.Errorf("log level %q: use debug, info, warn or error", *logLevel)
	}
	// JSON lines on stderr: Nomad keeps them with the allocation's logs.
	log := zerolog.New(stderr).Level(level).With().Timestamp().Str("component", "nomad-bridge").Logger()
	bridge, err := newBridge(*listen, *target, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return bridge.serve(ctx)
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
	listenPath, err := driver.SocketPath(listen)
	if err != nil {
		return nil, err
	}
	targetPath, err := driver.SocketPath(target)
	if err != nil {
		return nil, err
	}
	if listenPath == targetPath {
		return nil, fmt.Errorf("the bridge would forward %s to itself", listenPath)
	}
	listener, file, err := driver.ListenUnix(listenPath)
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
	if file, err := os.Lstat(b.listenPath); err == nil && os.SameFile(file, b.file) {
		os.Remove(b.listenPath)
	}
}
