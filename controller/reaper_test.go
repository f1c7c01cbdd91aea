package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// What the reaper must still reap now that a pass reads only the volumes'
// marks, and the snapshots of marked and watched datasets. Each case leaves
// something due; one pass (Reap) must take exactly the due datasets away,
// and leave everything else as it was.
//
// long: a table of things left due, one a row
func TestAReaperPassReapsWhatIsDue(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// prepare leaves something due and returns what must go.
		prepare func(t *testing.T, h *harness) []string
	}{
		{"a volume marked deleted whose CSI snapshot went", func(t *testing.T, h *harness) []string {
			volume := h.create(createRequest("v", 1<<30, mountCapability("")))
			snapshot := h.snapshot("s", volume.GetVolumeId())
			h.deleteVolume(volume.GetVolumeId())
			h.deleteSnapshot(snapshot.GetSnapshotId())
			return []string{datasetOf(t, volume.GetVolumeId())}
		}},
		{"a volume marked deleted whose deferred snapshot went with its last clone", func(t *testing.T, h *harness) []string {
			volume := h.create(createRequest("v", 1<<30, mountCapability("")))
			snapshot := h.snapshot("s", volume.GetVolumeId())
			clone := h.create(fromSnapshot(createRequest("clone", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
			h.deleteSnapshot(snapshot.GetSnapshotId()) // deferred: the clone holds it
			h.deleteVolume(volume.GetVolumeId())
			h.deleteVolume(clone.GetVolumeId())
			return []string{datasetOf(t, volume.GetVolumeId())}
		}},
		{"volumes marked deleted whose group snapshot went", func(t *testing.T, h *harness) []string {
			a := h.create(createRequest("a", 1<<30, mountCapability(""))).GetVolumeId()
			b := h.create(createRequest("b", 1<<30, blockCapability())).GetVolumeId()
			group, err := h.server.Group().CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a, b}})
			if err != nil {
				t.Fatal(err)
			}
			h.deleteVolume(a)
			h.deleteVolume(b)
			if _, err := h.server.Group().DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{
				GroupSnapshotId: group.GetGroupSnapshot().GetGroupSnapshotId()}); err != nil {
				t.Fatal(err)
			}
			return []string{datasetOf(t, a), datasetOf(t, b)}
		}},
		{"an internal snapshot whose deferred destroy failed when its clone was made", func(t *testing.T, h *harness) []string {
			source := h.create(createRequest("source", 1<<30, mountCapability("")))
			h.fake.FailNext("Destroy", fmt.Errorf("zfs destroy: %w", zfs.ErrBusy))
			copied := h.create(fromVolume(createRequest("copy", 1<<30, mountCapability("")), source.GetVolumeId()))
			h.deleteVolume(copied.GetVolumeId())
			return internalSnapshotsOf(h, datasetOf(t, source.GetVolumeId()))
		}},
		{"an internal snapshot a daemon that stopped left behind, once its clone went", func(t *testing.T, h *harness) []string {
			source := h.create(createRequest("source", 1<<30, mountCapability("")))
			dataset := datasetOf(t, source.GetVolumeId())
			// What a daemon stopped between its clone and the deferred
			// destroy leaves: the internal snapshot with its clone.
			leftover := dataset + "@" + rules.InternalSnapshotPrefix + "clone"
			if err := h.fake.Snapshot(ctx, leftover, map[string]string{h.props.Internal: "true"}); err != nil {
				t.Fatal(err)
			}
			clone := h.create(createRequest("clone", 1<<30, mountCapability(""))).GetVolumeId()
			h.deleteVolume(clone)
			if err := h.fake.Clone(ctx, leftover, datasetOf(t, clone), map[string]string{h.props.Managed: "true"}); err != nil {
				t.Fatal(err)
			}
			h.deleteVolume(clone)
			return []string{leftover}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			bystander := h.create(createRequest("bystander", 1<<30, mountCapability("")))
			h.snapshot("bystander-snapshot", bystander.GetVolumeId())
			due := c.prepare(t, h)
			if len(due) == 0 {
				t.Fatal("nothing due to check")
			}
			before := h.fake.Names()
			for _, name := range due {
				if !slices.Contains(before, name) {
					t.Fatalf("%s is not there before the pass: %v", name, before)
				}
			}
			if err := h.server.Reap(ctx); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, name := range before {
				if !slices.ContainsFunc(due, func(gone string) bool { return name == gone || strings.HasPrefix(name, gone+"@") }) {
					want = append(want, name)
				}
			}
			if after := h.fake.Names(); !slices.Equal(after, want) {
				t.Errorf("after the pass: %v, want %v", after, want)
			}
		})
	}
}

