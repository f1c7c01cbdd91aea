package report

import (
	"io"
	"strings"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Volumes is `zfs-csi volumes`.
func Volumes(args []string, stdout, stderr io.Writer) error {
	return runReport("volumes", args, stdout, stderr, (*operator).volumes)
}

// volumes lists every volume marked managed, live or deleted.
func (op *operator) volumes() error {
	inv, err := op.read()
	if err != nil {
		return err
	}
	if op.json {
		return op.writeJSON(map[string]any{"volumes": inv.Volumes})
	}
	t := newTable(op.stdout, "VOLUME ID", "NAME", "KIND", "SIZE", "USED", "PVC", "STAGED", "PUBLISHED", "STATE")
	for _, volume := range inv.Volumes {
		pvc := ""
		if volume.PVCName != "" {
			pvc = volume.PVCNamespace + "/" + volume.PVCName
		}
		t.row(volume.ID, volume.CSIName, kindName(volume), zfs.FormatSize(volume.Capacity), zfs.FormatSize(volume.Referenced), pvc,
			strings.Join(volume.Staged, ","), strings.Join(volume.Published, ","), volume.State)
	}
	return t.flush()
}
