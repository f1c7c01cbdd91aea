package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Server serves gRPC services to peer daemons over mutual TLS. It is a
// grpc.ServiceRegistrar: register services on it before Serve. Every call's
// context carries the calling node (CallerNode).
type Server struct {
	cfg      Config
	log      zerolog.Logger
	grpc     *grpc.Server
	listener net.Listener
}

var _ grpc.ServiceRegistrar = (*Server)(nil)

// maxCallsPerConnection bounds the calls one peer connection carries at
// once (HTTP/2 streams): a peer cannot open calls without limit. The
// transfer service's own limit (Config.MaxStreams) is lower.
const maxCallsPerConnection = 64

// connectionAge bounds how long one peer connection is served: after max
// (gRPC spreads it by up to 10 % either way) the server asks the peer to
// reconnect, and grace later it cuts the calls still running on it. A
// connection's certificate was checked at its handshake and each call is
// checked again (authorize), but a call under way, a snapshot stream, is
// not: the age bounds how long a node shut out keeps one.
type connectionAge struct{ max, grace time.Duration }

// defaultConnectionAge: an hour lets most streams end on the connection
// they began on; one cut short resumes from the receiver's resume token on
// a new connection, whose handshake and calls check the files as they are.
var defaultConnectionAge = connectionAge{max: time.Hour, grace: 5 * time.Minute}

// NewServer makes the server; unary interceptors (metrics, say) run
// outermost.
func NewServer(cfg Config, log zerolog.Logger, unary ...grpc.UnaryServerInterceptor) *Server {
	return newServer(cfg, log, defaultConnectionAge, unary...)
}

func newServer(cfg Config, log zerolog.Logger, age connectionAge, unary ...grpc.UnaryServerInterceptor) *Server {
	s := &Server{cfg: cfg, log: log.With().Str("component", "peer").Logger()}
	s.grpc = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(cfg.serverTLS())),
		grpc.MaxConcurrentStreams(maxCallsPerConnection),
		// A peer gone silent (its node lost) frees its calls' resources;
		// no connection is served longer than age.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second,
			MaxConnectionAge: age.max, MaxConnectionAgeGrace: age.grace}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Every call is logged, then its caller checked again.
		grpc.ChainUnaryInterceptor(append(append([]grpc.UnaryServerInterceptor{}, unary...), s.logCall, s.authorizeCall)...),
		grpc.ChainStreamInterceptor(s.logStream, s.authorizeStream),
	)
	return s
}

// RegisterService implements grpc.ServiceRegistrar.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	s.grpc.RegisterService(desc, impl)
}

// Listen opens the configured TCP address.
func (s *Server) Listen() error {
	listener, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("peer channel: %w", err)
	}
	s.listener = listener
	return nil
}

// Addr is where the server listens (after Listen).
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Serve serves on the listener Listen opened until Stop.
func (s *Server) Serve() error {
	s.log.Info().Str("address", s.listener.Addr().String()).Strs("peers", s.cfg.peerNames()).Msg("serving peers")
	return s.ServeOn(s.listener)
}

// ServeOn serves on listener until Stop.
func (s *Server) ServeOn(listener net.Listener) error {
	err := s.grpc.Serve(listener)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop lets calls under way finish until ctx ends, then cuts them: a
// receiver resumes a stream cut short.
func (s *Server) Stop(ctx context.Context) {
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
	}
}

// CallerNode is the node ID of the peer that made the call, read from its
// verified certificate. Outside a peer call it is an error.
func CallerNode(ctx context.Context) (string, error) {
	caller, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return "", errors.New("not a peer call")
	}
	info, ok := caller.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return "", errors.New("the caller has no verified certificate")
	}
	return NodeOf(info.State.VerifiedChains[0][0])
}

// TLSState is the caller's TLS connection state, for tests and logs.
func TLSState(ctx context.Context) (tls.ConnectionState, bool) {
	caller, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return tls.ConnectionState{}, false
	}
	info, ok := caller.AuthInfo.(credentials.TLSInfo)
	return info.State, ok
}

func (s *Server) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	started := time.Now()
	defer func() {
		if recovered := recover(); recovered != nil {
			s.log.Error().Interface("panic", recovered).Bytes("stack", debug.Stack()).Str("method", info.FullMethod).Msg("peer call panicked")
			err = status.Error(codes.Internal, "internal error")
		}
		s.logEnd(ctx, info.FullMethod, started, err)
	}()
	return handler(ctx, req)
}

func (s *Server) logStream(srv any, stream grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	started := time.Now()
	defer func() {
		if recovered := recover(); recovered != nil {
			s.log.Error().Interface("panic", recovered).Bytes("stack", debug.Stack()).Str("method", info.FullMethod).Msg("peer call panicked")
			err = status.Error(codes.Internal, "internal error")
		}
		s.logEnd(stream.Context(), info.FullMethod, started, err)
	}()
	return handler(srv, stream)
}

// logEnd logs one line per call with the calling node (never a request
// body: a forwarded call may carry secrets).
func (s *Server) logEnd(ctx context.Context, method string, started time.Time, err error) {
	caller, callerErr := CallerNode(ctx)
	if callerErr != nil {
		caller = "?"
	}
	event := s.log.Info()
	if err != nil {
		event = s.log.Warn().Err(err)
	}
	event.Str("method", method).Str("caller", caller).Str("code", status.Code(err).String()).
		Dur("duration", time.Since(started)).Msg("peer call")
}
