package peer_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/peer/peertest"
)

// The client side of a node shut out: a node that no longer trusts a
// server (its own CA file rotated away from the server's, or the server's
// certificate expired) sends it no call on the connection opened before;
// the next Dial drops that connection, and a new handshake decides.

func TestAServerOutsideTheClientsNewCAIsNotCalledOnTheOpenConnection(t *testing.T) {
	old := peertest.NewCA(t, "cluster")
	seen := make(chan string, 10)
	listener := serveCounted(t, peer.NewServer(nodeConfig("node-a", old.Node(t, "node-a", peer.NodeURIPrefix+"node-a")), zerolog.Nop()), seen)
	files := ownCA(t, old.Node(t, "node-b", peer.NodeURIPrefix+"node-b"))
	client := peer.NewClient(peer.Config{NodeID: "node-b", CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA,
		Peers: map[string][]string{"node-a": {listener.Addr().String()}}})
	t.Cleanup(func() { client.Close() })
	conn, err := client.Dial(t.Context(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	held := healthpb.NewHealthClient(conn)
	if err := check(t, held); err != nil {
		t.Fatalf("the call before the rotation: %v", err)
	}
	<-seen

	// node-b's operator moves it to a new CA that node-a is not part of.
	peertest.NewCA(t, "cluster-2").Renew(t, files, "node-b", peer.NodeURIPrefix+"node-b")

	err = check(t, held)
	t.Logf("a call on the connection held since before the rotation: %v", err)
	if err == nil || !strings.Contains(err.Error(), "no longer trusted") {
		t.Errorf("a call on the held connection after the rotation: %v, want a refusal before sending", err)
	}
	again, err := client.Dial(t.Context(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	err = check(t, healthpb.NewHealthClient(again))
	t.Logf("a call after Dial again: %v", err)
	if err == nil {
		t.Error("a call to a server the new CA did not sign succeeded")
	}
	select {
	case node := <-seen:
		t.Errorf("the server was called by %q after its client stopped trusting it", node)
	default:
	}
	select {
	case <-listener.conn(0).closed:
	case <-time.After(5 * time.Second):
		t.Error("the connection opened before the rotation is still open 5 s after Dial dropped it")
	}
}

func TestACallToAServerWhoseCertificateExpiredIsNotSent(t *testing.T) {
	ca := peertest.NewCA(t, "cluster")
	seen := make(chan string, 10)
	shortLived := ca.NodeUntil(t, time.Now().Add(3*time.Second), "node-a", peer.NodeURIPrefix+"node-a")
	notAfter := peertest.NotAfter(t, shortLived)
	listener := serveCounted(t, peer.NewServer(nodeConfig("node-a", shortLived), zerolog.Nop()), seen)
	health := dial(t, "node-b", "node-a", listener.Addr().String(), ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b"))
	if err := check(t, health); err != nil {
		t.Fatalf("the call while the server's certificate is valid: %v", err)
	}
	<-seen
	time.Sleep(time.Until(notAfter) + 200*time.Millisecond)

	err := check(t, health)
	t.Logf("the call after the server's NotAfter: %v", err)
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("the call after the server's certificate expired (%s): %v, want a refusal for the expiry", notAfter.Format(time.RFC3339), err)
	}
	select {
	case node := <-seen:
		t.Errorf("the call reached the server (as %q) after its certificate expired", node)
	default:
	}
}

// ownCA gives files a CA file of their own, so that rotating it leaves the
// other nodes' alone.
func ownCA(t *testing.T, files peertest.Files) peertest.Files {
	t.Helper()
	data, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	files.CA = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(files.CA, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return files
}
