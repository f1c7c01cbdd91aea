package main

import (
	"io"
	"strconv"
	"time"
)

func init() {
	subcommands["snapshots"] = struct {
		summary string
		run     func(args []string, stdout, stderr io.Writer) error
	}{
		summary: "list the snapshots the driver made on this host (read from ZFS)",
		run: func(args []string, stdout, stderr io.Writer) error {
			op, err := parseOperator("snapshots", args, stdout, stderr, nil)
			if err != nil {
				return err
			}
			return op.snapshots()
		},
	}
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
	t := newTable(op.stdout, "SNAPSHOT ID", "NAME", "SOURCE VOLUME", "SIZE", "CREATED", "CLONES", "STATE")
	for _, snapshot := range inv.Snapshots {
		t.row(snapshot.ID, snapshot.CSIName, snapshot.SourceVolumeID, humanBytes(snapshot.Size),
			snapshot.Created.Local().Format(time.DateTime), strconv.Itoa(len(snapshot.Clones)), snapshot.State)
	}
	return t.flush()
}
