package main

import (
	"io"
	"strings"
)

func init() {
	subcommands["volumes"] = struct {
		summary string
		run     func(args []string, stdout, stderr io.Writer) error
	}{
		summary: "list the driver's volumes on this host, with where they are staged and published (read from ZFS and the mount table)",
		run: func(args []string, stdout, stderr io.Writer) error {
			op, err := parseOperator("volumes", args, stdout, stderr, nil)
			if err != nil {
				return err
			}
			return op.volumes()
		},
	}
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
		t.row(volume.ID, volume.CSIName, kindName(volume), humanBytes(volume.Capacity), humanBytes(volume.Referenced), pvc,
			strings.Join(volume.Staged, ","), strings.Join(volume.Published, ","), volume.State)
	}
	return t.flush()
}
