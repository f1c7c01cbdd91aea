package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// specNames are names the spec allows that `zfs list -H` could not carry as
// they are, or that look like how the driver stores those.
var specNames = []struct{ what, name string }{
	{"128 bytes of multi-byte characters", strings.Repeat("ボ", 42) + "ü"},
	{"a tab", "a\tb"},
	{"a line feed", "a\nb"},
	{"a carriage return", "a\rb"},
	{"only a tab", "\t"},
	{"a dash, what zfs prints for an unset property", "-"},
	{"leading and trailing spaces", "  spaced  "},
	{"a quoted string, as tabs are stored", `"a\tb"`},
	{"a plain name, stored as older versions stored it", "pvc-0b7c4f4e"},
}

// Every name the spec allows makes a volume and a snapshot; a retry of
// either, also by a restarted server that remembers nothing, is recognised
// as the same (decided from what ZFS lists); the same snapshot name from
// another volume is ALREADY_EXISTS, again and again and after the restart
// (whose first listing fills the snapshot index); and the listings, which
// read every name property, keep working. snapshotPaths covers each way
// CreateSnapshot runs: listing first, the guarded program alone, and the
// list-then-snapshot of a ZFS without zfs.sync.set_prop.
func TestEveryNameTheSpecAllowsMakesVolumesAndSnapshotsThatRetriesFind(t *testing.T) {
	for path, h := range snapshotPaths(t) {
		t.Run(path, func(t *testing.T) {
			other := h.create(createRequest("other", 1<<30, mountCapability("")))
			var volumeIDs, snapshotIDs []string
			for _, test := range specNames {
				volume := h.create(createRequest(test.name, 1<<30, mountCapability("")))
				if again := h.create(createRequest(test.name, 1<<30, mountCapability(""))); again.GetVolumeId() != volume.GetVolumeId() {
					t.Errorf("%s: CreateVolume made %s, its retry %s", test.what, volume.GetVolumeId(), again.GetVolumeId())
				}
				snapshot := h.snapshot(test.name, volume.GetVolumeId())
				if again := h.snapshot(test.name, volume.GetVolumeId()); again.GetSnapshotId() != snapshot.GetSnapshotId() {
					t.Errorf("%s: CreateSnapshot made %s, its retry %s", test.what, snapshot.GetSnapshotId(), again.GetSnapshotId())
				}
				for attempt := 1; attempt <= 2; attempt++ {
					_, err := h.server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: test.name, SourceVolumeId: other.GetVolumeId()})
					if code(err) != codes.AlreadyExists {
						t.Errorf("%s: CreateSnapshot from another volume, attempt %d: %v, want ALREADY_EXISTS", test.what, attempt, err)
					}
				}
				if slices.Contains(volumeIDs, volume.GetVolumeId()) || slices.Contains(snapshotIDs, snapshot.GetSnapshotId()) {
					t.Errorf("%s: %s or %s already belongs to another name", test.what, volume.GetVolumeId(), snapshot.GetSnapshotId())
				}
				volumeIDs = append(volumeIDs, volume.GetVolumeId())
				snapshotIDs = append(snapshotIDs, snapshot.GetSnapshotId())
			}
			restarted := *h
			server, err := New(h.server.cfg, h.fake, h.server.log)
			if err != nil {
				t.Fatal(err)
			}
			restarted.server = server
			for i, test := range specNames {
				_, err := server.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: test.name, SourceVolumeId: other.GetVolumeId()})
				if code(err) != codes.AlreadyExists {
					t.Errorf("%s: CreateSnapshot from another volume after a restart: %v, want ALREADY_EXISTS", test.what, err)
				}
				if again := restarted.snapshot(test.name, volumeIDs[i]); again.GetSnapshotId() != snapshotIDs[i] {
					t.Errorf("%s: CreateSnapshot made %s, its retry after a restart %s", test.what, snapshotIDs[i], again.GetSnapshotId())
				}
			}
			listedVolumes, listedSnapshots := h.listVolumeIDs(), h.listSnapshotIDs(&csi.ListSnapshotsRequest{})
			for i, test := range specNames {
				if !slices.Contains(listedVolumes, volumeIDs[i]) || !slices.Contains(listedSnapshots, snapshotIDs[i]) {
					t.Errorf("%s: ListVolumes %v, ListSnapshots %v; want %s and %s among them",
						test.what, listedVolumes, listedSnapshots, volumeIDs[i], snapshotIDs[i])
				}
			}
		})
	}
}

