package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// The group calls as a CO makes them after lost replies, retries and
// partial failures (spec: DeleteVolumeGroupSnapshot MUST be idempotent and
// answer OK once the artifacts are gone; a snapshot_ids mismatch the plugin
// can detect is INVALID_ARGUMENT).

func (h *harness) getGroup(id string, members []string) (*csi.VolumeGroupSnapshot, error) {
	response, err := h.server.Group().GetVolumeGroupSnapshot(context.Background(), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: members})
	return response.GetGroupSnapshot(), err
}

func (h *harness) deleteGroup(id string, members []string) error {
	_, err := h.server.Group().DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: members})
	return err
}

func TestGroupSnapshotDeletedWithARestoredMemberStaysDeleted(t *testing.T) {
	h := newHarness(t)
	_, group := h.groupOfThree()
	id, members := group.GetGroupSnapshotId(), memberIDs(group)
	h.create(fromSnapshot(createRequest("restored", 1<<30, mountCapability("ext4")), members[1]))
	if err := h.deleteGroup(id, members); err != nil {
		t.Fatal(err)
	}
	if left := h.snapshotsLeft(); len(left) != 1 || !h.dataset(left[0]).DeferDestroy {
		t.Fatalf("left %v, want the restored member, deferred", left)
	}
	for _, named := range [][]string{members, nil} {
		if err := h.deleteGroup(id, named); err != nil {
			t.Errorf("Delete again with %d IDs: %v, want OK", len(named), err)
		}
		if _, err := h.getGroup(id, named); code(err) != codes.NotFound {
			t.Errorf("Get with %d IDs: got %v, want NotFound", len(named), err)
		}
	}
}

func TestGroupSnapshotDeleteCutOffBetweenMembersIsFinishedByARetry(t *testing.T) {
	h := newHarness(t)
	_, group := h.groupOfThree()
	id, members := group.GetGroupSnapshotId(), memberIDs(group)
	h.create(fromSnapshot(createRequest("restored", 1<<30, mountCapability("")), members[0]))
	// The first member is deferred, the second meets an error, the third goes.
	h.fake.FailNext("DestroySnapshotGuarded", nil)
	h.fake.FailNext("DestroySnapshotGuarded", &zfs.CommandError{Argv: []string{"zfs", "program"}, ExitCode: 1,
		Stderr: "pool I/O is currently suspended", Kind: zfs.ErrPoolSuspended})
	if err := h.deleteGroup(id, members); err == nil {
		t.Fatal("the error on the second member was not reported")
	}
	if left := h.snapshotsLeft(); len(left) != 2 {
		t.Errorf("after the failed delete: %v, want the deferred first and the failed second member", left)
	}
	if err := h.deleteGroup(id, members); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if left := h.snapshotsLeft(); len(left) != 1 || !h.dataset(left[0]).DeferDestroy {
		t.Errorf("after the retry: %v, want only the deferred member", left)
	}
	if _, err := h.getGroup(id, members); code(err) != codes.NotFound {
		t.Errorf("Get: got %v, want NotFound", err)
	}
}

func TestGroupSnapshotCallsNamingSomeOfItsMembersAreRefused(t *testing.T) {
	h := newHarness(t)
	_, group := h.groupOfThree()
	id, members := group.GetGroupSnapshotId(), memberIDs(group)
	for name, named := range map[string][]string{
		"two of three":      members[:2],
		"one of three":      members[2:],
		"one named twice":   {members[0], members[1], members[1]},
		"all, one repeated": append(slices.Clone(members), members[0]),
	} {
		before := h.fake.Names()
		if _, err := h.getGroup(id, named); code(err) != codes.InvalidArgument {
			t.Errorf("Get with %s: got %v, want InvalidArgument", name, err)
		}
		if err := h.deleteGroup(id, named); code(err) != codes.InvalidArgument {
			t.Errorf("Delete with %s: got %v, want InvalidArgument", name, err)
		}
		if after := h.fake.Names(); !slices.Equal(before, after) {
			t.Errorf("Delete with %s changed %v into %v", name, before, after)
		}
	}
	if got, err := h.getGroup(id, []string{members[2], members[0], members[1]}); err != nil || !slices.Equal(memberIDs(got), []string{members[2], members[0], members[1]}) {
		t.Errorf("Get with every member in another order: %v, %v", got, err)
	}
}

