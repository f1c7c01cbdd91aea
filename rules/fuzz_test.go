package rules

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzVolumeComponent: any CSI name maps, without panicking, to a valid
// component under the parent, and an ID within 128 bytes; different names
// never share a component.
func FuzzVolumeComponent(f *testing.F) {
	f.Add("pvc-1", "pvc-2")
	f.Add("a/b", "a_b")
	f.Add(strings.Repeat("x", 128), strings.Repeat("x", 127))
	f.Add("..", ".")
	f.Add("ボリューム", "ボリュー")
	f.Add("data base", "x")
	f.Add("csi-clone-pvc", "x")
	namer, err := NewNamer(testConfig)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, name := range []string{a, b} {
			if !utf8.ValidString(name) || len(name) > 128 || name == "" {
				return // not a name the spec allows
			}
		}
		component := namer.VolumeComponent(a, MaxGenerations)
		dataset := testConfig.ParentDatasets[0] + "/" + component
		if !validDatasetPath(dataset) || !testConfig.OwnedDataset(dataset) {
			t.Fatalf("%q → %q: not a dataset under the parent", a, dataset)
		}
		snapshotID := SnapshotID(testConfig.NodeID, dataset+"@"+namer.SnapshotComponent(a))
		if len(snapshotID) > MaxIDLength {
			t.Fatalf("%q → %d-byte ID %q", a, len(snapshotID), snapshotID)
		}
		if a != b && namer.VolumeComponent(a, 1) == namer.VolumeComponent(b, 1) {
			t.Fatalf("%q and %q share component %q", a, b, namer.VolumeComponent(a, 1))
		}
		// A hash cannot be guessed, so the names most likely to collide
		// with a are built from it: its own components, taken as names.
		for _, mapped := range []func(string) string{
			func(name string) string { return namer.VolumeComponent(name, 1) },
			namer.SnapshotComponent,
		} {
			component := mapped(a)
			if component != a && mapped(component) == component {
				t.Fatalf("%q and %q share component %q", a, component, component)
			}
		}
		if component := namer.SnapshotComponent(a); strings.HasPrefix(component, InternalSnapshotPrefix) {
			t.Fatalf("%q → snapshot component %q, which is the driver's own kind of snapshot", a, component)
		}
	})
}

// FuzzParseVolumeID: parsing never panics, and what parses formats back to
// the same ID.
func FuzzParseVolumeID(f *testing.F) {
	for _, seed := range []string{"node-a:tank/csi/v", "node-a:tank/csi/v@s", "x", ":", "a:b/../c", "a:b@c@d", "n:tank/a:2"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if node, dataset, err := ParseVolumeID(id); err == nil && VolumeID(node, dataset) != id {
			t.Fatalf("%q parsed to %q, %q", id, node, dataset)
		}
		if node, dataset, snapshot, err := ParseSnapshotID(id); err == nil &&
			(SnapshotID(node, snapshot) != id || !strings.HasPrefix(snapshot, dataset+"@")) {
			t.Fatalf("%q parsed to %q, %q, %q", id, node, dataset, snapshot)
		}
	})
}

// FuzzNameProperty: every name the spec allows is stored as a value `zfs
// list -H` returns intact and reads back as itself; two names never share a
// value.
func FuzzNameProperty(f *testing.F) {
	f.Add("pvc-1", "-")
	f.Add("a\tb", `"a\tb"`)
	f.Add(`"\"-\""`, `"-"`)
	f.Add("\r\n", " ")
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, name := range []string{a, b} {
			if SpecNameProblem(name) != "" {
				return
			}
			value := EncodeName(name)
			if value == "-" || strings.ContainsAny(value, "\t\n") || DecodeName(value) != name {
				t.Fatalf("%q is stored as %q and reads back as %q", name, value, DecodeName(value))
			}
		}
		if a != b && EncodeName(a) == EncodeName(b) {
			t.Fatalf("%q and %q are both stored as %q", a, b, EncodeName(a))
		}
	})
}
