package peer_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/peer/peertest"
)

// A connection outlives the handshake that checked its certificate. These
// tests hold the server to what a node shut out (its CA rotated away, its
// certificate expired) gets on a connection it opened before.

func TestANodeShutOutByANewCAIsRefusedOnItsOpenConnection(t *testing.T) {
	old := peertest.NewCA(t, "cluster")
	// The server's CA file is its own: rotating it leaves node-b's client
	// trusting node-a, so what refuses is node-a's check of its caller.
	serverFiles := ownCA(t, old.Node(t, "node-a", peer.NodeURIPrefix+"node-a"))
	seen := make(chan string, 10)
	listener := serveCounted(t, peer.NewServer(nodeConfig("node-a", serverFiles), zerolog.Nop()), seen)
	health := dial(t, "node-b", "node-a", listener.Addr().String(), old.Node(t, "node-b", peer.NodeURIPrefix+"node-b"))

	if err := check(t, health); err != nil {
		t.Fatalf("the call before the rotation: %v", err)
	}
	if got := <-seen; got != "node-b" {
		t.Fatalf("the server saw %q calling, want node-b", got)
	}

	// The operator shuts node-b out: node-a's certificate and CA file
	// come from a new CA; node-b's certificate does not.
	rotated := peertest.NewCA(t, "cluster-2")
	rotated.Renew(t, serverFiles, "node-a", peer.NodeURIPrefix+"node-a")

	err := check(t, health)
	t.Logf("the call after the rotation: %v", err)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "no longer accepted") || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("the call after the rotation: %v, want node-a's UNAUTHENTICATED for the unknown authority", err)
	}
	select {
	case node := <-seen:
		t.Errorf("the service was reached by %q after the rotation", node)
	default:
	}
	if n := listener.count(); n != 1 {
		t.Errorf("the server accepted %d connections, want 1: the refused call must be on the connection made before the rotation", n)
	}

	// A node renewed from the new CA is served.
	renewed := dial(t, "node-c", "node-a", listener.Addr().String(), rotated.Node(t, "node-c", peer.NodeURIPrefix+"node-c"))
	if err := check(t, renewed); err != nil {
		t.Errorf("a node with the new CA's certificate: %v", err)
	} else if got := <-seen; got != "node-c" {
		t.Errorf("the server saw %q calling, want node-c", got)
	}
}

