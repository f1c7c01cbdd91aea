package controller

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// peerNode is node-b as the peer channel shows it to node-a's controller:
// its own fake pool, whose snapshots it sends. breakAfter > 0 breaks the
// next stream after that many bytes, as a dropped connection does; stall
// holds the next stream after breakAfter bytes until its context ends, as
// a daemon killed mid-stream does.
type peerNode struct {
	fake       *zfstest.Fake
	server     *Server                  // node-b's controller
	conn       grpc.ClientConnInterface // node-b's controller and its Pulls, as node-a reaches them
	mu         sync.Mutex
	requests   []forward.TransferRequest
	breakAfter int
	stall      bool
	// swap, when set, is the snapshot sent whatever was asked for: a peer
	// that lies.
	swap string
	// refusal, when set, is every Open's answer, after delay; with
	// refuseAfter, only once that many streams were opened.
	refusal     error
	delay       time.Duration
	refuseAfter int
}

const remoteSnapshot = "node-b:tank/csi/src@snap-1"

// zvolMetadata is what a zvol written whole references beyond its volsize
// in the fake: any amount that is not a multiple of its block size.
const zvolMetadata = 40 << 10

func newPeerNode(t *testing.T, props rules.UserProps, opts zfs.CreateOptions) *peerNode {
	t.Helper()
	fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40})
	ctx := context.Background()
	if opts.Properties == nil {
		opts.Properties = map[string]string{}
	}
	opts.Properties[props.Managed] = "true"
	for _, err := range []error{
		fake.Create(ctx, "tank/csi", zfs.CreateOptions{}),
		fake.Create(ctx, "tank/csi/src", opts),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A filesystem with 3 MiB of data; a zvol written whole, which on
	// ZFS references more than its volsize (its metadata counts too: a
	// restore sized by referenced failed in the guest with "'volsize' must
	// be a multiple of volume block size").
	written := uint64(3 << 20)
	if opts.VolSize != 0 {
		written = opts.VolSize + zvolMetadata
	}
	if err := fake.Write("tank/csi/src", written); err != nil {
		t.Fatal(err)
	}
	if err := fake.Snapshot(ctx, "tank/csi/src@snap-1", map[string]string{props.SnapshotName: "snap-1"}); err != nil {
		t.Fatal(err)
	}
	server, conn := serveController(t, fake)
	return &peerNode{fake: fake, server: server, conn: conn}
}

// serveController serves node-b's controller over fake as the peer
// channel does (errors mapped as the daemon maps them), on loopback.
func serveController(t *testing.T, fake *zfstest.Fake) (*Server, grpc.ClientConnInterface) {
	t.Helper()
	cfg := rules.Config{DriverName: "zfs.csi.dev", Version: "test", NodeID: "node-b", ParentDatasets: []string{"tank/csi"}}
	controller, err := New(cfg, fake, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if fake.Crashed() {
			// Killed while it served: the caller's connection drops,
			// whatever the handler made of its failed commands.
			return nil, status.Error(codes.Unavailable, "connection reset: node-b's daemon was killed")
		}
		return resp, rpc.Status(err)
	}))
	csi.RegisterControllerServer(server, controller)
	forward.RegisterPeerOnly(server, &PullsServiceDesc, controller, func(context.Context) (string, error) { return testNode, nil })
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient("passthrough:///"+listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controller, conn
}

// Conn implements forward.Transfers (forward.Peers).
func (p *peerNode) Conn(_ context.Context, nodeID string) (grpc.ClientConnInterface, error) {
	if nodeID != "node-b" {
		return nil, status.Errorf(codes.Unavailable, "no peer %s", nodeID)
	}
	return p.conn, nil
}

