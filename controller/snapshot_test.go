package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// A snapshot costs one list and one zfs snapshot, is ready at once and is sized for a restore.
func TestSnapshotCostsOneListAndOneCommandAndIsSizedForARestore(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	if err := h.fake.Write(datasetOf(t, volume.GetVolumeId()), 7<<20); err != nil {
		t.Fatal(err)
	}
	h.fake.ResetCalls()
	snapshot := h.snapshot("s", volume.GetVolumeId())
	if calls := h.fake.TotalCalls(); calls != 2 {
		t.Errorf("ran %d commands, want 2: %v", calls, h.fake.Calls())
	}
	// size_bytes is what a restore needs (the volume's size), not the 7 MiB written.
	if !snapshot.GetReadyToUse() || snapshot.GetSizeBytes() != 1<<30 || snapshot.GetSourceVolumeId() != volume.GetVolumeId() ||
		snapshot.GetCreationTime() == nil {
		t.Errorf("snapshot %v", snapshot)
	}
	got, err := h.server.GetSnapshot(context.Background(), &csi.GetSnapshotRequest{SnapshotId: snapshot.GetSnapshotId()})
	if err != nil || got.GetSnapshot().GetSizeBytes() != 1<<30 || !got.GetSnapshot().GetCreationTime().IsValid() {
		t.Errorf("GetSnapshot: %v, %v", got, err)
	}
}

// The same name twice returns the same snapshot; of another volume it already exists.
func TestSnapshotNameIsIdempotentOnItsVolumeAndTakenOnAnother(t *testing.T) {
	h := newHarness(t)
	first := h.create(createRequest("a", 1<<30, mountCapability("")))
	second := h.create(createRequest("b", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", first.GetVolumeId())
	if again := h.snapshot("s", first.GetVolumeId()); again.GetSnapshotId() != snapshot.GetSnapshotId() {
		t.Errorf("got %s then %s", snapshot.GetSnapshotId(), again.GetSnapshotId())
	}
	_, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: second.GetVolumeId()})
	if code(err) != codes.AlreadyExists {
		t.Errorf("got %v, want AlreadyExists", err)
	}
}

// A name taken on another volume is found after the reaper's sweep, and a name whose snapshot went is free again.
func TestSnapshotNameTakenOnAnotherVolumeIsFoundAfterTheReapersSweepAndFreedWhenItGoes(t *testing.T) {
	h := newHarness(t)
	first := h.create(createRequest("a", 1<<30, mountCapability("")))
	second := h.create(createRequest("b", 1<<30, mountCapability("")))
	taken := h.snapshot("s", first.GetVolumeId())
	if err := h.server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: second.GetVolumeId()})
	if code(err) != codes.AlreadyExists {
		t.Errorf("got %v, want AlreadyExists", err)
	}
	// Gone behind the service's back: the index's entry is stale.
	_, snapshotName, _ := strings.Cut(taken.GetSnapshotId(), ":")
	if err := h.fake.Destroy(context.Background(), snapshotName, zfs.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	again := h.snapshot("s", second.GetVolumeId())
	if !strings.HasPrefix(again.GetSnapshotId(), second.GetVolumeId()+"@") {
		t.Errorf("got %s, want a snapshot of %s", again.GetSnapshotId(), second.GetVolumeId())
	}
}

// On a ZFS without guarded snapshots it lists and snapshots, and stops trying the guarded way.
func TestSnapshotOnAZFSWithoutGuardedSnapshotsListsThenSnapshots(t *testing.T) {
	h := newHarness(t)
	first := h.create(createRequest("a", 1<<30, mountCapability("")))
	second := h.create(createRequest("b", 1<<30, mountCapability("")))
	if err := h.server.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.fake.FailNext("SnapshotGuarded", fmt.Errorf("zfs program: %w", zfs.ErrUnsupported))
	h.fake.ResetCalls()
	made := h.snapshot("s", first.GetVolumeId())
	if !h.fake.Exists(strings.SplitN(made.GetSnapshotId(), ":", 2)[1]) {
		t.Fatalf("%s was not made", made.GetSnapshotId())
	}
	if calls := h.fake.Calls(); calls["SnapshotGuarded"] != 1 || calls["Snapshot"] != 1 {
		t.Errorf("calls %v, want one refused guarded snapshot, then a snapshot", calls)
	}
	_, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: second.GetVolumeId()})
	if code(err) != codes.AlreadyExists {
		t.Errorf("the same name on another volume: got %v, want AlreadyExists", err)
	}
	if calls := h.fake.Calls(); calls["SnapshotGuarded"] != 1 {
		t.Errorf("tried the guarded way again: %v", calls)
	}
}