// A CO that lost the reply retries after one of the volumes was deleted
// (kept, marked, by its member): the group was cut, so the answer is it.
func TestGroupSnapshotRetriedAfterAVolumeWasDeletedAnswersWithTheGroup(t *testing.T) {
	h := newHarness(t)
	volumes, group := h.groupOfThree()
	h.deleteVolume(volumes[1])
	before := h.fake.Names()
	again, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: volumes})
	if err != nil || again.GetGroupSnapshot().GetGroupSnapshotId() != group.GetGroupSnapshotId() ||
		!slices.Equal(memberIDs(again.GetGroupSnapshot()), memberIDs(group)) {
		t.Fatalf("retry: %v, %v", again, err)
	}
	_, err = h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "other", SourceVolumeIds: volumes})
	if code(err) != codes.NotFound {
		t.Errorf("a new group with the deleted volume: got %v, want NotFound", err)
	}
	if after := h.fake.Names(); !slices.Equal(before, after) {
		t.Errorf("datasets changed: %v → %v", before, after)
	}
}

// Snapshots and groups have name spaces of their own: a group "g" beside a
// snapshot "g" of one of its volumes, and the other way round.
func TestGroupAndSnapshotNamesDoNotClash(t *testing.T) {
	for _, warm := range []bool{false, true} {
		h := newHarness(t)
		if warm {
			h = warmHarness(t)
		}
		fs := h.create(createRequest("fs", 1<<30, mountCapability(""))).GetVolumeId()
		raw := h.create(createRequest("raw", 1<<30, blockCapability())).GetVolumeId()
		alone := h.snapshot("g", fs)
		response, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{fs, raw}})
		if err != nil {
			t.Fatalf("group g after snapshot g (warm %v): %v", warm, err)
		}
		if slices.Contains(memberIDs(response.GetGroupSnapshot()), alone.GetSnapshotId()) {
			t.Errorf("the snapshot %s is taken for a member", alone.GetSnapshotId())
		}
		if _, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "h", SourceVolumeId: fs}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "h", SourceVolumeIds: []string{fs, raw}}); err != nil {
			t.Errorf("group h after snapshot h: %v", err)
		}
		if _, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "k", SourceVolumeIds: []string{fs, raw}}); err != nil {
			t.Fatal(err)
		}
		if again, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "k", SourceVolumeId: fs}); err != nil || again.GetSnapshot().GetGroupSnapshotId() != "" {
			t.Errorf("snapshot k after group k: %v, %v", again, err)
		}
	}
}

// A group made before groups had a name space of their own (its members
// named as a snapshot of the group's name would be, with no member count)
// is still read, refused in part, deleted, and found again by its name.
func TestGroupSnapshotsMadeBeforeTheirNameSpaceStillWork(t *testing.T) {
	h := newHarness(t)
	a := h.create(createRequest("a", 1<<30, mountCapability(""))).GetVolumeId()
	b := h.create(createRequest("b", 1<<30, mountCapability(""))).GetVolumeId()
	datasets := []string{datasetOf(t, a), datasetOf(t, b)}
	legacy := h.server.namer.SnapshotComponent("old")
	if _, err := h.fake.SnapshotGroup(context.Background(), zfs.GroupSnapshotRequest{Datasets: datasets, Snapshot: legacy,
		Guard: h.server.owner.VolumeGuard(), Group: h.props.Group, Name: "old", Named: h.props.SnapshotName, SizeProperty: h.props.Size}); err != nil {
		t.Fatal(err)
	}
	if err := h.server.Sweep(context.Background()); err != nil { // the index learns the members
		t.Fatal(err)
	}
	again, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "old", SourceVolumeIds: []string{a, b}})
	if err != nil {
		t.Fatalf("the same call again: %v", err)
	}
	id, members := again.GetGroupSnapshot().GetGroupSnapshotId(), memberIDs(again.GetGroupSnapshot())
	if !strings.HasSuffix(id, "#"+legacy) || len(h.snapshotsLeft()) != 2 {
		t.Errorf("answered %s, snapshots %v; want the old group", id, h.snapshotsLeft())
	}
	if got, err := h.getGroup(id, members); err != nil || len(got.GetSnapshots()) != 2 {
		t.Errorf("Get: %v, %v", got, err)
	}
	if _, err := h.getGroup(id, members[:1]); code(err) != codes.InvalidArgument {
		t.Errorf("Get with one of two: got %v, want InvalidArgument", err)
	}
	if err := h.deleteGroup(id, members); err != nil || len(h.snapshotsLeft()) != 0 {
		t.Errorf("Delete: %v, left %v", err, h.snapshotsLeft())
	}
}