// Open implements forward.Transfers.
func (p *peerNode) Open(ctx context.Context, req forward.TransferRequest) (io.ReadCloser, error) {
	p.mu.Lock()
	p.requests = append(p.requests, req)
	if p.refusal != nil && len(p.requests) > p.refuseAfter {
		refusal, delay := p.refusal, p.delay
		p.mu.Unlock()
		time.Sleep(delay)
		return nil, refusal
	}
	cut, stall := p.breakAfter, p.stall
	p.breakAfter, p.stall = 0, false
	p.mu.Unlock()
	_, snapshot, err := strings.Cut(req.SnapshotID, ":")
	if p.swap != "" {
		snapshot = p.swap
	}
	if !err || !p.fake.Exists(snapshot) {
		return nil, status.Errorf(codes.NotFound, "snapshot %q does not exist on node node-b", req.SnapshotID)
	}
	reader, writer := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		var out io.Writer = writer
		if cut > 0 {
			out = &breakingWriter{w: writer, left: cut, stall: stall, ctx: ctx}
		}
		_, from, _ := strings.Cut(req.FromSnapshotID, ":")
		// As the peer's Transfer sends: an encrypted volume raw only.
		row, _ := zfs.GetWithKeyStatus(ctx, p.fake, snapshot[:strings.IndexByte(snapshot, '@')], nil)
		writer.CloseWithError(p.fake.Send(ctx, snapshot, zfs.SendOptions{From: from, ResumeToken: req.ResumeToken, Raw: row.KeyStatus != ""}, out))
	}()
	return readCloser{Reader: reader, close: func() { cancel(); reader.Close() }}, nil
}

func (p *peerNode) tokens() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var tokens []string
	for _, req := range p.requests {
		tokens = append(tokens, req.ResumeToken)
	}
	return tokens
}

type readCloser struct {
	io.Reader
	close func()
}

func (r readCloser) Close() error { r.close(); return nil }

// breakingWriter passes left bytes, then fails (or waits for ctx to end).
type breakingWriter struct {
	w     io.Writer
	left  int
	stall bool
	ctx   context.Context
}

func (b *breakingWriter) Write(p []byte) (int, error) {
	if b.left <= 0 {
		if b.stall {
			<-b.ctx.Done()
		}
		return 0, errors.New("connection reset by peer")
	}
	n, err := b.w.Write(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

func remoteRequest(name string, capability *csi.VolumeCapability) *csi.CreateVolumeRequest {
	req := createRequest(name, 1<<30, capability)
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: remoteSnapshot}}}
	return req
}

// awaitNoPull waits until no pull of name runs (it ended, or was
// abandoned), or fails the test after ten seconds.
func (h *harness) awaitNoPull(name string) {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); h.server.copies.running(name) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatalf("the pull of %s goes on", name)
		}
	}
}

// incomingLeft lists what pulls left in the hidden container.
func (h *harness) incomingLeft() []string {
	h.t.Helper()
	var left []string
	for _, name := range h.fake.Names() {
		if strings.HasPrefix(name, "tank/csi/"+IncomingContainer+"/") {
			left = append(left, name)
		}
	}
	return left
}

func TestWithoutTransfersAnotherNodesSnapshotIsResourceExhausted(t *testing.T) {
	h := newHarness(t)
	_, err := h.server.CreateVolume(context.Background(), remoteRequest("pvc-r", mountCapability("")))
	if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), otherNodeMarker) {
		t.Errorf("CreateVolume: %v, want RESOURCE_EXHAUSTED for another node's source", err)
	}
	if h.fake.TotalCalls() != 0 {
		t.Errorf("%d zfs commands ran", h.fake.TotalCalls())
	}
}

func TestAVolumeFromAnotherNodesSnapshotIsPulledWhole(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	h.server.UseTransfers(peer)
	volume := h.create(remoteRequest("pvc-r", mountCapability("")))
	if !strings.HasPrefix(volume.GetVolumeId(), testNode+":tank/csi/") || volume.GetContentSource().GetSnapshot().GetSnapshotId() != remoteSnapshot {
		t.Errorf("volume %v", volume)
	}
	row := h.dataset(strings.TrimPrefix(volume.GetVolumeId(), testNode+":"))
	if row.Referenced != 3<<20 || row.RefQuota != 1<<30 || row.User[h.props.Managed] != "true" || row.User[h.props.Source] != remoteSnapshot {
		t.Errorf("the pulled volume: referenced %d, refquota %d, %v", row.Referenced, row.RefQuota, row.User)
	}
	if left := h.incomingLeft(); len(left) != 0 {
		t.Errorf("left in the hidden container: %v", left)
	}
	if snapshots := h.snapshotsLeft(); len(snapshots) != 0 {
		t.Errorf("snapshots left on the new volume: %v", snapshots)
	}
	if again := h.create(remoteRequest("pvc-r", mountCapability(""))); again.GetVolumeId() != volume.GetVolumeId() {
		t.Errorf("a retry answered %s, want the same volume", again.GetVolumeId())
	}
	if n := len(peer.tokens()); n != 1 {
		t.Errorf("the source was sent %d times, want once", n)
	}
}

