package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// groupOfThree makes a dataset, an ext4 zvol and a raw block zvol and
// snapshots them as the group "g".
func (h *harness) groupOfThree() ([]string, *csi.VolumeGroupSnapshot) {
	h.t.Helper()
	var ids []string
	for _, volume := range []*csi.CreateVolumeRequest{
		createRequest("fs", 1<<30, mountCapability("")),
		createRequest("ext4", 1<<30, mountCapability("ext4")),
		createRequest("raw", 2<<30, blockCapability()),
	} {
		ids = append(ids, h.create(volume).GetVolumeId())
	}
	h.fake.ResetCalls()
	response, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(),
		&csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: ids})
	if err != nil {
		h.t.Fatal(err)
	}
	return ids, response.GetGroupSnapshot()
}

func memberIDs(group *csi.VolumeGroupSnapshot) []string {
	var ids []string
	for _, member := range group.GetSnapshots() {
		ids = append(ids, member.GetSnapshotId())
	}
	return ids
}

func TestGroupSnapshotIsOneCommandAndItsMembersAreOrdinarySnapshots(t *testing.T) {
	h := newHarness(t)
	volumes, group := h.groupOfThree()
	if calls := h.fake.Calls(); h.fake.TotalCalls() != 1 || calls["SnapshotGroup"] != 1 {
		t.Errorf("calls %v, want one SnapshotGroup", calls)
	}
	if !group.GetReadyToUse() || group.GetCreationTime() == nil || len(group.GetSnapshots()) != 3 ||
		!strings.HasPrefix(group.GetGroupSnapshotId(), testNode+":tank#") {
		t.Fatalf("group %v", group)
	}
	for i, member := range group.GetSnapshots() {
		if member.GetSourceVolumeId() != volumes[i] || member.GetGroupSnapshotId() != group.GetGroupSnapshotId() || !member.GetReadyToUse() {
			t.Errorf("member %d: %v", i, member)
		}
	}
	if size := group.GetSnapshots()[2].GetSizeBytes(); size != 2<<30 {
		t.Errorf("the raw zvol's member restores to %d bytes, want %d", size, 2<<30)
	}
	t.Run("they are listed and read with their group", func(t *testing.T) {
		listed, err := h.server.ListSnapshots(context.Background(), &csi.ListSnapshotsRequest{SourceVolumeId: volumes[0]})
		if err != nil || len(listed.GetEntries()) != 1 || listed.GetEntries()[0].GetSnapshot().GetGroupSnapshotId() != group.GetGroupSnapshotId() {
			t.Errorf("ListSnapshots: %v, %v", listed, err)
		}
		got, err := h.server.GetSnapshot(context.Background(), &csi.GetSnapshotRequest{SnapshotId: memberIDs(group)[1]})
		if err != nil || got.GetSnapshot().GetGroupSnapshotId() != group.GetGroupSnapshotId() {
			t.Errorf("GetSnapshot: %v, %v", got, err)
		}
	})
	t.Run("a volume is made from a member", func(t *testing.T) {
		restored := h.create(fromSnapshot(createRequest("restored", 1<<30, mountCapability("ext4")), memberIDs(group)[1]))
		if restored.GetContentSource().GetSnapshot().GetSnapshotId() != memberIDs(group)[1] {
			t.Errorf("restored %v", restored)
		}
	})
	t.Run("a member is not deleted alone", func(t *testing.T) {
		_, err := h.server.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: memberIDs(group)[0]})
		if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), group.GetGroupSnapshotId()) {
			t.Errorf("got %v, want InvalidArgument naming the group", err)
		}
		if _, err := h.server.GetSnapshot(context.Background(), &csi.GetSnapshotRequest{SnapshotId: memberIDs(group)[0]}); err != nil {
			t.Errorf("the member went: %v", err)
		}
	})
}