// A snapshot of a volume marked deleted is refused and nothing is made.
func TestSnapshotOfAVolumeMarkedDeletedIsRefused(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("a", 1<<30, mountCapability("")))
	h.snapshot("keep", volume.GetVolumeId()) // holds the volume: delete marks it
	h.deleteVolume(volume.GetVolumeId())
	before := h.fake.Names()
	_, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "late", SourceVolumeId: volume.GetVolumeId()})
	if code(err) != codes.NotFound {
		t.Errorf("got %v, want NotFound", err)
	}
	if after := h.fake.Names(); !slices.Equal(before, after) {
		t.Errorf("datasets changed: %v → %v", before, after)
	}
}

// A name taken before the service started is found before the first reaper pass.
func TestSnapshotNameTakenBeforeTheServiceStartedIsFound(t *testing.T) {
	h := newHarness(t)
	first := h.create(createRequest("a", 1<<30, mountCapability("")))
	second := h.create(createRequest("b", 1<<30, mountCapability("")))
	h.snapshot("s", first.GetVolumeId())
	restarted, err := New(h.server.cfg, h.fake, h.server.log)
	if err != nil {
		t.Fatal(err)
	}
	_, err = restarted.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: second.GetVolumeId()})
	if code(err) != codes.AlreadyExists {
		t.Errorf("got %v, want AlreadyExists", err)
	}
}

// Snapshots of datasets the driver does not own are refused.
func TestSnapshotOfADatasetNotOwnedIsRefused(t *testing.T) {
	h := newHarness(t)
	for _, source := range []string{testNode + ":tank/csi/keep", testNode + ":tank/csi/missing", "node-b:tank/csi/v", "garbage"} {
		_, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: source})
		if code(err) != codes.NotFound {
			t.Errorf("%s: got %v, want NotFound", source, err)
		}
	}
	if h.fake.Exists("tank/csi/keep@s") {
		t.Error("snapshotted the operator's dataset")
	}
}

