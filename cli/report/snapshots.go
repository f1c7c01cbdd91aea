package report

import (
	"io"
	"strconv"
	"time"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Snapshots is `zfs-csi snapshots`.
func Snapshots(args []string, stdout, stderr io.Writer) error {
	return runReport("snapshots", args, stdout, stderr, (*operator).snapshots)
}

// snapshots lists the CSI snapshots, those deleted but held by clones, and
// the internal ones made to clone a volume from a volume.
func (op *operator) snapshots() error {
	inv, err := op.read()
	if err != nil {
		return err
	}
	if op.json {
		return op.writeJSON(map[string]any{"snapshots": inv.Snapshots})
	}
	t := newTable(op.stdout, "SNAPSHOT ID", "NAME", "SOURCE VOLUME", "SIZE", "CREATED", "CLONES", "STATE", "GROUP")
	for _, snapshot := range inv.Snapshots {
		t.row(snapshot.ID, snapshot.CSIName, snapshot.SourceVolumeID, zfs.FormatSize(snapshot.Size),
			snapshot.Created.Local().Format(time.DateTime), strconv.Itoa(len(snapshot.Clones)), snapshot.State,
			snapshot.GroupSnapshotID)
	}
	return t.flush()
}