func TestAPullWhoseConnectionDropsResumesFromItsToken(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	peer.breakAfter = 1 << 19
	h.server.UseTransfers(peer)
	volume := h.create(remoteRequest("pvc-r", mountCapability("")))
	tokens := peer.tokens()
	if len(tokens) != 2 || tokens[0] != "" || tokens[1] == "" {
		t.Errorf("requests' resume tokens %q: want a full send, then one resumed", tokens)
	}
	if row := h.dataset(strings.TrimPrefix(volume.GetVolumeId(), testNode+":")); row.Referenced != 3<<20 {
		t.Errorf("the pulled volume holds %d bytes, want 3 MiB", row.Referenced)
	}
}

func TestAPullCutByARestartIsNeverVisibleAndResumesAfterIt(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	peer.breakAfter, peer.stall = 1<<19, true
	h.server.UseTransfers(peer)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := h.server.CreateVolume(ctx, remoteRequest("pvc-r", mountCapability("")))
	if code(err) != codes.Aborted || !strings.Contains(err.Error(), "received") {
		t.Fatalf("CreateVolume while the stream stalls: %v, want ABORTED with the progress", err)
	}
	h.server.Close() // the daemon stops: its pull is cut
	if ids := h.listVolumeIDs(); len(ids) != 0 {
		t.Errorf("ListVolumes shows %v while the pull is cut short", ids)
	}
	if left := h.incomingLeft(); len(left) != 1 {
		t.Fatalf("hidden: %v, want the partial receive", left)
	}

	restarted, err := New(h.server.cfg, h.fake, h.server.log)
	if err != nil {
		t.Fatal(err)
	}
	restarted.UseTransfers(peer)
	h.server = restarted
	volume := h.create(remoteRequest("pvc-r", mountCapability("")))
	if tokens := peer.tokens(); len(tokens) != 2 || tokens[1] == "" {
		t.Errorf("requests' resume tokens %q: want the second to resume", tokens)
	}
	if row := h.dataset(strings.TrimPrefix(volume.GetVolumeId(), testNode+":")); row.Referenced != 3<<20 {
		t.Errorf("the pulled volume holds %d bytes, want 3 MiB", row.Referenced)
	}
	if left := h.incomingLeft(); len(left) != 0 {
		t.Errorf("left in the hidden container: %v", left)
	}
}

func TestAPullThatCannotBeTheVolumeLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *csi.CreateVolumeRequest
		want codes.Code
	}{
		{"a snapshot the peer does not have", func() *csi.CreateVolumeRequest {
			req := remoteRequest("pvc-r", mountCapability(""))
			req.VolumeContentSource.GetSnapshot().SnapshotId = "node-b:tank/csi/src@gone"
			return req
		}(), codes.NotFound},
		{"a dataset's snapshot asked for as a block volume", remoteRequest("pvc-r", blockCapability()), codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.server.UseTransfers(newPeerNode(t, h.props, zfs.CreateOptions{}))
			_, err := h.server.CreateVolume(context.Background(), tc.req)
			if code(err) != tc.want {
				t.Errorf("CreateVolume: %v, want %v", err, tc.want)
			}
			if left := h.incomingLeft(); len(left) != 0 {
				t.Errorf("left in the hidden container: %v", left)
			}
			if ids := h.listVolumeIDs(); len(ids) != 0 {
				t.Errorf("volumes: %v", ids)
			}
		})
	}
}

func volumeSourceRequest(name, sourceMode string) *csi.CreateVolumeRequest {
	req := createRequest(name, 1<<30, mountCapability(""))
	if sourceMode != "" {
		req.Parameters = map[string]string{ParamSourceMode: sourceMode}
	}
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "node-b:tank/csi/src"}}}
	return req
}