// A snapshot with clones is destroyed deferred: hidden now, gone with its last clone.
func TestDeleteSnapshotWithClonesIsDeferred(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	snapshot := h.snapshot("s", volume.GetVolumeId())
	clone := h.create(fromSnapshot(createRequest("c", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
	h.deleteSnapshot(snapshot.GetSnapshotId())
	if ids := h.listSnapshotIDs(&csi.ListSnapshotsRequest{}); len(ids) != 0 {
		t.Errorf("deferred snapshot still listed: %v", ids)
	}
	if _, err := h.server.GetSnapshot(context.Background(), &csi.GetSnapshotRequest{SnapshotId: snapshot.GetSnapshotId()}); code(err) != codes.NotFound {
		t.Errorf("GetSnapshot of a deleted snapshot: %v", err)
	}
	h.deleteSnapshot(snapshot.GetSnapshotId()) // again: OK
	h.deleteVolume(clone.GetVolumeId())
	if _, zfsName, _ := h.server.snapshotName(snapshot.GetSnapshotId()); h.fake.Exists(zfsName + "@s") {
		t.Error("snapshot outlived its last clone")
	}
}

// DeleteSnapshot is one command, touches only CSI snapshots, and wakes the reaper only for a volume marked deleted.
func TestDeleteSnapshotIsOneCommandAndTouchesOnlyCSISnapshots(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("v", 1<<30, mountCapability("")))
	dataset := datasetOf(t, volume.GetVolumeId())
	internal := dataset + "@" + rules.InternalSnapshotPrefix + "x"
	for name, props := range map[string]map[string]string{
		dataset + "@by-hand": nil,
		internal:             {h.props.Internal: "true", h.props.SnapshotName: "x"},
	} {
		if err := h.fake.Snapshot(context.Background(), name, props); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{dataset + "@by-hand", internal, dataset + "@missing"} {
		h.fake.ResetCalls()
		h.deleteSnapshot(testNode + ":" + name)
		if calls := h.fake.TotalCalls(); calls != 1 {
			t.Errorf("%s: %d commands, want 1: %v", name, calls, h.fake.Calls())
		}
	}
	if !h.fake.Exists(dataset+"@by-hand") || !h.fake.Exists(internal) {
		t.Errorf("destroyed a snapshot that is no CSI snapshot: %v", h.fake.Names())
	}
	plain := h.snapshot("plain", volume.GetVolumeId())
	h.deleteSnapshot(plain.GetSnapshotId())
	if h.fake.Exists(dataset+"@"+strings.SplitN(plain.GetSnapshotId(), "@", 2)[1]) || len(h.server.reap) != 0 {
		t.Errorf("a snapshot of a live volume: still there, or the reaper woke (%d)", len(h.server.reap))
	}
	last := h.snapshot("last", volume.GetVolumeId())
	h.deleteVolume(volume.GetVolumeId()) // held by its snapshot: marked deleted
	h.deleteSnapshot(last.GetSnapshotId())
	if len(h.server.reap) != 1 {
		t.Error("deleting the last snapshot of a volume marked deleted did not wake the reaper")
	}
}

// A volume cannot be made from a deleted snapshot, though its clone keeps it in ZFS.
func TestNoVolumeFromADeletedSnapshot(t *testing.T) {
	// warm: the snapshot was made on the guarded path, so sourceIndex remembers it.
	for _, h := range []*harness{newHarness(t), warmHarness(t)} {
		volume := h.create(createRequest("v", 1<<30, mountCapability("")))
		snapshot := h.snapshot("s", volume.GetVolumeId())
		h.create(fromSnapshot(createRequest("c", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
		h.deleteSnapshot(snapshot.GetSnapshotId())
		_, err := h.server.CreateVolume(context.Background(), fromSnapshot(createRequest("d", 1<<30, mountCapability("")), snapshot.GetSnapshotId()))
		if code(err) != codes.NotFound {
			t.Errorf("got %v, want NotFound", err)
		}
		for _, id := range h.listVolumeIDs() {
			if strings.HasSuffix(id, "/d") {
				t.Errorf("a volume was made from a deleted snapshot: %s", id)
			}
		}
	}
}

func TestListSnapshotsFilters(t *testing.T) {
	h := newHarness(t)
	a := h.create(createRequest("a", 1<<30, mountCapability("")))
	b := h.create(createRequest("b", 1<<30, mountCapability("")))
	sa1, sa2, sb := h.snapshot("a1", a.GetVolumeId()), h.snapshot("a2", a.GetVolumeId()), h.snapshot("b1", b.GetVolumeId())
	tests := []struct {
		name string
		req  *csi.ListSnapshotsRequest
		want []string
	}{
		{"all snapshots, sorted by ID", &csi.ListSnapshotsRequest{}, []string{sa1.GetSnapshotId(), sa2.GetSnapshotId(), sb.GetSnapshotId()}},
		{"by source volume", &csi.ListSnapshotsRequest{SourceVolumeId: a.GetVolumeId()}, []string{sa1.GetSnapshotId(), sa2.GetSnapshotId()}},
		{"by snapshot ID", &csi.ListSnapshotsRequest{SnapshotId: sb.GetSnapshotId()}, []string{sb.GetSnapshotId()}},
		{"by an unknown snapshot ID", &csi.ListSnapshotsRequest{SnapshotId: testNode + ":tank/csi/a@nope"}, nil},
		{"by a malformed snapshot ID", &csi.ListSnapshotsRequest{SnapshotId: "nope"}, nil},
		{"by an unknown source volume", &csi.ListSnapshotsRequest{SourceVolumeId: testNode + ":tank/csi/nope"}, nil},
		{"a page after a token", &csi.ListSnapshotsRequest{StartingToken: sa1.GetSnapshotId(), MaxEntries: 1}, []string{sa2.GetSnapshotId()}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := h.listSnapshotIDs(test.req); !slices.Equal(got, test.want) {
				t.Errorf("got %v, want %v", got, test.want)
			}
		})
	}
	t.Run("a token not issued by this plugin is aborted", func(t *testing.T) {
		_, err := h.server.ListSnapshots(context.Background(), &csi.ListSnapshotsRequest{StartingToken: "bogus"})
		if code(err) != codes.Aborted {
			t.Errorf("got %v", err)
		}
	})
}

// long: subtests on one shared fixture, one behaviour each
func TestListVolumesPagination(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, h.create(createRequest(fmt.Sprintf("v%d", i), 1<<20, mountCapability(""))).GetVolumeId())
	}
	t.Run("pages cover every volume once, with one zfs list for the first page and none for the others", func(t *testing.T) {
		var seen []string
		token := ""
		for pages := 0; pages < 10; pages++ {
			h.fake.ResetCalls()
			response, err := h.server.ListVolumes(context.Background(), &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if pages == 0 {
				want = 1
			}
			if calls := h.fake.TotalCalls(); calls != want {
				t.Errorf("page %d ran %d commands, want %d", pages+1, calls, want)
			}
			for _, entry := range response.GetEntries() {
				seen = append(seen, entry.GetVolume().GetVolumeId())
			}
			if token = response.GetNextToken(); token == "" {
				break
			}
		}
		if !slices.Equal(seen, ids) {
			t.Errorf("paged %v, want %v", seen, ids)
		}
	})
	t.Run("a page after a volume change of this service lists again and shows it", func(t *testing.T) {
		first, err := h.server.ListVolumes(context.Background(), &csi.ListVolumesRequest{MaxEntries: 2})
		if err != nil {
			t.Fatal(err)
		}
		added := h.create(createRequest("v8", 1<<20, mountCapability(""))).GetVolumeId()
		h.fake.ResetCalls()
		rest, err := h.server.ListVolumes(context.Background(), &csi.ListVolumesRequest{StartingToken: first.GetNextToken()})
		if err != nil {
			t.Fatal(err)
		}
		if calls := h.fake.TotalCalls(); calls != 1 {
			t.Errorf("the page ran %d commands, want 1", calls)
		}
		var got []string
		for _, entry := range rest.GetEntries() {
			got = append(got, entry.GetVolume().GetVolumeId())
		}
		if want := []string{ids[2], ids[3], ids[4], added}; !slices.Equal(got, want) {
			t.Errorf("rest %v, want %v", got, want)
		}
		h.deleteVolume(added)
	})
	t.Run("a token survives a restart and volumes deleted or added between pages", func(t *testing.T) {
		first, err := h.server.ListVolumes(context.Background(), &csi.ListVolumesRequest{MaxEntries: 2})
		if err != nil {
			t.Fatal(err)
		}
		h.deleteVolume(ids[1]) // the page's last entry, which the token names
		added := h.create(createRequest("v9", 1<<20, mountCapability(""))).GetVolumeId()
		restarted, err := New(h.server.cfg, h.fake, h.server.log)
		if err != nil {
			t.Fatal(err)
		}
		rest, err := restarted.ListVolumes(context.Background(), &csi.ListVolumesRequest{StartingToken: first.GetNextToken()})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, entry := range rest.GetEntries() {
			got = append(got, entry.GetVolume().GetVolumeId())
		}
		if want := []string{ids[2], ids[3], ids[4], added}; !slices.Equal(got, want) {
			t.Errorf("rest %v, want %v", got, want)
		}
	})
	t.Run("a bad token is aborted and a negative page size invalid", func(t *testing.T) {
		for token, want := range map[string]codes.Code{"invalid-token": codes.Aborted, "node-b:tank/csi/v0": codes.Aborted} {
			if _, err := h.server.ListVolumes(context.Background(), &csi.ListVolumesRequest{StartingToken: token}); code(err) != want {
				t.Errorf("token %q: got %v", token, err)
			}
		}
		if _, err := h.server.ListVolumes(context.Background(), &csi.ListVolumesRequest{MaxEntries: -1}); code(err) != codes.InvalidArgument {
			t.Errorf("got %v", err)
		}
	})
	t.Run("only the driver's live volumes are listed", func(t *testing.T) {
		for _, id := range h.listVolumeIDs() {
			if id == testNode+":tank/csi/keep" {
				t.Error("listed the operator's dataset")
			}
		}
	})
}

// The ways CreateSnapshot runs: before the index's first listing (a zfs list,
// then the guarded program), after it (the program alone), and on ZFS before
// 2.2 (a zfs list and a zfs snapshot).
func snapshotPaths(t *testing.T) map[string]*harness {
	old := warmHarness(t)
	old.fake.FailNext("SnapshotGuarded", fmt.Errorf("zfs program: %w", zfs.ErrUnsupported))
	return map[string]*harness{"cold": newHarness(t), "warm": warmHarness(t), "before 2.2": old}
}

// A CO that lost the reply retries after the volume was deleted (kept,
// marked, by this very snapshot): the snapshot was cut, so the answer is it.
func TestCreateSnapshotRetriedAfterItsVolumeWasDeletedAnswersWithTheSnapshot(t *testing.T) {
	for path, h := range snapshotPaths(t) {
		t.Run(path, func(t *testing.T) {
			volume := h.create(createRequest("v", 1<<30, mountCapability("")))
			snapshot := h.snapshot("s", volume.GetVolumeId())
			h.deleteVolume(volume.GetVolumeId())
			before := h.fake.Names()
			again, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: volume.GetVolumeId()})
			if err != nil || again.GetSnapshot().GetSnapshotId() != snapshot.GetSnapshotId() ||
				!again.GetSnapshot().GetCreationTime().AsTime().Equal(snapshot.GetCreationTime().AsTime()) {
				t.Fatalf("retry: %v, %v; want %v", again, err, snapshot)
			}
			_, err = h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "new", SourceVolumeId: volume.GetVolumeId()})
			if code(err) != codes.NotFound {
				t.Errorf("a new snapshot of the deleted volume: got %v, want NotFound", err)
			}
			if after := h.fake.Names(); !slices.Equal(before, after) {
				t.Errorf("datasets changed: %v → %v", before, after)
			}
		})
	}
}

