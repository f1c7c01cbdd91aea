//go:build e2e

package tests

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
)

// move asks d's operator's socket (beside its CSI socket) for a round of
// the move of sourceID here as name.
func (d *driverProcess) move(c context.Context, name, sourceID string, final bool) (*csi.CreateVolumeResponse, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(filepath.Dir(d.socket), "operator.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	req := volumeRequest(name, 64<<20, mountCap(""), nil)
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: sourceID}}}
	req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{"zfs.csi.dev/node": "node-b"}}}}
	method := rpc.OperatorMoveRound
	if final {
		method = rpc.OperatorMoveFinal
	}
	response := &csi.CreateVolumeResponse{}
	return response, conn.Invoke(c, "/"+rpc.OperatorService+"/"+method, req, response)
}

// A move's final round with either daemon SIGKILLed at random instants
// (inside its zfs commands or between them), retried until it answers:
// every write arrives, the source is gone, nothing is left on either node
// (no _incoming child, no round snapshot), and the retries agree on the
// volume's ID.
func TestAMoveInterruptedByKillsOnEitherNodeLosesNoWrite(t *testing.T) {
	for attempt := range 4 {
		t.Run("attempt "+string(rune('0'+attempt)), func(t *testing.T) { moveWithAKill(t, attempt) })
	}
}

// moveWithAKill is one attempt: the sending daemon killed on even ones, the
// receiving one on odd ones.
func moveWithAKill(t *testing.T, attempt int) {
	p := startPeerPair(t)
	name := "moved-" + string(rune('a'+attempt))
	source := p.a.createVolume(volumeRequest("src-"+string(rune('a'+attempt)), 64<<20, mountCap(""), nil))
	dataset := datasetOf(t, source.GetVolumeId())
	dir := t.TempDir()
	mustRun(t, "mount", "-t", "zfs", dataset, dir)
	mustRun(t, "sh", "-c", `head -c 12M /dev/urandom > "$1/first" && sync`, "sh", dir)
	if _, err := p.b.move(ctx(t), name, source.GetVolumeId(), false); status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "round 1 received") {
		t.Fatalf("round 1: %v", err)
	}
	mustRun(t, "sh", "-c", `head -c 4M /dev/urandom > "$1/last" && sync`, "sh", dir)
	want := mustRun(t, "sh", "-c", `cd "$1" && sha256sum first last`, "sh", dir)
	mustRun(t, "umount", dir) // the workload stops

	victim := p.a
	if attempt%2 == 1 {
		victim = p.b
	}
	callCtx, cancel := context.WithCancel(ctx(t))
	go func() { _, _ = p.b.move(callCtx, name, source.GetVolumeId(), true) }()
	time.Sleep(time.Duration(rand.Int64N(int64(1500 * time.Millisecond))))
	cancel()
	victim.killHard()
	var moved *csi.CreateVolumeResponse
	deadline := time.Now().Add(3 * time.Minute)
	for {
		response, err := p.b.move(ctx(t), name, source.GetVolumeId(), true)
		if err == nil {
			moved = response
			break
		}
		switch status.Code(err) {
		case codes.Aborted, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		default:
			t.Fatalf("attempt %d: the final round after a kill of %s: %v", attempt, victim.parent, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt %d: the final round did not converge: %v", attempt, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	again, err := p.b.move(ctx(t), name, source.GetVolumeId(), true)
	if err != nil || again.GetVolume().GetVolumeId() != moved.GetVolume().GetVolumeId() {
		t.Errorf("attempt %d: a retry answered %v (%v), want %s", attempt, again.GetVolume().GetVolumeId(), err, moved.GetVolume().GetVolumeId())
	}
	movedDir := mountDataset(t, datasetOf(t, moved.GetVolume().GetVolumeId()))
	if got := mustRun(t, "sh", "-c", `cd "$1" && sha256sum first last`, "sh", movedDir); got != want {
		t.Errorf("attempt %d (killed %s): the moved files\n%s\nwant\n%s", attempt, victim.parent, got, want)
	}
	run(t, "umount", movedDir)
	if exists(t, dataset) {
		t.Errorf("attempt %d: the source %s is still there", attempt, dataset)
	}
	if left := incomingLeft(t, p.parentB); left != "" {
		t.Errorf("attempt %d: left in _incoming: %s", attempt, left)
	}
	if left := strings.TrimSpace(run(t, "zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", p.parentA, p.parentB)); left != "" {
		t.Errorf("attempt %d: snapshots left: %s", attempt, left)
	}
	t.Logf("attempt %d: killed %s (%d kills inside a zfs command so far)", attempt, victim.parent, p.a.killsInZFS+p.b.killsInZFS)
}