// A name stored as it is (by a version before the encoding, or because it
// needs none) is what an operator reads with `zfs list -o
// name,zfs.csi.dev:csi-name`, and a retry after an upgrade finds it.
func TestAPlainNameIsStoredAsItIs(t *testing.T) {
	h := newHarness(t)
	volume := h.create(createRequest("pvc-0b7c4f4e", 1<<30, mountCapability("")))
	if got := h.dataset(datasetOf(t, volume.GetVolumeId())).User[h.props.CSIName]; got != "pvc-0b7c4f4e" {
		t.Errorf("%s is %q", h.props.CSIName, got)
	}
	snapshot := h.snapshot("snap-1", volume.GetVolumeId())
	name := strings.TrimPrefix(snapshot.GetSnapshotId(), testNode+":")
	if got := h.dataset(name).User[h.props.SnapshotName]; got != "snap-1" {
		t.Errorf("%s is %q", h.props.SnapshotName, got)
	}
}

// A name is one CO object: under a second parent it is ALREADY_EXISTS, found
// by the name read back from the first.
func TestANameTheSpecAllowsIsFoundUnderAnotherParent(t *testing.T) {
	h := newHarness(t, "tank/csi", "tank/other")
	for _, test := range specNames {
		req := createRequest(test.name, 1<<30, mountCapability(""))
		req.Parameters = map[string]string{ParamParentDataset: "tank/other"}
		h.create(req)
		_, err := h.server.CreateVolume(context.Background(), createRequest(test.name, 1<<30, mountCapability("")))
		if code(err) != codes.AlreadyExists {
			t.Errorf("%s: CreateVolume under the other parent: %v, want ALREADY_EXISTS", test.what, err)
		}
	}
}

// Group snapshots take every name the spec allows too: made, found again by
// a retry (also by a restarted server, whose first listing fills the
// index), read and deleted through their ID.
func TestEveryNameTheSpecAllowsMakesAGroupSnapshotThatRetriesFind(t *testing.T) {
	for path, h := range map[string]*harness{"cold": newHarness(t), "warm": warmHarness(t)} {
		t.Run(path, func(t *testing.T) {
			for i, test := range specNames {
				volumes := []string{
					h.create(createRequest(fmt.Sprintf("a%d", i), 1<<30, mountCapability(""))).GetVolumeId(),
					h.create(createRequest(fmt.Sprintf("b%d", i), 1<<30, mountCapability(""))).GetVolumeId(),
				}
				create := func(server *Server) (*csi.VolumeGroupSnapshot, error) {
					response, err := server.Group().CreateVolumeGroupSnapshot(context.Background(),
						&csi.CreateVolumeGroupSnapshotRequest{Name: test.name, SourceVolumeIds: volumes})
					return response.GetGroupSnapshot(), err
				}
				group, err := create(h.server)
				if err != nil {
					t.Fatalf("%s: CreateVolumeGroupSnapshot: %v", test.what, err)
				}
				restarted, err := New(h.server.cfg, h.fake, h.server.log)
				if err != nil {
					t.Fatal(err)
				}
				for name, server := range map[string]*Server{"a retry": h.server, "a restarted server's retry": restarted} {
					if again, err := create(server); err != nil || again.GetGroupSnapshotId() != group.GetGroupSnapshotId() {
						t.Errorf("%s: %s made %v, %v; want %s", test.what, name, again.GetGroupSnapshotId(), err, group.GetGroupSnapshotId())
					}
				}
				if _, err := h.server.Group().DeleteVolumeGroupSnapshot(context.Background(),
					&csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: group.GetGroupSnapshotId()}); err != nil {
					t.Errorf("%s: DeleteVolumeGroupSnapshot: %v", test.what, err)
				}
			}
		})
	}
}
