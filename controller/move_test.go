package controller

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// sourceIsLive says whether node-b's source volume is there and not marked
// deleted.
func sourceIsLive(h *harness, peer *peerNode) bool {
	return peer.fake.Exists("tank/csi/src") && peer.fake.Property("tank/csi/src", h.props.Deleted) == ""
}

// requestsMade is how often node-a asked node-b for a stream.
func requestsMade(peer *peerNode) int {
	peer.mu.Lock()
	defer peer.mu.Unlock()
	return len(peer.requests)
}

func TestAStaleRoundSnapshotNeverStandsForTheFinalRound(t *testing.T) {
	h, peer := newMovePair(t)
	ctx := context.Background()
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), false); code(err) != codes.Aborted {
		t.Fatalf("round 1: %v, want ABORTED", err)
	}
	// What earlier tries could have left on the source: a CSI snapshot
	// named as the second round once was, and a round whose answer was
	// lost, marked for this very pull.
	if _, err := peer.server.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "zfs-csi-pull-node-a-pvc-m-2", SourceVolumeId: "node-b:tank/csi/src"}); err != nil {
		t.Fatal(err)
	}
	if err := peer.fake.Snapshot(ctx, "tank/csi/src@"+rules.InternalSnapshotPrefix+"pull-0000000000000000",
		map[string]string{h.props.Internal: "true", h.props.PullFor: testNode + ":tank/csi/pvc-m"}); err != nil {
		t.Fatal(err)
	}
	if err := peer.fake.Write("tank/csi/src", 2<<20); err != nil { // the last writes before the workload stops
		t.Fatal(err)
	}
	moved, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true)
	if err != nil {
		t.Fatalf("the final round: %v", err)
	}
	if row := h.dataset(strings.TrimPrefix(moved.GetVolume().GetVolumeId(), testNode+":")); row.Referenced != 5<<20 {
		t.Errorf("the moved volume holds %d bytes, want all 5 MiB the source held when its workload stopped", row.Referenced)
	}
	if left := roundsLeft(peer); len(left) != 0 {
		t.Errorf("rounds left on the source's node: %v", left)
	}
}

func TestACOsSourceModeCannotMoveAVolume(t *testing.T) {
	for _, mode := range []string{moveSync, moveFinal} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t)
			peer := newPeerNode(t, h.props, zfs.CreateOptions{})
			h.server.UseTransfers(peer)
			allowMoves(h, peer) // even where the operator allows moves
			_, err := h.server.CreateVolume(context.Background(), volumeSourceRequest("pvc-t", mode))
			if code(err) != codes.InvalidArgument {
				t.Errorf("CreateVolume with %s=%s: %v, want INVALID_ARGUMENT", ParamSourceMode, mode, err)
			}
			if !sourceIsLive(h, peer) || requestsMade(peer) != 0 || len(h.incomingLeft()) != 0 {
				t.Errorf("the source is live %v, streams asked %d, incoming %v: want the source intact and nothing pulled",
					sourceIsLive(h, peer), requestsMade(peer), h.incomingLeft())
			}
		})
	}
}

func TestAMoveNeedsMovesAllowedWhereItArrivesAndWhereItLeaves(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	h.server.UseTransfers(peer)
	ctx := context.Background()
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true); code(err) != codes.FailedPrecondition {
		t.Errorf("a move to a node that does not allow them: %v, want FAILED_PRECONDITION", err)
	}
	if requestsMade(peer) != 0 {
		t.Error("a refused move pulled")
	}
	h.server.cfg.AllowMoves = true
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true); code(err) != codes.FailedPrecondition {
		t.Errorf("a move from a node that does not allow them: %v, want FAILED_PRECONDITION", err)
	}
	if !sourceIsLive(h, peer) {
		t.Fatal("the source's node deleted the volume its operator did not allow to move")
	}
	if ids := h.listVolumeIDs(); len(ids) != 0 {
		t.Errorf("volumes made by a refused move: %v", ids)
	}
	peer.server.cfg.AllowMoves = true
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true); err != nil {
		t.Errorf("the final round once both operators allow it: %v", err)
	}
	if sourceIsLive(h, peer) {
		t.Error("the source is live after the move")
	}
}