// creation_time is what ZFS recorded, so that CreateSnapshot, GetSnapshot and
// ListSnapshots tell the same time.
func TestSnapshotCreationTimeIsWhatZFSRecorded(t *testing.T) {
	for path, h := range snapshotPaths(t) {
		t.Run(path, func(t *testing.T) {
			volume := h.create(createRequest("v", 1<<30, mountCapability("")))
			made := h.snapshot("s", volume.GetVolumeId())
			_, name, _ := strings.Cut(made.GetSnapshotId(), ":")
			recorded := h.dataset(name).Creation
			got, err := h.server.GetSnapshot(context.Background(), &csi.GetSnapshotRequest{SnapshotId: made.GetSnapshotId()})
			if err != nil {
				t.Fatal(err)
			}
			listed, err := h.server.ListSnapshots(context.Background(), &csi.ListSnapshotsRequest{SnapshotId: made.GetSnapshotId()})
			if err != nil || len(listed.GetEntries()) != 1 {
				t.Fatalf("ListSnapshots: %v, %v", listed, err)
			}
			for what, at := range map[string]time.Time{"CreateSnapshot": made.GetCreationTime().AsTime(),
				"GetSnapshot":   got.GetSnapshot().GetCreationTime().AsTime(),
				"ListSnapshots": listed.GetEntries()[0].GetSnapshot().GetCreationTime().AsTime()} {
				if !at.Equal(recorded) {
					t.Errorf("%s says %s, ZFS recorded %s", what, at, recorded)
				}
			}
		})
	}
}