func TestACallAfterTheCallersCertificateExpiredIsRefused(t *testing.T) {
	ca := peertest.NewCA(t, "cluster")
	seen := make(chan string, 10)
	listener := serveCounted(t, peer.NewServer(nodeConfig("node-a", ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a")), zerolog.Nop()), seen)
	// Valid for two to three seconds: a certificate's times are whole
	// seconds.
	shortLived := ca.NodeUntil(t, time.Now().Add(3*time.Second), "node-b", peer.NodeURIPrefix+"node-b")
	notAfter := peertest.NotAfter(t, shortLived)
	health := dial(t, "node-b", "node-a", listener.Addr().String(), shortLived)

	if err := check(t, health); err != nil {
		t.Fatalf("the call while the certificate is valid: %v", err)
	}
	<-seen
	time.Sleep(time.Until(notAfter) + 200*time.Millisecond)

	err := check(t, health)
	t.Logf("the call after the certificate's NotAfter: %v", err)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
		t.Errorf("the call after the certificate's NotAfter (%s): %v, want UNAUTHENTICATED for the expiry", notAfter.Format(time.RFC3339), err)
	}
	select {
	case node := <-seen:
		t.Errorf("the service was reached by %q with an expired certificate", node)
	default:
	}
	if n := listener.count(); n != 1 {
		t.Errorf("the server accepted %d connections, want 1: the refused call must be on the connection the certificate opened", n)
	}
}

func TestNothingIsServedWhileTheCAFileCannotBeRead(t *testing.T) {
	ca := peertest.NewCA(t, "cluster")
	serverFiles := ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a")
	// The server's own copy of the CA file, which the operator breaks.
	serverFiles.CA = filepath.Join(t.TempDir(), "ca.pem")
	data, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(serverFiles.CA, data, 0o600); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 10)
	listener := serveCounted(t, peer.NewServer(nodeConfig("node-a", serverFiles), zerolog.Nop()), seen)
	health := dial(t, "node-b", "node-a", listener.Addr().String(), ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b"))
	if err := check(t, health); err != nil {
		t.Fatalf("the call before: %v", err)
	}
	<-seen

	if err := os.Remove(serverFiles.CA); err != nil {
		t.Fatal(err)
	}
	err = check(t, health)
	t.Logf("the call without the CA file: %v", err)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("the call without the server's CA file: %v, want UNAVAILABLE (this node's fault, not the caller's)", err)
	}
	select {
	case node := <-seen:
		t.Errorf("the service was reached by %q though the server could not check it", node)
	default:
	}
}

func TestAConnectionOlderThanTheMaxAgeIsClosedAndTheClientReconnects(t *testing.T) {
	const maxAge, grace = 500 * time.Millisecond, 500 * time.Millisecond
	ca := peertest.NewCA(t, "cluster")
	seen := make(chan string, 10)
	server := peer.NewServerWithMaxAge(nodeConfig("node-a", ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a")), zerolog.Nop(), maxAge, grace)
	listener := serveCounted(t, server, seen)
	health := dial(t, "node-b", "node-a", listener.Addr().String(), ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b"))

	if err := check(t, health); err != nil {
		t.Fatalf("the first call: %v", err)
	}
	<-seen
	first := listener.conn(0)
	limit := closedWithin(maxAge, grace)
	select {
	case <-first.closed:
	case <-time.After(limit):
		t.Fatalf("the first connection is still open %s after its first call; the server's max age is %s, its grace %s", limit, maxAge, grace)
	}

	if err := check(t, health); err != nil {
		t.Fatalf("the call after the first connection was closed: %v", err)
	}
	<-seen
	if n := listener.count(); n != 2 {
		t.Errorf("the server accepted %d connections, want 2: the client reconnects, with a new handshake", n)
	}
}

func TestACallUnderWayIsCutAtTheMaxAgeAndItsGrace(t *testing.T) {
	const maxAge, grace = 300 * time.Millisecond, time.Second
	ca := peertest.NewCA(t, "cluster")
	server := peer.NewServerWithMaxAge(nodeConfig("node-a", ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a")), zerolog.Nop(), maxAge, grace)
	server.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Hold", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Hold", ServerStreams: true, Handler: hold}}}, nil)
	listener := serveCounted(t, server, make(chan string, 10))
	files := ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b")
	client := peer.NewClient(peer.Config{NodeID: "node-b", CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA,
		Peers: map[string][]string{"node-a": {listener.Addr().String()}}})
	t.Cleanup(func() { client.Close() })
	conn, err := client.Dial(t.Context(), "node-a")
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	started := time.Now()
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Hold/Hold")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	err = stream.RecvMsg(&emptypb.Empty{})
	took := time.Since(started)
	t.Logf("the call ended after %s: %v", took.Round(time.Millisecond), err)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the call under way was not cut by the server in %s (max age %s, grace %s): %v", took.Round(time.Millisecond), maxAge, grace, err)
	}
	// gRPC spreads the age by 10 % either way and, once the grace is over,
	// gives the peer up to a second to hang up before it closes the socket.
	if least, most := maxAge*9/10+grace/2, closedWithin(maxAge, grace); took < least || took > most {
		t.Errorf("the call under way was cut after %s, want about the max age and its grace (%s), between %s and %s", took, maxAge+grace, least, most)
	}
}

// closedWithin is when a server with maxAge and grace has closed a
// connection at the latest, with a margin for a loaded machine.
func closedWithin(maxAge, grace time.Duration) time.Duration {
	return maxAge*11/10 + grace + time.Second + 2*time.Second
}

// hold is a call that runs until the server cuts it.
func hold(_ any, stream grpc.ServerStream) error {
	if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

func nodeConfig(nodeID string, files peertest.Files) peer.Config {
	return peer.Config{NodeID: nodeID, CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA}
}

// serveCounted serves server's health service (recorder) on a loopback
// listener that keeps every connection it accepts.
func serveCounted(t *testing.T, server *peer.Server, seen chan<- string) *countingListener {
	t.Helper()
	healthpb.RegisterHealthServer(server, recorder{seen: seen})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listener := &countingListener{Listener: inner}
	go func() { _ = server.ServeOn(listener) }()
	t.Cleanup(func() { server.Stop(context.Background()) })
	return listener
}

// dial is clientNode's health client for serverNode at address, on one
// kept connection (peer.Client's).
func dial(t *testing.T, clientNode, serverNode, address string, files peertest.Files) healthpb.HealthClient {
	t.Helper()
	client := peer.NewClient(peer.Config{NodeID: clientNode, CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA,
		Peers: map[string][]string{serverNode: {address}}})
	t.Cleanup(func() { client.Close() })
	conn, err := client.Dial(t.Context(), serverNode)
	if err != nil {
		t.Fatal(err)
	}
	return healthpb.NewHealthClient(conn)
}

func check(t *testing.T, health healthpb.HealthClient) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// countingListener keeps the connections it accepted, in order.
type countingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*trackedConn
}

func (l *countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tracked := &trackedConn{Conn: conn, closed: make(chan struct{})}
	l.mu.Lock()
	l.conns = append(l.conns, tracked)
	l.mu.Unlock()
	return tracked, nil
}

func (l *countingListener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

func (l *countingListener) conn(i int) *trackedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns[i]
}

// trackedConn is an accepted connection; closed is closed when the server
// closes it.
type trackedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
