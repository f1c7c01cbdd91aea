package peer_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/peer/peertest"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

var props = rules.NewUserProps("zfs.csi.dev")

// twoNodes is node-a serving its fake pool's snapshots and node-b's client.
type twoNodes struct {
	a, b   *zfstest.Fake
	client *peer.Client
}

func newTwoNodes(t testing.TB, maxStreams int) twoNodes {
	t.Helper()
	return newTwoNodesServing(t, maxStreams, func(fake *zfstest.Fake) zfs.Interface { return fake })
}

// newTwoNodesServing is newTwoNodes with node-a's transfers served over
// serving's view of its fake pool.
func newTwoNodesServing(t testing.TB, maxStreams int, serving func(*zfstest.Fake) zfs.Interface) twoNodes {
	t.Helper()
	ca := peertest.NewCA(t, "cluster")
	aFiles, bFiles := ca.Node(t, "a", peer.NodeURIPrefix+"node-a"), ca.Node(t, "b", peer.NodeURIPrefix+"node-b")
	nodes := twoNodes{a: zfstest.NewFake(map[string]uint64{"tank": 1 << 40}), b: zfstest.NewFake(map[string]uint64{"tank": 1 << 40})}
	for _, fake := range []*zfstest.Fake{nodes.a, nodes.b} {
		mustDo(t, fake.Create(t.Context(), "tank/csi", zfs.CreateOptions{}))
	}
	server := peer.NewServer(peer.Config{NodeID: "node-a", CertFile: aFiles.Cert, KeyFile: aFiles.Key, CAFile: aFiles.CA}, zerolog.Nop())
	cfg := rules.Config{DriverName: "zfs.csi.dev", NodeID: "node-a", ParentDatasets: []string{"tank/csi"}}
	peer.NewTransfer(cfg, serving(nodes.a), maxStreams).Register(server)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	mustDo(t, err)
	go func() { _ = server.ServeOn(listener) }()
	t.Cleanup(func() { server.Stop(context.Background()) })
	nodes.client = peer.NewClient(peer.Config{NodeID: "node-b", CertFile: bFiles.Cert, KeyFile: bFiles.Key, CAFile: bFiles.CA,
		Peers: map[string][]string{"node-a": {listener.Addr().String()}}})
	t.Cleanup(func() { nodes.client.Close() })
	return nodes
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// volume makes a volume of the driver's on a with a CSI snapshot.
func volume(t testing.TB, fake *zfstest.Fake, dataset string, opts zfs.CreateOptions) {
	t.Helper()
	if opts.Properties == nil {
		opts.Properties = map[string]string{}
	}
	opts.Properties[props.Managed] = "true"
	mustDo(t, fake.Create(t.Context(), dataset, opts))
	mustDo(t, fake.Write(dataset, 3<<20))
	mustDo(t, fake.Snapshot(t.Context(), dataset+"@snap-1", map[string]string{props.SnapshotName: "snap-1"}))
}

// pull receives what node-a sends for req into node-b's dataset.
func (n twoNodes) pull(t *testing.T, req forward.TransferRequest, dataset string) error {
	t.Helper()
	stream, err := n.client.Open(t.Context(), req)
	if err != nil {
		return err
	}
	defer stream.Close()
	return n.b.Receive(t.Context(), dataset, zfs.ReceiveOptions{}, stream)
}

func TestAPeerPullsASnapshotOfTheNodesOwnVolume(t *testing.T) {
	nodes := newTwoNodes(t, 0)
	volume(t, nodes.a, "tank/csi/pvc-a", zfs.CreateOptions{})
	if err := nodes.pull(t, forward.TransferRequest{SnapshotID: "node-a:tank/csi/pvc-a@snap-1"}, "tank/csi/copy"); err != nil {
		t.Fatalf("pull: %v", err)
	}
	row, err := zfs.Get(t.Context(), nodes.b, "tank/csi/copy@snap-1", nil)
	if err != nil || row.Referenced != 3<<20 {
		t.Errorf("node-b's copy: %+v (%v), want the snapshot's 3 MiB", row, err)
	}
}

func TestOnlySnapshotsPassingTheOwnershipGuardAreSent(t *testing.T) {
	nodes := newTwoNodes(t, 0)
	volume(t, nodes.a, "tank/csi/pvc-a", zfs.CreateOptions{})
	mustDo(t, nodes.a.Create(t.Context(), "tank/other", zfs.CreateOptions{Properties: map[string]string{props.Managed: "true"}}))
	mustDo(t, nodes.a.Snapshot(t.Context(), "tank/other@snap-1", map[string]string{props.SnapshotName: "snap-1"}))
	mustDo(t, nodes.a.Create(t.Context(), "tank/csi/unmanaged", zfs.CreateOptions{}))
	mustDo(t, nodes.a.Snapshot(t.Context(), "tank/csi/unmanaged@snap-1", map[string]string{props.SnapshotName: "snap-1"}))
	mustDo(t, nodes.a.Snapshot(t.Context(), "tank/csi/pvc-a@operator", nil))
	for _, tc := range []struct{ name, snapshotID, from string }{
		{"a dataset outside the parents", "node-a:tank/other@snap-1", ""},
		{"a dataset without the managed mark", "node-a:tank/csi/unmanaged@snap-1", ""},
		{"an operator's snapshot of a volume of ours", "node-a:tank/csi/pvc-a@operator", ""},
		{"a snapshot that does not exist", "node-a:tank/csi/pvc-a@gone", ""},
		{"an incremental from an operator's snapshot", "node-a:tank/csi/pvc-a@snap-1", "node-a:tank/csi/pvc-a@operator"},
		{"an incremental from another volume's snapshot", "node-a:tank/csi/pvc-a@snap-1", "node-a:tank/csi/unmanaged@snap-1"},
	} {
		t.Run(tc.name+" is NOT_FOUND and nothing arrives", func(t *testing.T) {
			req := forward.TransferRequest{SnapshotID: tc.snapshotID, FromSnapshotID: tc.from}
			err := nodes.pull(t, req, "tank/csi/copy")
			if status.Code(err) != codes.NotFound {
				t.Errorf("pull: %v, want NOT_FOUND", err)
			}
			if nodes.b.Exists("tank/csi/copy") {
				t.Error("node-b has a copy")
			}
		})
	}
}

func TestAnEncryptedVolumeTravelsRawAndArrivesLocked(t *testing.T) {
	nodes := newTwoNodes(t, 0)
	key := []byte("correct horse battery")
	volume(t, nodes.a, "tank/csi/secret", zfs.CreateOptions{Key: key, Properties: map[string]string{
		"encryption": "on", "keyformat": "passphrase", "keylocation": "prompt"}})
	mustDo(t, nodes.pull(t, forward.TransferRequest{SnapshotID: "node-a:tank/csi/secret@snap-1"}, "tank/csi/copy"))
	row, err := zfs.GetWithKeyStatus(t.Context(), nodes.b, "tank/csi/copy", nil)
	if err != nil || row.KeyStatus != "unavailable" {
		t.Fatalf("node-b's copy: keystatus %q (%v), want encrypted with its key not loaded", row.KeyStatus, err)
	}
	if err := nodes.b.LoadKey(t.Context(), "tank/csi/copy", key); err != nil {
		t.Errorf("the volume's passphrase on the copy: %v", err)
	}
}

func TestAResumeTokenIsCheckedAgainstTheSnapshotItResumes(t *testing.T) {
	nodes := newTwoNodes(t, 0)
	volume(t, nodes.a, "tank/csi/pvc-a", zfs.CreateOptions{})
	mustDo(t, nodes.a.Create(t.Context(), "tank/private", zfs.CreateOptions{}))
	mustDo(t, nodes.a.Write("tank/private", 3<<20))
	mustDo(t, nodes.a.Snapshot(t.Context(), "tank/private@keys", nil))
	// A token for the private snapshot: what node-b would hold had it
	// received a part of it some other way.
	var stream strings.Builder
	mustDo(t, nodes.a.Send(t.Context(), "tank/private@keys", zfs.SendOptions{}, &stream))
	cut := io.MultiReader(strings.NewReader(stream.String()[:stream.Len()/2]), errReader{})
	_ = nodes.b.Receive(t.Context(), "tank/csi/stolen", zfs.ReceiveOptions{}, cut)
	token, err := nodes.b.ResumeToken(t.Context(), "tank/csi/stolen")
	mustDo(t, err)

	err = nodes.pull(t, forward.TransferRequest{SnapshotID: "node-a:tank/csi/pvc-a@snap-1", ResumeToken: token}, "tank/csi/stolen")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "tank/private@keys") {
		t.Errorf("a token of another snapshot: %v, want PERMISSION_DENIED naming what the token asked for", err)
	}
	if token, _ := nodes.b.ResumeToken(t.Context(), "tank/csi/stolen"); token == "" {
		t.Error("the partial receive went on")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("cut") }

func TestStreamsBeyondTheLimitAreRefusedAsResourceExhausted(t *testing.T) {
	nodes := newTwoNodes(t, 1)
	volume(t, nodes.a, "tank/csi/pvc-a", zfs.CreateOptions{})
	release := nodes.a.Stall("Send")
	first := make(chan error, 1)
	go func() {
		stream, err := nodes.client.Open(t.Context(), forward.TransferRequest{SnapshotID: "node-a:tank/csi/pvc-a@snap-1"})
		if err == nil {
			_, err = io.Copy(io.Discard, stream)
			stream.Close()
		}
		first <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); nodes.a.Calls()["Send"] == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first stream's send never began")
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := nodes.client.Open(ctx, forward.TransferRequest{SnapshotID: "node-a:tank/csi/pvc-a@snap-1"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a second stream while one runs: %v, want RESOURCE_EXHAUSTED", err)
	}
	release()
	if err := <-first; err != nil {
		t.Errorf("the first stream, released: %v", err)
	}
}

func TestAResumeTokenCannotMakeAnEncryptedVolumeLeaveDecrypted(t *testing.T) {
	nodes := newTwoNodes(t, 0)
	key := []byte("correct horse battery")
	volume(t, nodes.a, "tank/csi/secret", zfs.CreateOptions{Key: key, Properties: map[string]string{
		"encryption": "on", "keyformat": "passphrase", "keylocation": "prompt"}})
	// A token of a plain (decrypting) send of the very snapshot a peer may
	// pull: what a peer would forge to have the rest sent decrypted.
	var stream strings.Builder
	mustDo(t, nodes.a.Send(t.Context(), "tank/csi/secret@snap-1", zfs.SendOptions{}, &stream))
	cut := io.MultiReader(strings.NewReader(stream.String()[:stream.Len()/2]), errReader{})
	_ = nodes.b.Receive(t.Context(), "tank/csi/forged", zfs.ReceiveOptions{}, cut)
	token, err := nodes.b.ResumeToken(t.Context(), "tank/csi/forged")
	mustDo(t, err)
	if token == "" {
		t.Fatal("no partial receive to resume")
	}
	err = nodes.pull(t, forward.TransferRequest{SnapshotID: "node-a:tank/csi/secret@snap-1", ResumeToken: token}, "tank/csi/forged")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "raw") {
		t.Errorf("a token asking for a decrypted send: %v, want PERMISSION_DENIED saying it leaves only raw", err)
	}
	if _, err := zfs.Get(t.Context(), nodes.b, "tank/csi/forged@snap-1", nil); err == nil {
		t.Error("the decrypted stream arrived whole")
	}
}
