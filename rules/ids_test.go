package rules

import (
	"errors"
	"strings"
	"testing"
)

func TestParseIDs(t *testing.T) {
	tests := []struct {
		id                    string
		volume, snapshot      bool
		wantNode, wantDataset string
	}{
		{id: "node-a:tank/csi/v", volume: true, wantNode: "node-a", wantDataset: "tank/csi/v"},
		{id: "node-a:tank/csi/v:2", volume: true, wantNode: "node-a", wantDataset: "tank/csi/v:2"},
		{id: "node-a:tank/csi/v@s", snapshot: true, wantNode: "node-a", wantDataset: "tank/csi/v"},
		{id: "tank/csi/v"},
		{id: ":tank/csi/v"},
		{id: "node-a:"},
		{id: "node-a:tank//v"},
		{id: "node-a:tank/../v"},
		{id: "node-a:/tank/v"},
		{id: "node-a:tank/v@"},
		{id: "node-a:tank/v@a@b"},
		{id: "node-a:tank/v w"},
		{id: "node-a:" + strings.Repeat("a", 130)},
	}
	for _, test := range tests {
		t.Run(test.id, func(t *testing.T) {
			node, dataset, err := ParseVolumeID(test.id)
			if (err == nil) != test.volume || (err == nil && (node != test.wantNode || dataset != test.wantDataset)) {
				t.Errorf("ParseVolumeID = %q, %q, %v", node, dataset, err)
			}
			node, dataset, _, err = ParseSnapshotID(test.id)
			if (err == nil) != test.snapshot || (err == nil && (node != test.wantNode || dataset != test.wantDataset)) {
				t.Errorf("ParseSnapshotID = %q, %q, %v", node, dataset, err)
			}
		})
	}
}

func TestInFlightRefusesASecondCallOnAnyKey(t *testing.T) {
	inflight := NewInFlight()
	release, err := inflight.Acquire("a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inflight.Acquire("c", "b"); !errors.Is(err, ErrInFlight) {
		t.Fatalf("got %v, want ErrInFlight", err)
	}
	if release2, err := inflight.Acquire("c"); err != nil {
		t.Fatalf("c was taken by the refused call: %v", err)
	} else {
		release2()
	}
	release()
	if _, err := inflight.Acquire("a", "b"); err != nil {
		t.Fatalf("keys not released: %v", err)
	}
}

func TestGroupSnapshotIDs(t *testing.T) {
	id := GroupSnapshotID("node-1", "tank", "group-a")
	if id != "node-1:tank#group-a" {
		t.Fatalf("got %q", id)
	}
	if node, pool, snapshot, err := ParseGroupSnapshotID(id); err != nil || node != "node-1" || pool != "tank" || snapshot != "group-a" {
		t.Errorf("parsed %q %q %q %v", node, pool, snapshot, err)
	}
	for _, bad := range []string{"node-1:tank/csi#g", "node-1:tank#g@x", "node-1:tank", "node-1:tank#", "tank#g", "node-1:tank#a/b", "node-1:tank/csi/v@s"} {
		if _, _, _, err := ParseGroupSnapshotID(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, other := range []string{VolumeID("node-1", "tank/csi/v"), SnapshotID("node-1", "tank/csi/v@s")} {
		if _, _, _, err := ParseGroupSnapshotID(other); err == nil {
			t.Errorf("%q parsed as a group snapshot ID", other)
		}
	}
	if _, _, err := ParseVolumeID(id); err == nil {
		t.Errorf("%q parsed as a volume ID", id)
	}
	if _, _, _, err := ParseSnapshotID(id); err == nil {
		t.Errorf("%q parsed as a snapshot ID", id)
	}
}