// Only the driver's own interrupted run is taken over (it marks the volume
// before it snapshots). A snapshot an operator made that happens to have the
// name the CSI name maps to is not the CO's: ALREADY_EXISTS, the spec's
// answer for a name that cannot be had as asked (the CO must use another
// name), and the operator's snapshot stays as it was, no CSI name on it.
func TestCreateSnapshotDoesNotTakeOverAnOperatorsSnapshotOfTheName(t *testing.T) {
	for path, h := range snapshotPaths(t) {
		t.Run(path, func(t *testing.T) {
			volume := h.create(createRequest("v", 1<<30, mountCapability("")))
			operators := datasetOf(t, volume.GetVolumeId()) + "@" + h.server.namer.SnapshotComponent("s")
			if err := h.fake.Snapshot(context.Background(), operators, nil); err != nil {
				t.Fatal(err)
			}
			_, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: volume.GetVolumeId()})
			if code(err) != codes.AlreadyExists {
				t.Errorf("got %v, want AlreadyExists", err)
			}
			if user := h.dataset(operators).User; user[h.props.SnapshotName] != "" || user[h.props.Size] != "" {
				t.Errorf("the operator's snapshot was marked: %v", user)
			}
			if ids := h.listSnapshotIDs(&csi.ListSnapshotsRequest{}); len(ids) != 0 {
				t.Errorf("listed %v", ids)
			}
		})
	}
}