func TestACloneOfAnotherNodesVolumeIsOneRoundAndLeavesTheSourceAsItWas(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	peer.server.cfg.AllowMoves = true // even where moves are allowed, a clone never deletes
	h.server.UseTransfers(peer)
	volume := h.create(volumeSourceRequest("pvc-c", "clone"))
	if row := h.dataset(strings.TrimPrefix(volume.GetVolumeId(), testNode+":")); row.Referenced != 3<<20 {
		t.Errorf("the clone holds %d bytes, want the source's 3 MiB", row.Referenced)
	}
	if !peer.fake.Exists("tank/csi/src") || peer.fake.Property("tank/csi/src", h.props.Deleted) != "" {
		t.Error("the source volume went or was marked deleted")
	}
	if left := roundsLeft(peer); len(left) != 0 {
		t.Errorf("rounds left on the source's node: %v", left)
	}
	if left := h.incomingLeft(); len(left) != 0 {
		t.Errorf("left in the hidden container: %v", left)
	}
}

// roundsLeft are the round snapshots of pulls on the source's node.
func roundsLeft(peer *peerNode) []string {
	var left []string
	for _, name := range peer.fake.Names() {
		if strings.Contains(name, "@"+rules.InternalSnapshotPrefix+"pull-") {
			left = append(left, name)
		}
	}
	return left
}

// allowMoves is an operator's choice on both nodes.
func allowMoves(h *harness, peer *peerNode) {
	h.server.cfg.AllowMoves, peer.server.cfg.AllowMoves = true, true
}

// newMovePair is node-a pulling from node-b, both of whose operators
// allow moves.
func newMovePair(t *testing.T) (*harness, *peerNode) {
	t.Helper()
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	h.server.UseTransfers(peer)
	allowMoves(h, peer)
	return h, peer
}

func TestAMoveIsRoundsWhileInUseAndAFinalOneThatDeletesTheSource(t *testing.T) {
	h, peer := newMovePair(t)
	ctx := context.Background()
	for round := 1; round <= 2; round++ {
		_, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), false)
		if code(err) != codes.Aborted || !strings.Contains(err.Error(), "round "+strconv.Itoa(round)+" received") {
			t.Fatalf("round %d: %v, want ABORTED saying the round arrived", round, err)
		}
		if ids := h.listVolumeIDs(); len(ids) != 0 {
			t.Fatalf("after round %d the volume is visible: %v", round, ids)
		}
		if err := peer.fake.Write("tank/csi/src", 1<<20); err != nil { // the workload goes on writing
			t.Fatal(err)
		}
	}
	volume, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true)
	if err != nil {
		t.Fatalf("the final round: %v", err)
	}
	if row := h.dataset(strings.TrimPrefix(volume.GetVolume().GetVolumeId(), testNode+":")); row.Referenced != 5<<20 {
		t.Errorf("the moved volume holds %d bytes, want the source's last 5 MiB", row.Referenced)
	}
	peer.mu.Lock()
	var froms []string
	for _, req := range peer.requests {
		froms = append(froms, req.FromSnapshotID)
	}
	peer.mu.Unlock()
	if len(froms) != 3 || froms[0] != "" || froms[1] == "" || froms[2] == "" {
		t.Errorf("the rounds' bases %q: want a full send, then two incrementals", froms)
	}
	if peer.fake.Exists("tank/csi/src") && peer.fake.Property("tank/csi/src", h.props.Deleted) == "" {
		t.Errorf("the source volume is live still (its CSI snapshot keeps it, marked deleted): %v", peer.fake.Names())
	}
	if left := roundsLeft(peer); len(left) != 0 {
		t.Errorf("rounds left on the source's node: %v", left)
	}
	if snapshots := h.snapshotsLeft(); len(snapshots) != 0 {
		t.Errorf("snapshots left on the moved volume: %v", snapshots)
	}
	again, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true)
	if err != nil || again.GetVolume().GetVolumeId() != volume.GetVolume().GetVolumeId() {
		t.Errorf("a retry of the last round answered %v, %v", again, err)
	}
}

