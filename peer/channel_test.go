package peer_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/peer/peertest"
)

// serve starts node's daemon side with files and returns its address.
func serve(t *testing.T, nodeID string, files peertest.Files, seen chan<- string) string {
	t.Helper()
	server := peer.NewServer(peer.Config{NodeID: nodeID, CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA}, zerolog.Nop())
	healthpb.RegisterHealthServer(server, recorder{seen: seen})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.ServeOn(listener) }()
	t.Cleanup(func() { server.Stop(context.Background()) })
	return listener.Addr().String()
}

// recorder tells the test which node the server saw calling.
type recorder struct {
	healthpb.UnimplementedHealthServer
	seen chan<- string
}

func (r recorder) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	node, err := peer.CallerNode(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	r.seen <- node
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// call dials nodeID at address as the client with files and checks health.
func call(t *testing.T, clientNode, nodeID, address string, files peertest.Files) error {
	t.Helper()
	client := peer.NewClient(peer.Config{NodeID: clientNode, CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA,
		Peers: map[string][]string{nodeID: {address}}})
	defer client.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, nodeID)
	if err != nil {
		return err
	}
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestOnlyPeersWithTheCAsCertificateNamingTheirNodeAreServed(t *testing.T) {
	ca := peertest.NewCA(t, "cluster")
	serverFiles := ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a")
	seen := make(chan string, 1)
	address := serve(t, "node-a", serverFiles, seen)

	t.Run("a peer with a certificate from the CA is served and known by its node ID", func(t *testing.T) {
		if err := call(t, "node-b", "node-a", address, ca.Node(t, "anything", peer.NodeURIPrefix+"node-b")); err != nil {
			t.Fatalf("call: %v", err)
		}
		if got := <-seen; got != "node-b" {
			t.Errorf("the server saw node %q calling, want node-b", got)
		}
	})

	other := peertest.NewCA(t, "other")
	refused := []struct {
		name       string
		clientNode string
		files      peertest.Files
	}{
		{"a peer whose certificate is from another CA", "node-b", withCA(other.Node(t, "node-b", peer.NodeURIPrefix+"node-b"), ca.File)},
		{"a peer whose certificate names no node", "node-b", ca.Node(t, "node-b")},
		{"a peer whose certificate names two nodes", "node-b", ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b", peer.NodeURIPrefix+"node-c")},
		{"a peer whose node URI is no node ID", "node-b", ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b%2F..")},
	}
	for _, tc := range refused {
		t.Run(tc.name+" is refused at the handshake", func(t *testing.T) {
			err := rawCall(t, address, tc.files)
			if err == nil {
				t.Fatal("the call succeeded")
			}
			select {
			case node := <-seen:
				t.Errorf("the service was reached, as node %q", node)
			default:
			}
		})
	}

	t.Run("a peer without a certificate is refused at the handshake", func(t *testing.T) {
		if err := rawCall(t, address, peertest.Files{CA: ca.File}); err == nil {
			t.Fatal("the handshake succeeded")
		}
	})
}

func TestAClientTrustsOnlyTheNodeItAskedFor(t *testing.T) {
	ca := peertest.NewCA(t, "cluster")
	seen := make(chan string, 1)
	address := serve(t, "node-a", ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a"), seen)
	clientFiles := ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b")

	err := call(t, "node-b", "node-c", address, clientFiles)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "answered with node") {
		t.Errorf("asking for node-c at node-a's address: %v, want UNAVAILABLE naming node-a's certificate", err)
	}

	other := peertest.NewCA(t, "other")
	impostor := serve(t, "node-c", withCA(other.Node(t, "node-c", peer.NodeURIPrefix+"node-c"), other.File), seen)
	err = call(t, "node-b", "node-c", impostor, clientFiles)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("a node-c with another CA's certificate: %v, want UNAVAILABLE for the unknown authority", err)
	}
	select {
	case node := <-seen:
		t.Errorf("a server was called by %q though the client should have hung up", node)
	default:
	}
}

func TestADaemonRefusesToPresentAnotherNodesCertificate(t *testing.T) {
	ca := peertest.NewCA(t, "cluster")
	files := ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a")
	err := peer.Config{NodeID: "node-b", CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA}.Check()
	if err == nil || !strings.Contains(err.Error(), `node "node-a"'s; this is node "node-b"`) {
		t.Errorf("Check: %v, want the mismatch named", err)
	}
	if err := (peer.Config{NodeID: "node-a", CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA}).Check(); err != nil {
		t.Errorf("Check of the right node: %v", err)
	}
}

// rawCall calls the server at address with a plain TLS client presenting
// files' certificate (none when Cert is empty) and trusting anything: what
// a stranger on the network can do, without this package's own checks.
func rawCall(t *testing.T, address string, files peertest.Files) error {
	t.Helper()
	config := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	if files.Cert != "" {
		certificate, err := tls.LoadX509KeyPair(files.Cert, files.Key)
		if err != nil {
			t.Fatal(err)
		}
		config.Certificates = []tls.Certificate{certificate}
	}
	conn, err := grpc.NewClient("passthrough:///"+address, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func withCA(files peertest.Files, caFile string) peertest.Files {
	files.CA = caFile
	return files
}