func TestGroupSnapshotIsIdempotentByName(t *testing.T) {
	h := newHarness(t)
	volumes, group := h.groupOfThree()
	again, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: volumes})
	if err != nil || again.GetGroupSnapshot().GetGroupSnapshotId() != group.GetGroupSnapshotId() ||
		!slices.Equal(memberIDs(again.GetGroupSnapshot()), memberIDs(group)) {
		t.Fatalf("again: %v, %v", again, err)
	}
	for _, other := range [][]string{volumes[:2], {volumes[0], volumes[2]}, append(slices.Clone(volumes), h.create(createRequest("fourth", 1<<30, mountCapability(""))).GetVolumeId())} {
		before := h.fake.Names()
		_, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: other})
		if code(err) != codes.AlreadyExists {
			t.Errorf("%d volumes: got %v, want AlreadyExists", len(other), err)
		}
		if after := h.fake.Names(); !slices.Equal(before, after) {
			t.Errorf("%d volumes: datasets changed: %v → %v", len(other), before, after)
		}
	}
}

func TestGroupSnapshotRefusals(t *testing.T) {
	h := newHarness(t)
	live := h.create(createRequest("live", 1<<30, mountCapability(""))).GetVolumeId()
	held := h.create(createRequest("held", 1<<30, mountCapability(""))).GetVolumeId()
	h.snapshot("keep", held)
	h.deleteVolume(held) // marked deleted: no live volume
	for _, test := range []struct {
		name    string
		sources []string
		want    codes.Code
	}{
		{"no source", nil, codes.InvalidArgument},
		{"a volume twice", []string{live, live}, codes.InvalidArgument},
		{"a volume marked deleted", []string{live, held}, codes.NotFound},
		{"an operator's dataset", []string{live, testNode + ":tank/csi/keep"}, codes.NotFound},
		{"volumes of two nodes (the spec: FAILED_PRECONDITION)", []string{live, "node-b:tank/csi/v"}, codes.FailedPrecondition},
		{"volumes of another node only, never forwarded here", []string{"node-b:tank/csi/v", "node-b:tank/csi/w"}, codes.NotFound},
		{"a malformed ID", []string{live, "garbage"}, codes.NotFound},
	} {
		t.Run(test.name, func(t *testing.T) {
			before := h.fake.Names()
			_, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: test.sources})
			if code(err) != test.want {
				t.Errorf("got %v, want %s", err, test.want)
			}
			if after := h.fake.Names(); !slices.Equal(before, after) {
				t.Errorf("datasets changed: %v → %v", before, after)
			}
		})
	}
	t.Run("volumes of two pools cannot be snapshotted at one instant", func(t *testing.T) {
		fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40, "fast": 1 << 40})
		for _, parent := range []string{"tank/csi", "fast/csi"} {
			if err := fake.Create(context.Background(), parent, zfs.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		server, err := New(rules.Config{DriverName: "zfs.csi.dev", NodeID: testNode, ParentDatasets: []string{"tank/csi", "fast/csi"}}, fake, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		two := &harness{t: t, fake: fake, server: server, props: h.props}
		a := two.create(createRequest("a", 1<<30, mountCapability("")))
		breq := createRequest("b", 1<<30, mountCapability(""))
		breq.Parameters = map[string]string{ParamParentDataset: "fast/csi"}
		b := two.create(breq)
		_, err = server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g",
			SourceVolumeIds: []string{a.GetVolumeId(), b.GetVolumeId()}})
		if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "different pools") {
			t.Errorf("got %v, want FailedPrecondition naming the pools", err)
		}
	})
}

