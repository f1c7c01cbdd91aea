package rules

import (
	"errors"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
)

func TestIDResolution(t *testing.T) {
	cfg := Config{DriverName: "zfs.csi.dev", NodeID: "node-1", ParentDatasets: []string{"tank/csi"}}
	var foreign *ForeignNodeError
	for _, test := range []struct {
		id          string
		wantDataset string
		wantErr     func(error) bool
		anyNode     bool // VolumeDatasetOnAnyNode accepts it
	}{
		{"node-1:tank/csi/vol", "tank/csi/vol", nil, true},
		{"node-2:tank/csi/vol", "", func(err error) bool { return errors.As(err, &foreign) && foreign.NodeID == "node-2" }, true},
		{"node-1:tank/other/vol", "", func(err error) bool { return errors.Is(err, ErrNotOurs) }, false},
		{"node-1:tank/csi", "", func(err error) bool { return errors.Is(err, ErrNotOurs) }, false},
		{"node-1:tank/csi/vol/child", "", func(err error) bool { return errors.Is(err, ErrNotOurs) }, false},
		{"node-1:tank/csi/vol@snap", "", func(err error) bool { return errors.Is(err, ErrMalformedID) }, false},
		{"tank/csi/vol", "", func(err error) bool { return errors.Is(err, ErrMalformedID) }, false},
	} {
		t.Run(test.id, func(t *testing.T) {
			dataset, err := cfg.VolumeDataset(test.id)
			if test.wantErr == nil && (err != nil || dataset != test.wantDataset) {
				t.Errorf("VolumeDataset = %q, %v; want %q", dataset, err, test.wantDataset)
			}
			if test.wantErr != nil && !test.wantErr(err) {
				t.Errorf("VolumeDataset error %v is not the expected one", err)
			}
			_, err = cfg.VolumeDatasetOnAnyNode(test.id)
			if (err == nil) != test.anyNode {
				t.Errorf("VolumeDatasetOnAnyNode error %v, want accepted=%v", err, test.anyNode)
			}
		})
	}
	t.Run("snapshot IDs resolve by the same rules", func(t *testing.T) {
		if snapshot, dataset, err := cfg.SnapshotName("node-1:tank/csi/vol@s1"); err != nil || snapshot != "tank/csi/vol@s1" || dataset != "tank/csi/vol" {
			t.Errorf("got %q %q %v", snapshot, dataset, err)
		}
		if _, _, err := cfg.SnapshotName("node-2:tank/csi/vol@s1"); !errors.As(err, &foreign) {
			t.Errorf("another node's snapshot: %v", err)
		}
		if _, _, err := cfg.SnapshotName("node-1:tank/vol@s1"); !errors.Is(err, ErrNotOurs) {
			t.Errorf("a snapshot outside the parents: %v", err)
		}
	})
}

func TestOwnerClassifiesRows(t *testing.T) {
	owner := NewOwner(Config{DriverName: "zfs.csi.dev", ParentDatasets: []string{"tank/csi"}})
	props := NewUserProps("zfs.csi.dev")
	marked := map[string]string{props.Managed: "true"}
	deleted := map[string]string{props.Managed: "true", props.Deleted: "true"}
	snapshot := map[string]string{props.SnapshotName: "snap-1"}
	internal := map[string]string{props.Internal: "true"}
	type verdict struct{ live, deleted, liveSnapshot, internal bool }
	for _, test := range []struct {
		name string
		row  zfs.Dataset
		want verdict
	}{
		{"a marked dataset under a parent is a live volume", zfs.Dataset{Name: "tank/csi/a", Type: zfs.Filesystem, User: marked}, verdict{live: true}},
		{"a marked zvol under a parent is a live volume", zfs.Dataset{Name: "tank/csi/a", Type: zfs.Volume, User: marked}, verdict{live: true}},
		{"a deleted mark of any value hides it", zfs.Dataset{Name: "tank/csi/a", Type: zfs.Volume, User: map[string]string{props.Managed: "true", props.Deleted: "yes"}}, verdict{deleted: true}},
		{"a volume marked deleted", zfs.Dataset{Name: "tank/csi/a", Type: zfs.Filesystem, User: deleted}, verdict{deleted: true}},
		{"an unmarked dataset is not ours", zfs.Dataset{Name: "tank/csi/a", Type: zfs.Filesystem}, verdict{}},
		{"a managed mark other than true is not ours", zfs.Dataset{Name: "tank/csi/a", Type: zfs.Filesystem, User: map[string]string{props.Managed: "yes"}}, verdict{}},
		{"a marked dataset outside the parents is not ours", zfs.Dataset{Name: "tank/other/a", Type: zfs.Filesystem, User: marked}, verdict{}},
		{"a marked grandchild is not ours", zfs.Dataset{Name: "tank/csi/a/b", Type: zfs.Filesystem, User: marked}, verdict{}},
		{"a CSI snapshot", zfs.Dataset{Name: "tank/csi/a@s", Type: zfs.Snapshot, User: snapshot}, verdict{liveSnapshot: true}},
		{"a CSI snapshot deferred for destruction is gone", zfs.Dataset{Name: "tank/csi/a@s", Type: zfs.Snapshot, User: snapshot, DeferDestroy: true}, verdict{}},
		{"an internal snapshot is no CSI snapshot", zfs.Dataset{Name: "tank/csi/a@s", Type: zfs.Snapshot, User: internal}, verdict{internal: true}},
		{"an operator's snapshot is neither", zfs.Dataset{Name: "tank/csi/a@s", Type: zfs.Snapshot}, verdict{}},
		{"a snapshot of a dataset outside the parents is neither", zfs.Dataset{Name: "tank/x@s", Type: zfs.Snapshot, User: snapshot}, verdict{}},
	} {
		t.Run(test.name, func(t *testing.T) {
			got := verdict{owner.LiveVolume(test.row), owner.DeletedVolume(test.row), owner.LiveSnapshot(test.row), owner.InternalSnapshot(test.row)}
			if got != test.want {
				t.Errorf("got %+v, want %+v", got, test.want)
			}
		})
	}
	t.Run("kind and filesystem follow the row", func(t *testing.T) {
		for _, test := range []struct {
			row          zfs.Dataset
			kind, fsType string
		}{
			{zfs.Dataset{Type: zfs.Filesystem}, KindDataset, "zfs"},
			{zfs.Dataset{Type: zfs.Volume, User: map[string]string{props.FSType: "xfs"}}, KindZvol, "xfs"},
			{zfs.Dataset{Type: zfs.Volume}, KindZvol, ""},
		} {
			kind, fsType := owner.Kind(test.row)
			context := owner.VolumeContext(test.row)
			if kind != test.kind || fsType != test.fsType || context[ContextKind] != kind || context[ContextFSType] != fsType {
				t.Errorf("%v: got %s %q %v", test.row.Type, kind, fsType, context)
			}
		}
	})
}
