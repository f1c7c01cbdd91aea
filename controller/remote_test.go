package controller

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
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
	mu         sync.Mutex
	requests   []driver.TransferRequest
	breakAfter int
	stall      bool
}

const remoteSnapshot = "node-b:tank/csi/src@snap-1"

func newPeerNode(t *testing.T, props driver.UserProps, opts zfs.CreateOptions) *peerNode {
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
	if opts.VolSize == 0 {
		if err := fake.Write("tank/csi/src", 3<<20); err != nil {
			t.Fatal(err)
		}
	}
	if err := fake.Snapshot(ctx, "tank/csi/src@snap-1", map[string]string{props.SnapshotName: "snap-1"}); err != nil {
		t.Fatal(err)
	}
	return &peerNode{fake: fake}
}

// Open implements driver.Transfers.
func (p *peerNode) Open(ctx context.Context, req driver.TransferRequest) (io.ReadCloser, error) {
	p.mu.Lock()
	p.requests = append(p.requests, req)
	cut, stall := p.breakAfter, p.stall
	p.breakAfter, p.stall = 0, false
	p.mu.Unlock()
	_, snapshot, err := strings.Cut(req.SnapshotID, ":")
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
		writer.CloseWithError(p.fake.Send(ctx, snapshot, zfs.SendOptions{ResumeToken: req.ResumeToken}, out))
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