func TestGroupSnapshotGetAndDelete(t *testing.T) {
	h := newHarness(t)
	_, group := h.groupOfThree()
	groups := h.server.Group()
	id, members := group.GetGroupSnapshotId(), memberIDs(group)
	for _, named := range [][]string{members, nil} {
		got, err := groups.GetVolumeGroupSnapshot(context.Background(), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: named})
		if err != nil || !slices.Equal(slices.Sorted(slices.Values(memberIDs(got.GetGroupSnapshot()))), slices.Sorted(slices.Values(members))) {
			t.Errorf("Get with %d IDs: %v, %v", len(named), got, err)
		}
	}
	other := h.snapshot("alone", group.GetSnapshots()[0].GetSourceVolumeId())
	for _, mismatch := range [][]string{{members[0], other.GetSnapshotId()}, {members[0], "garbage"}} {
		if _, err := groups.GetVolumeGroupSnapshot(context.Background(), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: mismatch}); code(err) != codes.InvalidArgument {
			t.Errorf("Get with %v: got %v, want InvalidArgument", mismatch, err)
		}
		if _, err := groups.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: mismatch}); code(err) != codes.InvalidArgument {
			t.Errorf("Delete with %v: got %v, want InvalidArgument", mismatch, err)
		}
	}
	if _, err := groups.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: members}); err != nil {
		t.Fatal(err)
	}
	for _, name := range h.fake.Names() {
		if strings.Contains(name, "@") && !strings.HasSuffix(name, strings.SplitN(other.GetSnapshotId(), "@", 2)[1]) {
			t.Errorf("%s outlived its group", name)
		}
	}
	if _, err := groups.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: members}); err != nil {
		t.Errorf("deleting again: %v", err)
	}
	if _, err := groups.GetVolumeGroupSnapshot(context.Background(), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id, SnapshotIds: members}); code(err) != codes.NotFound {
		t.Errorf("Get after delete: got %v, want NotFound", err)
	}
	if _, err := groups.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: "node-b:tank#x"}); code(err) != codes.FailedPrecondition {
		t.Errorf("another node's group: got %v, want FailedPrecondition", err)
	}
}

func TestGroupSnapshotsOnZFSBefore22AreNotOfferedAndRefused(t *testing.T) {
	h := newHarness(t)
	a := h.create(createRequest("a", 1<<30, mountCapability(""))).GetVolumeId()
	h.fake.PlayBefore22()
	capabilities, err := h.server.Group().GroupControllerGetCapabilities(context.Background(), &csi.GroupControllerGetCapabilitiesRequest{})
	if err != nil || len(capabilities.GetCapabilities()) != 0 {
		t.Errorf("capabilities where programs cannot set properties: %v, %v; want none", capabilities, err)
	}
	before := h.fake.Names()
	_, err = h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a}})
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "set_prop") {
		t.Errorf("got %v, want FailedPrecondition naming what is missing", err)
	}
	if after := h.fake.Names(); !slices.Equal(before, after) {
		t.Errorf("datasets changed: %v → %v", before, after)
	}
	h.fake.ResetCalls()
	h.server.Group().GroupControllerGetCapabilities(context.Background(), &csi.GroupControllerGetCapabilitiesRequest{})
	if calls := h.fake.TotalCalls(); calls != 0 {
		t.Errorf("asked ZFS again: %v", h.fake.Calls())
	}
}

// Once the snapshot index is complete, the group program reads only the
// snapshots it names, not every volume's: a group's members must be in it
// from the moment they are made, or a group of the same name on a subset of
// the volumes would pass for the whole one.
func TestGroupSnapshotNamesAreIndexed(t *testing.T) {
	h := newHarness(t)
	unrelated := h.create(createRequest("unrelated", 1<<30, mountCapability(""))).GetVolumeId()
	if _, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "first", SourceVolumeId: unrelated}); err != nil {
		t.Fatal(err) // the first CreateSnapshot lists: the index is complete after it
	}
	if _, ready := h.server.snapshots.lookup("first"); !ready {
		t.Fatal("the index is not complete after the first CreateSnapshot")
	}
	volumes, _ := h.groupOfThree()
	for i, subset := range [][]string{volumes[:2], volumes[1:]} {
		if i == 1 { // a later listing (the reaper's) refreshes the index: it keeps the members
			if _, err := h.server.listParents(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		_, err := h.server.Group().CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: subset})
		if code(err) != codes.AlreadyExists {
			t.Errorf("group g again on %v: got %v, want AlreadyExists", subset, err)
		}
	}
}
