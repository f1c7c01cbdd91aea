package rules

import (
	"errors"
	"fmt"
	"strings"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// The ownership guard (ARCHITECTURE.md decision 2) in one place: which IDs name
// something this node may touch, and which rows of a ZFS listing are live
// volumes, deleted volumes or CSI snapshots of this driver. The controller,
// the node service and the operator tools all ask here; none keeps a copy.

// ErrNotOurs means an ID parses but names a dataset outside the parent
// datasets: nothing this driver may touch.
var ErrNotOurs = errors.New("its dataset is not under a parent dataset of this driver")

// ForeignNodeError is an ID issued by the driver on another node.
type ForeignNodeError struct{ NodeID, ThisNode string }

func (e *ForeignNodeError) Error() string {
	return fmt.Sprintf("it lives on node %q, this is node %q", e.NodeID, e.ThisNode)
}

// VolumeDataset resolves a volume ID of this node to its dataset. The error
// says why it cannot: ErrMalformedID, *ForeignNodeError or ErrNotOurs.
func (c Config) VolumeDataset(volumeID string) (string, error) {
	nodeID, dataset, err := ParseVolumeID(volumeID)
	if err != nil {
		return "", err
	}
	if nodeID != c.NodeID {
		return "", &ForeignNodeError{NodeID: nodeID, ThisNode: c.NodeID}
	}
	return c.ownedVolume(dataset)
}

// VolumeDatasetOnAnyNode is VolumeDataset for teardown, which goes by what
// is mounted whatever node the ID names: a volume staged before the node's
// ID changed carries the old one. The dataset must still be ours.
func (c Config) VolumeDatasetOnAnyNode(volumeID string) (string, error) {
	_, dataset, err := ParseVolumeID(volumeID)
	if err != nil {
		return "", err
	}
	return c.ownedVolume(dataset)
}

func (c Config) ownedVolume(dataset string) (string, error) {
	if !c.OwnedDataset(dataset) {
		return "", ErrNotOurs
	}
	return dataset, nil
}

// SnapshotName resolves a snapshot ID of this node to the ZFS snapshot
// ("dataset@name") and its dataset, with VolumeDataset's errors.
func (c Config) SnapshotName(snapshotID string) (snapshot, dataset string, err error) {
	nodeID, dataset, snapshot, err := ParseSnapshotID(snapshotID)
	switch {
	case err != nil:
		return "", "", err
	case nodeID != c.NodeID:
		return "", "", &ForeignNodeError{NodeID: nodeID, ThisNode: c.NodeID}
	case !c.OwnedDataset(dataset):
		return "", "", ErrNotOurs
	}
	return snapshot, dataset, nil
}

// GroupSnapshot resolves a group snapshot ID of this node to its pool and
// its members' snapshot name, with VolumeDataset's errors.
func (c Config) GroupSnapshot(groupSnapshotID string) (pool, snapshot string, err error) {
	nodeID, pool, snapshot, err := ParseGroupSnapshotID(groupSnapshotID)
	if err != nil {
		return "", "", err
	}
	if nodeID != c.NodeID {
		return "", "", &ForeignNodeError{NodeID: nodeID, ThisNode: c.NodeID}
	}
	return pool, snapshot, nil
}

// Owner classifies what ZFS lists by the driver's marks.
type Owner struct {
	cfg   Config
	props UserProps
}

// NewOwner returns the classification for cfg's driver name and parents.
func NewOwner(cfg Config) Owner { return Owner{cfg: cfg, props: NewUserProps(cfg.DriverName)} }

// Marked reports whether a filesystem or volume carries the managed mark:
// the driver made it, live or deleted.
func (o Owner) Marked(row zfs.Dataset) bool {
	managed := row.User[o.props.Managed]
	return row.Type != zfs.Snapshot && o.cfg.OwnedDataset(row.Name) && (managed == "true" || managed == ManagedRetained)
}

// ManagedRetained is the managed mark of data an operator adopted to be
// served and kept: the driver stages, publishes and reports it, but never
// destroys, snapshots, clones or grows it. Every guarded change asks for the
// mark "true" (VolumeGuard), so ZFS itself refuses those on it.
const ManagedRetained = "retain"

// Retained reports whether a row is a live volume adopted in retain mode.
func (o Owner) Retained(row zfs.Dataset) bool {
	return o.LiveVolume(row) && row.User[o.props.Managed] == ManagedRetained
}

// LiveVolume reports whether a row is a volume this driver made and has not
// deleted.
func (o Owner) LiveVolume(row zfs.Dataset) bool {
	return o.Marked(row) && row.User[o.props.Deleted] == ""
}

// DeletedVolume reports whether a row is a volume of ours that DeleteVolume
// marked while dependents remained: hidden, waiting for the reaper.
func (o Owner) DeletedVolume(row zfs.Dataset) bool {
	return o.Marked(row) && row.User[o.props.Deleted] != ""
}

// VolumeGuard is LiveVolume's rule as ZFS checks it in a guarded change:
// the managed mark, and no deleted mark.
func (o Owner) VolumeGuard() zfs.Guard {
	return zfs.Guard{Owned: o.props.Managed, Excluded: o.props.Deleted}
}

// LiveSnapshot reports whether a row is a CSI snapshot this driver made and
// has not deleted. The snapshot-name property is set on snapshots only,
// never on datasets, so it cannot be inherited from the dataset.
func (o Owner) LiveSnapshot(row zfs.Dataset) bool {
	return o.snapshotOfOurs(row) && !row.DeferDestroy && row.User[o.props.SnapshotName] != "" && row.User[o.props.Internal] == ""
}

// InternalSnapshot reports whether a row is a snapshot the driver made only
// to clone a volume from a volume.
func (o Owner) InternalSnapshot(row zfs.Dataset) bool {
	return o.snapshotOfOurs(row) && row.User[o.props.Internal] == "true"
}

func (o Owner) snapshotOfOurs(row zfs.Dataset) bool {
	dataset, _, _ := strings.Cut(row.Name, "@")
	return row.Type == zfs.Snapshot && o.cfg.OwnedDataset(dataset)
}

// Kind says what a volume is, in the terms of its volume_context (ARCHITECTURE.md
// decision 4): a dataset with filesystem "zfs", or a zvol with the
// filesystem it is formatted with ("" for raw block).
func (o Owner) Kind(row zfs.Dataset) (kind, fsType string) {
	if row.Type == zfs.Volume {
		return KindZvol, row.User[o.props.FSType]
	}
	return KindDataset, "zfs"
}

// VolumeContext is what the controller tells the node service about a
// volume, so that staging needs no zfs command to learn it.
func (o Owner) VolumeContext(row zfs.Dataset) map[string]string {
	kind, fsType := o.Kind(row)
	return map[string]string{ContextKind: kind, ContextFSType: fsType}
}