func internalSnapshotsOf(h *harness, dataset string) []string {
	var found []string
	for _, name := range h.fake.Names() {
		if strings.HasPrefix(name, dataset+"@"+rules.InternalSnapshotPrefix) {
			found = append(found, name)
		}
	}
	return found
}

// A pass with nothing marked and nothing watched is one zfs list, of the
// volumes only, however many volumes and snapshots there are; each marked
// volume adds its snapshots to one second listing, never a listing each.
func TestAReaperPassListsOnlyTheVolumesAndTheMarkedOnesSnapshots(t *testing.T) {
	ctx := context.Background()
	for _, volumes := range []int{1, 10, 40} {
		h := newHarness(t)
		var ids []string
		for i := range volumes {
			id := h.create(createRequest(fmt.Sprintf("v%d", i), 1<<30, mountCapability(""))).GetVolumeId()
			h.snapshot(fmt.Sprintf("s%d", i), id)
			ids = append(ids, id)
		}
		h.fake.ResetCalls()
		if err := h.server.Reap(ctx); err != nil {
			t.Fatal(err)
		}
		if calls := h.fake.Calls(); !maps.Equal(calls, map[string]int{"List": 1}) {
			t.Errorf("%d volumes, none marked: a pass ran %v, want one List", volumes, calls)
		}
		// Marked deleted, held by their snapshots: two listings, nothing destroyed.
		for _, id := range ids[:(volumes+1)/2] {
			h.deleteVolume(id)
		}
		h.fake.ResetCalls()
		if err := h.server.Reap(ctx); err != nil {
			t.Fatal(err)
		}
		if calls := h.fake.Calls(); !maps.Equal(calls, map[string]int{"List": 2}) {
			t.Errorf("%d volumes, %d marked and held: a pass ran %v, want two List", volumes, (volumes+1)/2, calls)
		}
	}
}

// A pass's listing of the volumes reads the two marks it decides by, and
// the snapshots' listing names only volumes marked deleted.
func TestAReaperPassReadsSnapshotsOfMarkedVolumesOnly(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	live := h.create(createRequest("live", 1<<30, mountCapability("")))
	h.snapshot("live-s", live.GetVolumeId())
	marked := h.create(createRequest("marked", 1<<30, mountCapability("")))
	h.snapshot("marked-s", marked.GetVolumeId())
	h.deleteVolume(marked.GetVolumeId())
	recorder := &listRecorder{Interface: h.fake}
	h.server.zfs = recorder
	if err := h.server.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if len(recorder.lists) != 2 {
		t.Fatalf("listings %+v, want two", recorder.lists)
	}
	volumes, snapshots := recorder.lists[0], recorder.lists[1]
	if !slices.Equal(volumes.Roots, []string{"tank/csi"}) || volumes.Depth != 1 || slices.Contains(volumes.Types, zfs.Snapshot) ||
		!slices.Equal(volumes.UserProps, []string{h.props.Managed, h.props.Deleted}) {
		t.Errorf("the volumes' listing: %+v", volumes)
	}
	if !slices.Equal(snapshots.Roots, []string{datasetOf(t, marked.GetVolumeId())}) || !slices.Equal(snapshots.Types, []zfs.Type{zfs.Snapshot}) {
		t.Errorf("the snapshots' listing: %+v", snapshots)
	}
}

// listRecorder records the options of every List, for tests that check
// what a pass reads.
type listRecorder struct {
	zfs.Interface
	mu    sync.Mutex
	lists []zfs.ListOptions
}

func (r *listRecorder) List(ctx context.Context, opts zfs.ListOptions) ([]zfs.Dataset, error) {
	r.mu.Lock()
	r.lists = append(r.lists, opts)
	r.mu.Unlock()
	return r.Interface.List(ctx, opts)
}

func (r *listRecorder) listed() []zfs.ListOptions {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lists)
}

// A pass that could not read what it was asked to look at keeps it for
// the next: a copy's internal snapshot (it has no clone) whose deferred
// destroy failed is due at once, and nothing else would name it again.
func TestAReaperPassThatFailsKeepsWhatItWatches(t *testing.T) {
	ctx := context.Background()
	for _, failing := range []int{1, 2} { // the volumes' listing, the snapshots'
		h := newHarness(t)
		leftover := h.copyLeavingItsInternalSnapshot()
		for range failing - 1 {
			h.fake.FailNext("List", nil)
		}
		h.fake.FailNext("List", errors.New("zfs list: interrupted"))
		if err := h.server.Reap(ctx); err == nil {
			t.Fatal("the pass reported no failure")
		}
		h.leftByAFailedPassGoesWithTheNext(ctx, leftover, fmt.Sprintf("listing %d failed once", failing))
	}
}

