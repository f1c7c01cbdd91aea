package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

// Server serves the CSI services on one unix socket.
type Server struct {
	grpc     *grpc.Server
	log      zerolog.Logger
	listener net.Listener
	path     string
}

// Services are the CSI services one socket serves; a nil one is not served.
type Services struct {
	Identity   csi.IdentityServer
	Controller csi.ControllerServer
	// GroupController serves group snapshots; served with the controller.
	GroupController csi.GroupControllerServer
	Node            csi.NodeServer
	// SnapshotMetadata serves changed-block metadata (server streams).
	SnapshotMetadata csi.SnapshotMetadataServer
	// Forward sends controller calls for other nodes to them (Forward),
	// ForwardStreams the SnapshotMetadata calls; nil answers every call here.
	Forward        grpc.UnaryServerInterceptor
	ForwardStreams grpc.StreamServerInterceptor
}

// NewServer registers the services behind the shared interceptors. Extra
// interceptors (metrics, say) run outermost, so they see every call's final
// gRPC code, panics and typed errors included.
func NewServer(log zerolog.Logger, services Services, extra ...grpc.UnaryServerInterceptor) *Server {
	s := &Server{log: log}
	chain := append(append([]grpc.UnaryServerInterceptor{}, extra...), s.logCall, RecoverPanic)
	if services.Forward != nil {
		chain = append(chain, services.Forward)
	}
	chain = append(chain, MapErrors)
	streams := []grpc.StreamServerInterceptor{s.logStream}
	if services.ForwardStreams != nil {
		streams = append(streams, services.ForwardStreams)
	}
	s.grpc = grpc.NewServer(grpc.ChainUnaryInterceptor(chain...), grpc.ChainStreamInterceptor(streams...))
	if services.Identity != nil {
		csi.RegisterIdentityServer(s.grpc, services.Identity)
	}
	if services.Controller != nil {
		csi.RegisterControllerServer(s.grpc, services.Controller)
	}
	if services.GroupController != nil {
		csi.RegisterGroupControllerServer(s.grpc, services.GroupController)
	}
	if services.Node != nil {
		csi.RegisterNodeServer(s.grpc, services.Node)
	}
	if services.SnapshotMetadata != nil {
		csi.RegisterSnapshotMetadataServer(s.grpc, services.SnapshotMetadata)
	}
	return s
}

// NewOperatorServer serves one service that only the host's operator may
// call (the controller's OperatorServiceDesc) behind the same logging,
// panic recovery and error mapping as the CSI services, on a socket of its
// own: no CO's socket serves it, so no CSI caller reaches it.
func NewOperatorServer(log zerolog.Logger, desc *grpc.ServiceDesc, impl any, extra ...grpc.UnaryServerInterceptor) *Server {
	s := &Server{log: log}
	chain := append(append([]grpc.UnaryServerInterceptor{}, extra...), s.logCall, RecoverPanic, MapErrors)
	s.grpc = grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	s.grpc.RegisterService(desc, impl)
	return s
}

// SocketPath turns a CSI endpoint ("unix:///run/x.sock", "unix:/run/x.sock" or
// a plain path) into a filesystem path.
func SocketPath(endpoint string) (string, error) {
	path := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		path = rest
	} else if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		path = rest
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q: only unix sockets are supported", endpoint)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("endpoint %q: the socket path must be absolute", endpoint)
	}
	return filepath.Clean(path), nil
}

// Listen opens the socket, removing a stale one left by an earlier run but
// refusing to steal a socket another process still serves. The socket is
// readable and writable by its owner only.
func (s *Server) Listen(endpoint string) error {
	path, err := SocketPath(endpoint)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := removeStaleSocket(path); err != nil {
		return err
	}
	listener, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		listener.Close()
		return err
	}
	s.listener, s.path = listener, path
	return nil
}

func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
	}
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("%s is served by another process (is another zfs-csi running?)", path)
	}
	return os.Remove(path)
}

// Serve blocks serving the socket until Stop.
func (s *Server) Serve() error {
	s.log.Info().Str("socket", s.path).Msg("serving CSI")
	err := s.grpc.Serve(s.listener)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop lets calls under way finish until ctx is done, then cuts them off, and
// removes the socket.
// ServeOn serves the services on a listener made elsewhere (kubelet's
// socket, which is listened on again when removed) until Stop.
func (s *Server) ServeOn(listener net.Listener) error { return s.grpc.Serve(listener) }

// Stop stops the server as its comment above says.
func (s *Server) Stop(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
	}
	if s.path != "" {
		os.Remove(s.path)
	}
}