func TestAPullNoCallAsksForAnyMoreIsAbandonedAndLeavesNothing(t *testing.T) {
	h := newHarness(t)
	h.server.pullIdle = 200 * time.Millisecond
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	peer.breakAfter, peer.stall = 1<<19, true
	h.server.UseTransfers(peer)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := h.server.CreateVolume(ctx, remoteRequest("pvc-r", mountCapability(""))); code(err) != codes.Aborted {
		t.Fatalf("CreateVolume while the stream stalls: %v, want ABORTED", err)
	}
	h.awaitNoPull("pvc-r")
	if left := h.incomingLeft(); len(left) != 0 {
		t.Errorf("left in the hidden container: %v", left)
	}
	if ids := h.listVolumeIDs(); len(ids) != 0 {
		t.Errorf("volumes: %v", ids)
	}
}

func TestAStreamOfAnotherSnapshotThanAskedForIsNeverReceived(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	if err := peer.fake.Create(context.Background(), "tank/csi/other", zfs.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := peer.fake.Snapshot(context.Background(), "tank/csi/other@x", nil); err != nil {
		t.Fatal(err)
	}
	peer.swap = "tank/csi/other@x"
	h.server.UseTransfers(peer)
	_, err := h.server.CreateVolume(context.Background(), remoteRequest("pvc-r", mountCapability("")))
	if err == nil || !strings.Contains(err.Error(), "the peer sent a stream of") {
		t.Errorf("CreateVolume: %v, want the lying peer's stream refused", err)
	}
	if n := len(peer.tokens()); n != 1 {
		t.Errorf("asked the peer %d times; a refused stream is not asked for again", n)
	}
	if left := h.incomingLeft(); len(left) != 0 {
		t.Errorf("left in the hidden container: %v", left)
	}
}

func TestAPullThatFailedWithNoCallWaitingIsTheNextCallsAnswer(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	peer.refusal, peer.delay = status.Error(codes.PermissionDenied, "the stream is refused"), 3*time.Second
	h.server.UseTransfers(peer)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := h.server.CreateVolume(ctx, remoteRequest("pvc-r", mountCapability(""))); code(err) != codes.Aborted {
		t.Fatalf("the first call: %v, want ABORTED while the pull runs", err)
	}
	h.awaitNoPull("pvc-r")
	if _, err := h.server.CreateVolume(context.Background(), remoteRequest("pvc-r", mountCapability(""))); code(err) != codes.PermissionDenied {
		t.Errorf("the call after the pull failed: %v, want its PERMISSION_DENIED", err)
	}
	peer.mu.Lock()
	peer.refusal = nil
	peer.mu.Unlock()
	if volume := h.create(remoteRequest("pvc-r", mountCapability(""))); volume.GetVolumeId() == "" {
		t.Error("the next call did not pull again")
	}
}

func TestAZvolPulledAtItsSourcesSizeTakesTheSourcesVolsize(t *testing.T) {
	h := newHarness(t)
	const volsize = 4 << 20
	peer := newPeerNode(t, h.props, zfs.CreateOptions{VolSize: volsize})
	h.server.UseTransfers(peer)
	req := remoteRequest("pvc-z", blockCapability())
	req.CapacityRange = &csi.CapacityRange{RequiredBytes: volsize}
	volume := h.create(req)
	if volume.GetCapacityBytes() != volsize {
		t.Errorf("capacity %d, want the source's volsize %d", volume.GetCapacityBytes(), volsize)
	}
	row := h.dataset(strings.TrimPrefix(volume.GetVolumeId(), testNode+":"))
	if row.Type != zfs.Volume || row.VolSize != volsize {
		t.Errorf("the pulled zvol: type %s, volsize %d, want %d", row.Type, row.VolSize, volsize)
	}
}

func TestAZvolPulledTakesItsSizeInTheSourcesBlocks(t *testing.T) {
	h := newHarness(t)
	const volsize, block = 4 << 20, 64 << 10
	peer := newPeerNode(t, h.props, zfs.CreateOptions{VolSize: volsize, Properties: map[string]string{"volblocksize": strconv.Itoa(block)}})
	h.server.UseTransfers(peer)
	req := remoteRequest("pvc-z", blockCapability())
	req.CapacityRange = &csi.CapacityRange{RequiredBytes: volsize + 16<<10}
	volume := h.create(req)
	if want := int64(volsize + block); volume.GetCapacityBytes() != want {
		t.Errorf("capacity %d, want %d: the request rounded up to the source's %d-byte blocks", volume.GetCapacityBytes(), want, block)
	}
}