// The sweep (the first pass after a start) reads every snapshot: an
// internal snapshot whose clone never came, left by a daemon that stopped,
// is found there and nowhere else.
func TestTheSweepRemovesAnInternalSnapshotWhoseCloneNeverCame(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	leftover := datasetOf(t, volume.GetVolumeId()) + "@" + rules.InternalSnapshotPrefix + "x"
	if err := h.fake.Snapshot(context.Background(), leftover, map[string]string{h.props.Internal: "true"}); err != nil {
		t.Fatal(err)
	}
	if err := h.server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.fake.Exists(leftover) || !h.fake.Exists(datasetOf(t, volume.GetVolumeId())) {
		t.Error("the sweep kept the leftover or took the volume")
	}
}

func TestTheSweepLeavesAPullsRoundToItsPull(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	round := datasetOf(t, volume.GetVolumeId()) + "@" + rules.InternalSnapshotPrefix + "pull-0123456789abcdef"
	if err := h.fake.Snapshot(context.Background(), round, map[string]string{h.props.Internal: "true", h.props.PullFor: "node-b:tank/csi/v"}); err != nil {
		t.Fatal(err)
	}
	if err := h.server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !h.fake.Exists(round) {
		t.Error("the sweep destroyed a round another node's pull needs (a daemon restarted mid-move lost the move's base)")
	}
}

// A sweep that could not list keeps what passes were told to look at.
func TestASweepThatFailsKeepsWhatItWatches(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	leftover := h.copyLeavingItsInternalSnapshot()
	h.fake.FailNext("List", errors.New("zfs list: interrupted"))
	if err := h.server.Sweep(ctx); err == nil {
		t.Fatal("the sweep reported no failure")
	}
	if err := h.server.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if h.fake.Exists(leftover) {
		t.Errorf("%s left after a failed sweep and a pass", leftover)
	}
}

// A reaper pass that could not destroy an internal snapshot it was told to
// look at, or found its volume busy, looks again at the next.
func TestAReaperPassLooksAgainAtWhatItCouldNotDestroy(t *testing.T) {
	ctx := context.Background()
	for _, busy := range []bool{false, true} {
		h := newHarness(t)
		source := h.create(createRequest("source", 1<<30, mountCapability("")))
		h.fake.FailNext("Destroy", fmt.Errorf("zfs destroy: %w", zfs.ErrBusy))
		copied := h.create(fromVolume(createRequest("copy", 1<<30, mountCapability("")), source.GetVolumeId()))
		h.deleteVolume(copied.GetVolumeId())
		leftovers := internalSnapshotsOf(h, datasetOf(t, source.GetVolumeId()))
		if len(leftovers) != 1 {
			t.Fatalf("internal snapshots left %v, want one", leftovers)
		}
		if busy {
			release, err := h.server.inflight.Acquire(datasetLock(datasetOf(t, source.GetVolumeId())))
			if err != nil {
				t.Fatal(err)
			}
			if err := h.server.Reap(ctx); err != nil {
				t.Fatal(err)
			}
			release()
		} else {
			h.fake.FailNext("Destroy", fmt.Errorf("zfs destroy: %w", zfs.ErrBusy))
			if err := h.server.Reap(ctx); err == nil {
				t.Fatal("the pass reported no failure")
			}
		}
		h.leftByAFailedPassGoesWithTheNext(ctx, leftovers[0], fmt.Sprintf("busy %v", busy))
	}
}

// An internal snapshot with a clone is not due: the sweep leaves it alone,
// without a destroy (the clone's going frees it).
func TestTheSweepLeavesAnInternalSnapshotWithACloneAlone(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	leftover := datasetOf(t, volume.GetVolumeId()) + "@" + rules.InternalSnapshotPrefix + "clone"
	if err := h.fake.Snapshot(ctx, leftover, map[string]string{h.props.Internal: "true"}); err != nil {
		t.Fatal(err)
	}
	if err := h.fake.Clone(ctx, leftover, "tank/csi/clone", map[string]string{h.props.Managed: "true"}); err != nil {
		t.Fatal(err)
	}
	h.fake.ResetCalls()
	if err := h.server.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if row := h.dataset(leftover); row.DeferDestroy || h.fake.Calls()["Destroy"] != 0 {
		t.Errorf("the sweep destroyed an internal snapshot with a clone: %+v, calls %v", row, h.fake.Calls())
	}
}