func TestTheFinalRoundWaitsForTheWorkloadToStop(t *testing.T) {
	h, peer := newMovePair(t)
	mounted := true
	peer.server.UseHost(func(dataset string, _ ...string) (bool, error) { return mounted && dataset == "tank/csi/src", nil }, nil)
	ctx := context.Background()
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), false); code(err) != codes.Aborted {
		t.Errorf("a round while the workload runs: %v, want ABORTED with the round", err)
	}
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true); code(err) != codes.FailedPrecondition {
		t.Errorf("the final round while the source is mounted: %v, want FAILED_PRECONDITION", err)
	}
	if !sourceIsLive(h, peer) {
		t.Fatal("the source went while mounted")
	}
	mounted = false
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true); err != nil {
		t.Errorf("the final round once the workload stopped: %v", err)
	}
}

func TestAWriteAfterTheFinalRoundKeepsTheSource(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	peer.server.cfg.AllowMoves = true
	ctx := forward.WithPeerCaller(context.Background(), testNode)
	puller := map[string]string{fieldSource: "node-b:tank/csi/src", fieldPuller: "tank/csi/pvc-m"}
	taken, err := peer.server.takeRound(ctx, pullsFields{fieldSource: puller[fieldSource], fieldPuller: puller[fieldPuller], fieldFinal: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.fake.Write("tank/csi/src", 1<<20); err != nil {
		t.Fatal(err)
	}
	end := pullsFields{fieldSource: puller[fieldSource], fieldPuller: puller[fieldPuller], fieldMove: "true", fieldGUID: taken[fieldGUID]}
	if _, err := peer.server.endPull(ctx, end); code(err) != codes.FailedPrecondition {
		t.Errorf("EndPull after a write: %v, want FAILED_PRECONDITION", err)
	}
	end[fieldGUID] = "12345"
	if _, err := peer.server.endPull(ctx, end); code(err) != codes.FailedPrecondition {
		t.Errorf("EndPull naming another GUID: %v, want FAILED_PRECONDITION", err)
	}
	if !sourceIsLive(h, peer) {
		t.Error("the source went with writes the puller does not hold")
	}
}

func TestARoundNeedsACallingNode(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	_, err := peer.server.takeRound(context.Background(), pullsFields{fieldSource: "node-b:tank/csi/src", fieldPuller: "tank/csi/x"})
	if code(err) != codes.InvalidArgument {
		t.Errorf("TakeRound outside a peer call: %v, want INVALID_ARGUMENT", err)
	}
}

func TestARestoreAcrossNodesIsSizedAsALocalOne(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	h.server.UseTransfers(peer)
	small := remoteRequest("pvc-small", mountCapability(""))
	small.CapacityRange = &csi.CapacityRange{RequiredBytes: 1 << 20, LimitBytes: 2 << 20}
	for try := 1; try <= 2; try++ {
		if _, err := h.server.CreateVolume(context.Background(), small); code(err) != codes.OutOfRange {
			t.Errorf("try %d: a limit below the snapshot's 3 MiB: %v, want OUT_OF_RANGE", try, err)
		}
	}
	if requestsMade(peer) != 0 || len(h.incomingLeft()) != 0 {
		t.Errorf("a refused restore pulled (%d streams) or left %v", requestsMade(peer), h.incomingLeft())
	}
	fits := remoteRequest("pvc-fits", mountCapability(""))
	fits.CapacityRange = &csi.CapacityRange{RequiredBytes: 1 << 20}
	if volume := h.create(fits); volume.GetCapacityBytes() < 3<<20 {
		t.Errorf("restored at %d bytes, smaller than the snapshot's 3 MiB", volume.GetCapacityBytes())
	}
}

func TestAFormattedZvolsSnapshotIsNotRestoredAcrossNodesWithAnotherFilesystem(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{VolSize: 8 << 20, Properties: map[string]string{"volblocksize": "16384", h.props.FSType: "xfs"}})
	h.server.UseTransfers(peer)
	_, err := h.server.CreateVolume(context.Background(), remoteRequest("pvc-x", mountCapability("ext4")))
	if code(err) != codes.InvalidArgument {
		t.Errorf("an xfs zvol's snapshot restored as ext4: %v, want INVALID_ARGUMENT", err)
	}
	if requestsMade(peer) != 0 {
		t.Error("the refused restore was pulled")
	}
}

// unreachable fails every connection as a peer.Client does for a node it
// has no address for.
type unreachable struct{ *peerNode }

func (unreachable) Conn(context.Context, string) (grpc.ClientConnInterface, error) {
	return nil, errors.New(`no address for node "node-b": not in --peer and no --peer-address-template`)
}

func TestASourceOnANodeWithNoAddressIsUnavailableNotInternal(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	h.server.UseTransfers(unreachable{peer})
	_, err := h.server.CreateVolume(context.Background(), remoteRequest("pvc-u", mountCapability("")))
	if code(err) != codes.Unavailable || !strings.Contains(err.Error(), otherNodeMarker) {
		t.Errorf("CreateVolume: %v, want UNAVAILABLE with the other-node marker (retried, never final)", err)
	}
}

func TestAnAbandonedCloneAcrossNodesLeavesNoRoundOnTheSource(t *testing.T) {
	h := newHarness(t)
	h.server.pullIdle = 200 * time.Millisecond
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	peer.breakAfter, peer.stall = 1<<19, true
	h.server.UseTransfers(peer)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := h.server.CreateVolume(ctx, volumeSourceRequest("pvc-c", "clone")); code(err) != codes.Aborted {
		t.Fatalf("CreateVolume while the stream stalls: %v, want ABORTED", err)
	}
	h.awaitNoPull("pvc-c")
	if left := roundsLeft(peer); len(left) != 0 {
		t.Errorf("an abandoned pull left its round on the source's node: %v", left)
	}
	if left := h.incomingLeft(); len(left) != 0 {
		t.Errorf("left in the hidden container: %v", left)
	}
}

func TestAPullWhoseSourceWentMidwayLeavesNothingReceived(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	// The first stream breaks off (a partial receive with a token); the
	// source is gone when the pull asks again.
	peer.breakAfter = 1 << 19
	peer.refusal, peer.refuseAfter = status.Error(codes.NotFound, "snapshot \"node-b:tank/csi/src@snap-1\" does not exist on node node-b"), 1
	h.server.UseTransfers(peer)
	if _, err := h.server.CreateVolume(context.Background(), remoteRequest("pvc-r", mountCapability(""))); code(err) != codes.NotFound {
		t.Errorf("CreateVolume: %v, want NOT_FOUND once the source went", err)
	}
	if len(peer.tokens()) < 2 || peer.tokens()[1] == "" {
		t.Fatalf("the pull asked with tokens %q; want a resume after the break", peer.tokens())
	}
	if left := h.incomingLeft(); len(left) != 0 {
		t.Errorf("a pull whose source went left %v", left)
	}
}

func TestAMoveCutAfterItsSourceWentIsFinishedByTheRetry(t *testing.T) {
	h, peer := newMovePair(t)
	ctx := context.Background()
	// The final round arrives, the source's node deletes the source, and
	// the daemon dies before the rename that makes the volume.
	h.fake.FailNext("Rename", errors.New("killed"))
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true); err == nil {
		t.Fatal("the final round went through its injected failure")
	}
	if sourceIsLive(h, peer) {
		t.Fatal("the source is live: the failure came too early to test anything")
	}
	moved, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true)
	if err != nil {
		t.Fatalf("the retry once the source is gone: %v", err)
	}
	if row := h.dataset(strings.TrimPrefix(moved.GetVolume().GetVolumeId(), testNode+":")); row.Referenced != 3<<20 {
		t.Errorf("the moved volume holds %d bytes, want the source's 3 MiB", row.Referenced)
	}
	if left := h.incomingLeft(); len(left) != 0 {
		t.Errorf("left in the hidden container: %v", left)
	}
}

