package rules

import "strings"

// UserProps names the ZFS user properties the driver keeps on what it makes
// (ARCHITECTURE.md decision 1: ZFS is the only state). All share the prefix
// "<driver name>:", so `zfs get all` shows them together.
type UserProps struct {
	prefix string

	Managed      string // "true" on every volume the driver made
	CSIName      string // the CSI volume name as the CO gave it
	ParamsHash   string // hash of the creation parameters, for idempotency checks
	FSType       string // filesystem a zvol is formatted with; unset for raw block and datasets
	Source       string // content source ID a volume was made from
	Deleted      string // "true" once DeleteVolume ran while dependents remained
	SnapshotName string // the CSI snapshot name, only on snapshots made by CreateSnapshot
	Internal     string // "true" on snapshots made only to clone a volume from a volume
	Size         string // on snapshots: the volume's size when it was taken, the least a restore needs
	Group        string // on a group snapshot's members: the group's CSI name
	GroupMembers string // on a group snapshot's members: how many the group has
	// Snapshotting is on a volume only while a snapshot program runs (the
	// snapshot's CSI name, or the group's): a snapshot that an interrupted
	// run left without its properties is known by it (zfs.SnapshotRequest.Pending).
	Snapshotting string
	// Pulled is set on a volume pulled from another node once its last
	// round has arrived (controller/remote.go): a retry then finishes it
	// instead of asking the source for another round.
	Pulled string
	// PullFor is on a pull's round snapshots on the source's node: the node
	// and the dataset that pull makes ("node:dataset"), so that the rounds
	// of one pull, and only those, go when it ends.
	PullFor string
	// Adopted is on a volume an operator adopted (retain or own), and
	// AdoptedMountpoint its mountpoint before, which release gives back.
	Adopted           string
	AdoptedMountpoint string
	PVCName           string
	PVCNamespace      string
	PVName            string
}

// NewUserProps derives the property names from the driver name.
func NewUserProps(driverName string) UserProps {
	p := strings.ToLower(driverName) + ":"
	return UserProps{
		prefix: p, Managed: p + "managed", CSIName: p + "csi-name", ParamsHash: p + "params", FSType: p + "fstype",
		Source: p + "source", Deleted: p + "deleted", SnapshotName: p + "snapshot-name", Internal: p + "internal", Size: p + "size",
		Group: p + "group", GroupMembers: p + "group-members", Snapshotting: p + "snapshotting", Pulled: p + "pulled",
		PullFor: p + "pull-for", Adopted: p + "adopted", AdoptedMountpoint: p + "adopted-mountpoint",
		PVCName: p + "pvc-name", PVCNamespace: p + "pvc-namespace", PVName: p + "pv-name",
	}
}

// All lists every property, for reads that need them.
func (u UserProps) All() []string {
	return []string{u.Managed, u.CSIName, u.ParamsHash, u.FSType, u.Source, u.Deleted, u.SnapshotName,
		u.Internal, u.Size, u.Group, u.PullFor, u.Adopted, u.AdoptedMountpoint, u.PVCName, u.PVCNamespace, u.PVName}
}

// Owns reports whether a property name is in the driver's namespace.
func (u UserProps) Owns(property string) bool { return strings.HasPrefix(property, u.prefix) }

// Volume-context keys: what the controller tells the node service about a
// volume, so that staging needs no extra zfs command to learn it.
const (
	ContextKind   = "kind"   // KindDataset or KindZvol
	ContextFSType = "fsType" // "zfs" for datasets; ext4, xfs, btrfs, or "" (raw block) for zvols
	KindDataset   = "dataset"
	KindZvol      = "zvol"
)