// RunReaper sweeps first, and its later passes are woken by a deletion.
func TestTheReaperSweepsAtStartAndPassesWhenWoken(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	leftover := datasetOf(t, volume.GetVolumeId()) + "@" + rules.InternalSnapshotPrefix + "x"
	if err := h.fake.Snapshot(context.Background(), leftover, map[string]string{h.props.Internal: "true"}); err != nil {
		t.Fatal(err)
	}
	held := h.create(createRequest("held", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", held.GetVolumeId())
	h.deleteVolume(held.GetVolumeId())
	recorder := &listRecorder{Interface: h.fake}
	h.server.zfs = recorder
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.server.RunReaper(ctx, time.Hour); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the sweep to take the leftover", func() bool { return !h.fake.Exists(leftover) })
	swept := len(recorder.listed())
	h.deleteSnapshot(snapshot.GetSnapshotId()) // wakes the reaper: its volume is marked deleted
	waitFor(t, "a woken pass to take the volume", func() bool { return !h.fake.Exists(datasetOf(t, held.GetVolumeId())) })
	for _, list := range recorder.listed()[swept:] {
		if slices.Contains(list.Types, zfs.Snapshot) && slices.Equal(list.Roots, []string{"tank/csi"}) {
			t.Errorf("a pass after the sweep listed every snapshot: %+v", list)
		}
	}
}

// A pass that finds a volume busy (a DeleteSnapshot that has just freed it
// still holds it, say) skips it; the reaper must then pass again as soon as
// the holder lets go, not an interval later.
func TestTheReaperPassesAgainWhenAVolumeItSkippedIsReleased(t *testing.T) {
	h := newHarness(t)
	held := h.create(createRequest("held", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", held.GetVolumeId())
	h.deleteVolume(held.GetVolumeId())
	dataset := datasetOf(t, held.GetVolumeId())
	name, _, err := h.server.snapshotName(snapshot.GetSnapshotId())
	if err != nil {
		t.Fatal(err)
	}
	release, err := h.server.inflight.Acquire(datasetLock(dataset))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.fake.Destroy(context.Background(), name, zfs.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.server.reap: // what the calls above asked for is not under test
	default:
	}
	if err := h.server.Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !h.fake.Exists(dataset) {
		t.Fatal("a pass destroyed a volume another call holds")
	}
	if len(h.server.reap) != 0 {
		t.Fatal("the reaper was woken while the volume was still held")
	}
	release()
	select {
	case <-h.server.reap:
	default:
		t.Fatal("releasing the volume a pass skipped did not wake the reaper")
	}
	if err := h.server.Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.fake.Exists(dataset) {
		t.Fatal("the pass after the release left the volume")
	}
}

func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// copyLeavingItsInternalSnapshot makes a copy (sourceMode copy) of a new
// volume whose internal snapshot's deferred destroy fails: a snapshot with no
// clone, due at once, that nothing but the reaper names again. It returns it.
func (h *harness) copyLeavingItsInternalSnapshot() string {
	h.t.Helper()
	source := h.create(createRequest("source", 1<<30, mountCapability("")))
	h.fake.FailNext("Destroy", nil) // the received snapshot goes
	h.fake.FailNext("Destroy", fmt.Errorf("zfs destroy: %w", zfs.ErrBusy))
	copyRequest := fromVolume(createRequest("copy", 1<<30, mountCapability("")), source.GetVolumeId())
	copyRequest.Parameters = map[string]string{ParamSourceMode: "copy"}
	h.create(copyRequest)
	leftovers := internalSnapshotsOf(h, datasetOf(h.t, source.GetVolumeId()))
	if len(leftovers) != 1 {
		h.t.Fatalf("internal snapshots left %v, want one", leftovers)
	}
	return leftovers[0]
}

// leftByAFailedPassGoesWithTheNext checks that a pass that failed (how: why)
// left name in place, and that the next pass removes it.
func (h *harness) leftByAFailedPassGoesWithTheNext(ctx context.Context, name, why string) {
	h.t.Helper()
	if !h.fake.Exists(name) {
		h.t.Fatalf("%s: %s gone in the pass that failed", why, name)
	}
	if err := h.server.Reap(ctx); err != nil {
		h.t.Fatal(err)
	}
	if h.fake.Exists(name) {
		h.t.Errorf("%s: %s left after the next pass", why, name)
	}
}