// logCall writes one line per call: method, the IDs or names the request
// carries, duration and code. Request bodies are never logged: they can hold
// secrets. The IDs and names are the caller's, so they are cut (Bounded); the
// error's message is already bounded by the interceptors inside this one.
func (s *Server) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	note := &callNote{}
	resp, err := handler(context.WithValue(ctx, callNoteKey{}, note), req)
	code := status.Code(err)
	level := zerolog.InfoLevel
	switch {
	case code == codes.OK && isPoll(info.FullMethod):
		level = zerolog.DebugLevel
	case code == codes.Internal || code == codes.Unknown:
		level = zerolog.ErrorLevel
	case code != codes.OK:
		level = zerolog.WarnLevel
	}
	event := s.log.WithLevel(level).Str("method", info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:])
	for key, value := range requestKeys(req) {
		event = event.Str(key, rules.Bounded(value))
	}
	if note.forwardedTo != "" {
		event = event.Str("forwarded_to", note.forwardedTo)
	}
	event = event.Dur("duration", time.Since(start)).Str("code", code.String())
	if err != nil {
		event = event.Str("error", status.Convert(err).Message())
	}
	event.Send()
	return resp, err
}

// callNote is what the interceptors inside logCall tell its line: the node
// a call was forwarded to.
type callNote struct{ forwardedTo string }

type callNoteKey struct{}

func NoteForward(ctx context.Context, nodeID string) {
	if note, ok := ctx.Value(callNoteKey{}).(*callNote); ok {
		note.forwardedTo = nodeID
	}
}

// logStream logs a streaming call as logCall does a unary one, once it
// ended, with the number of messages sent; a panic becomes INTERNAL.
func (s *Server) logStream(srv any, stream grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	start := time.Now()
	counted := &countingStream{ServerStream: stream}
	defer func() {
		if recovered := recover(); recovered != nil {
			err = boundStatus(status.Errorf(codes.Internal, "panic: %v", recovered))
		}
		code := status.Code(err)
		level := zerolog.InfoLevel
		if code != codes.OK {
			level = zerolog.WarnLevel
		}
		event := s.log.WithLevel(level).Str("method", info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]).
			Int("responses", counted.sent).Dur("duration", time.Since(start)).Str("code", code.String())
		if err != nil {
			event = event.Str("error", status.Convert(err).Message())
		}
		event.Send()
	}()
	return Answer(handler(srv, counted))
}

// countingStream counts the messages a stream sends.
type countingStream struct {
	grpc.ServerStream
	sent int
}

func (c *countingStream) SendMsg(m any) error {
	c.sent++
	return c.ServerStream.SendMsg(m)
}

// isPoll marks the calls a CO makes all the time, logged at debug when they succeed.
func isPoll(method string) bool {
	return strings.HasSuffix(method, "/Probe") || strings.HasSuffix(method, "Capabilities") ||
		strings.HasSuffix(method, "/GetPluginInfo") || strings.HasSuffix(method, "/NodeGetInfo")
}

// requestKeys picks the identifying fields a request has.
func requestKeys(req any) map[string]string {
	keys := map[string]string{}
	if r, ok := req.(interface{ GetName() string }); ok && r.GetName() != "" {
		keys["name"] = r.GetName()
	}
	if r, ok := req.(interface{ GetVolumeId() string }); ok && r.GetVolumeId() != "" {
		keys["volume_id"] = r.GetVolumeId()
	}
	if r, ok := req.(interface{ GetSnapshotId() string }); ok && r.GetSnapshotId() != "" {
		keys["snapshot_id"] = r.GetSnapshotId()
	}
	if r, ok := req.(interface{ GetSourceVolumeId() string }); ok && r.GetSourceVolumeId() != "" {
		keys["source_volume_id"] = r.GetSourceVolumeId()
	}
	return keys
}

func RecoverPanic(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = boundStatus(status.Errorf(codes.Internal, "panic in %s: %v\n%s", info.FullMethod, p, debug.Stack()))
		}
	}()
	return handler(ctx, req)
}

func MapErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, Answer(err)
}

// ListenUnix listens on a unix socket at path as Server.Listen does: the
// directory is created, a stale socket from an earlier run is replaced, a
// socket another process serves is not, and only the owner may connect. It
// also returns the socket file's identity, to notice its removal later.
// Closing the listener never unlinks the path: by then it may hold a new
// socket.
func ListenUnix(path string) (*net.UnixListener, os.FileInfo, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, nil, err
	}
	listener, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	listener.SetUnlinkOnClose(false)
	file, err := os.Lstat(path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		listener.Close()
		return nil, nil, err
	}
	return listener, file, nil
}
