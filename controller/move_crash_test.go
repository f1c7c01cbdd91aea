package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// moveUnderKills is the two nodes of a move whose daemons a test kills
// (zfstest.Fake.CrashAfter) and starts again (restart).
type moveUnderKills struct {
	h    *harness
	peer *peerNode
}

func newMoveUnderKills(t *testing.T) *moveUnderKills {
	h, peer := newMovePair(t)
	return &moveUnderKills{h: h, peer: peer}
}

func (m *moveUnderKills) fake(node string) *zfstest.Fake {
	if node == testNode {
		return m.h.fake
	}
	return m.peer.fake
}

// restart starts node's daemon again over what its pool holds: whatever
// the killed one kept in memory (locks, pulls under way) is gone.
func (m *moveUnderKills) restart(t *testing.T, node string) {
	t.Helper()
	m.fake(node).Revive()
	if node == testNode {
		server, err := New(m.h.server.cfg, m.h.fake, zerolog.New(zerolog.NewTestWriter(t)))
		if err != nil {
			t.Fatal(err)
		}
		server.UseTransfers(m.peer)
		m.h.server = server
	} else {
		m.peer.server, m.peer.conn = serveController(t, m.peer.fake)
	}
	allowMoves(m.h, m.peer)
}

// state is every dataset and snapshot of both nodes: a move that was
// killed and run again must end where one never killed ends.
func (m *moveUnderKills) state() (a, b []string) {
	return m.h.fake.Names(), m.peer.fake.Names()
}

// TestAMoveKilledBeforeAnyCommandOnEitherNodeLosesNoWrite kills one node's
// daemon before each of its zfs commands in turn (which is also after the
// one before it: each command is one transaction group), over the whole
// move, the rounds and the final one. The operator then runs the final
// round again, as the docs say, until it answers. Every write arrives,
// the volume ID is the one an uninterrupted move gives, and both pools end
// as after an uninterrupted move: no _incoming child, no round snapshot,
// no source.
func TestAMoveKilledBeforeAnyCommandOnEitherNodeLosesNoWrite(t *testing.T) {
	ctx := context.Background()
	// A pull asks a stream again after 1, 2, 5 and 10 s; a dead peer
	// fails each try at once here, so the waits are only time.
	defer func(saved []time.Duration) { pullBackoff = saved }(pullBackoff)
	pullBackoff = []time.Duration{time.Millisecond}
	run := func(m *moveUnderKills) {
		_, _ = m.h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), false)
		if err := m.peer.fake.Write("tank/csi/src", 2<<20); err != nil { // the last writes, before the workload stops
			t.Fatal(err)
		}
		_, _ = m.h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true)
	}
	// An uninterrupted move, for what the others must end as.
	reference := newMoveUnderKills(t)
	run(reference)
	moved, err := reference.h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true)
	if err != nil {
		t.Fatalf("the final round run again after an uninterrupted move: %v", err)
	}
	wantID := moved.GetVolume().GetVolumeId()
	wantA, wantB := reference.state()
	if sourceIsLive(reference.h, reference.peer) || len(reference.h.incomingLeft()) != 0 {
		t.Fatalf("the uninterrupted move left node-a %v, node-b %v", wantA, wantB)
	}

	for _, node := range []string{testNode, "node-b"} {
		kills := 0
		for kill := 0; ; kill++ {
			m := newMoveUnderKills(t)
			m.fake(node).CrashAfter(kill)
			run(m)
			if !m.fake(node).Crashed() {
				break // the whole move ran in fewer commands
			}
			kills++
			m.restart(t, node)
			var answer string
			for try := 1; ; try++ {
				moved, err := m.h.server.MoveVolume(ctx, volumeSourceRequest("pvc-m", ""), true)
				if err == nil {
					answer = moved.GetVolume().GetVolumeId()
					break
				}
				if try == 3 || code(err) != codes.Aborted && code(err) != codes.Unavailable {
					t.Fatalf("%s killed before its command %d: the final round run again, try %d: %v", node, kill+1, try, err)
				}
			}
			if answer != wantID {
				t.Errorf("%s killed before its command %d: the volume is %s, want %s", node, kill+1, answer, wantID)
			}
			if row := m.h.dataset(strings.TrimPrefix(answer, testNode+":")); row.Referenced != 5<<20 {
				t.Errorf("%s killed before its command %d: the moved volume holds %d bytes, want all 5 MiB", node, kill+1, row.Referenced)
			}
			if sourceIsLive(m.h, m.peer) {
				t.Errorf("%s killed before its command %d: the source is live after the move", node, kill+1)
			}
			if a, b := m.state(); !slices.Equal(a, wantA) || !slices.Equal(b, wantB) {
				t.Errorf("%s killed before its command %d: node-a holds %v and node-b %v; an uninterrupted move leaves %v and %v",
					node, kill+1, a, b, wantA, wantB)
			}
		}
		t.Logf("%s killed before each of its %d commands of a move", node, kills)
		if kills < 5 {
			t.Errorf("%s: only %d commands to kill before: the kill does not reach the move", node, kills)
		}
	}
}