func TestAFinalRoundAfterAnEarlierTrysCutRoundStartsItsOwnAnew(t *testing.T) {
	h, peer := newMovePair(t)
	ctx := context.Background()
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), false); code(err) != codes.Aborted {
		t.Fatalf("round 1: %v", err)
	}
	rounds, _, err := h.server.receivedRounds(ctx, "tank/csi/"+IncomingContainer+"/pvc-m")
	if err != nil || len(rounds) != 1 {
		t.Fatalf("rounds received: %v (%v)", rounds, err)
	}
	// An earlier try of the next round, cut when its daemon was killed: a
	// round of its own on the source, half received here.
	if err := peer.fake.Write("tank/csi/src", 1<<20); err != nil {
		t.Fatal(err)
	}
	earlier := "tank/csi/src@" + rules.InternalSnapshotPrefix + "pull-00000000000000aa"
	if err := peer.fake.Snapshot(ctx, earlier, map[string]string{h.props.Internal: "true", h.props.PullFor: testNode + ":tank/csi/pvc-m"}); err != nil {
		t.Fatal(err)
	}
	var stream strings.Builder
	if err := peer.fake.Send(ctx, earlier, zfs.SendOptions{From: "tank/csi/src@" + rounds[0]}, &stream); err != nil {
		t.Fatal(err)
	}
	half := io.MultiReader(strings.NewReader(stream.String()[:stream.Len()/2]), errorReader{})
	_ = h.fake.Receive(ctx, "tank/csi/"+IncomingContainer+"/pvc-m", zfs.ReceiveOptions{}, half)
	if token, _ := h.fake.ResumeToken(ctx, "tank/csi/"+IncomingContainer+"/pvc-m"); token == "" {
		t.Fatal("no partial receive to start from")
	}
	if err := peer.fake.Write("tank/csi/src", 1<<20); err != nil { // the last writes
		t.Fatal(err)
	}
	moved, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true)
	if err != nil {
		t.Fatalf("the final round after the earlier try: %v", err)
	}
	if row := h.dataset(strings.TrimPrefix(moved.GetVolume().GetVolumeId(), testNode+":")); row.Referenced != 5<<20 {
		t.Errorf("the moved volume holds %d bytes, want all 5 MiB", row.Referenced)
	}
}

type errorReader struct{}

func (errorReader) Read([]byte) (int, error) { return 0, errors.New("killed") }

func TestACopyOfAnEncryptedSnapshotOnAnotherNodeArrivesRawAndEncrypted(t *testing.T) {
	h := newHarness(t)
	peer := newPeerNode(t, h.props, zfs.CreateOptions{Key: []byte("correct horse battery"),
		Properties: map[string]string{"encryption": "on", "keyformat": "passphrase", "keylocation": "prompt"}})
	h.server.UseTransfers(peer)
	req := remoteRequest("pvc-e", mountCapability(""))
	req.Parameters = map[string]string{ParamSourceMode: "copy"}
	volume := h.create(req)
	row, err := zfs.GetWithKeyStatus(context.Background(), h.fake, strings.TrimPrefix(volume.GetVolumeId(), testNode+":"), nil)
	if err != nil || row.KeyStatus == "" {
		t.Errorf("the copy pulled from another node: keystatus %q (%v), want encrypted (a pull is a raw send)", row.KeyStatus, err)
	}
}

func TestARoundWhoseGUIDIsNotTheOneTheSourceTookIsRefused(t *testing.T) {
	h, peer := newMovePair(t)
	ctx := context.Background()
	if _, err := h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), false); code(err) != codes.Aborted {
		t.Fatalf("round 1: %v", err)
	}
	incoming := "tank/csi/" + IncomingContainer + "/pvc-m"
	rounds, _, err := h.server.receivedRounds(ctx, incoming)
	if err != nil || len(rounds) != 1 {
		t.Fatalf("rounds received: %v (%v)", rounds, err)
	}
	id := "node-b:tank/csi/src@" + rounds[0]
	rows, err := peer.fake.List(ctx, zfs.ListOptions{Roots: []string{"tank/csi/src@" + rounds[0]}, Types: []zfs.Type{zfs.Snapshot}, Provenance: true})
	if err != nil {
		t.Fatal(err)
	}
	taken := strconv.FormatUint(rows[0].GUID, 10)
	if guid, err := h.server.checkRound(ctx, incoming, id, taken); err != nil || guid != taken {
		t.Fatalf("the round the source took (GUID %s): %q, %v", taken, guid, err)
	}
	// What a source that answered one snapshot and sent another, or a
	// receive that kept another, would leave: the GUIDs differ.
	if _, err := h.server.checkRound(ctx, incoming, id, taken+"1"); code(err) != codes.Internal || !strings.Contains(err.Error(), "GUID") {
		t.Errorf("a round whose GUID is not the source's: %v, want INTERNAL naming the GUIDs", err)
	}
}

func TestAPullIsRefusedANameUsedUnderAnotherParent(t *testing.T) {
	h := newHarness(t, "tank/csi", "tank/other")
	peer := newPeerNode(t, h.props, zfs.CreateOptions{})
	h.server.UseTransfers(peer)
	h.create(createRequest("pvc-r", 1<<30, mountCapability("")))
	req := remoteRequest("pvc-r", mountCapability(""))
	req.Parameters = map[string]string{ParamParentDataset: "tank/other"}
	if _, err := h.server.CreateVolume(context.Background(), req); code(err) != codes.AlreadyExists {
		t.Fatalf("a restore from another node under a name tank/csi holds: %v, want ALREADY_EXISTS", err)
	}
	if requestsMade(peer) != 0 || len(h.incomingLeft()) != 0 || h.fake.Exists("tank/other/pvc-r") {
		t.Errorf("streams asked %d, incoming %v: want nothing pulled", requestsMade(peer), h.incomingLeft())
	}
}
