package rules

import (
	"strings"
	"testing"
	"unicode/utf8"
)

var testConfig = Config{DriverName: "zfs.csi.dev", NodeID: "node-a", ParentDatasets: []string{"tank/csi"}}

func TestNamesMapToValidComponents(t *testing.T) {
	namer, err := NewNamer(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, want string
	}{
		{"a Kubernetes PV name is kept as it is", "pvc-0b7c4f4e-9a4e-4b8e-8d6f-2a1c3e5d7f90"},
		{"a name with a slash is sanitised and hashed", "a_b-"},
		{"a name with a colon is hashed, since ':' marks generations", "a_b-"},
		{"non-ASCII is sanitised and hashed", "h-"},
		{"a name starting with a dot loses it and is hashed", "hidden-"},
	}
	inputs := []string{"pvc-0b7c4f4e-9a4e-4b8e-8d6f-2a1c3e5d7f90", "a/b", "a:b", "ボ", ".hidden"}
	for i, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			got := namer.VolumeComponent(inputs[i], 1)
			if !strings.HasPrefix(got, test.want) || !validDatasetPath("tank/csi/"+got) {
				t.Errorf("%q → %q, want prefix %q", inputs[i], got, test.want)
			}
		})
	}
	t.Run("generations after the first carry a suffix", func(t *testing.T) {
		if got := namer.VolumeComponent("v", 3); got != "v:3" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("names differing only in what sanitising removes stay distinct", func(t *testing.T) {
		if namer.VolumeComponent("a/b", 1) == namer.VolumeComponent("a_b", 1) || namer.VolumeComponent("a/b", 1) == namer.VolumeComponent("a?b", 1) {
			t.Error("collision")
		}
	})
	t.Run("the longest names keep IDs within 128 bytes", func(t *testing.T) {
		long := strings.Repeat("ü", 64)
		id := SnapshotID("node-a", "tank/csi/"+namer.VolumeComponent(long, MaxGenerations)+"@"+namer.SnapshotComponent(long))
		if len(id) > MaxIDLength || !utf8.ValidString(id) {
			t.Errorf("%q is %d bytes", id, len(id))
		}
	})
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		ok     bool
	}{
		{"the defaults are valid", func(c *Config) {}, true},
		{"a driver name with upper case is refused (it prefixes user properties)", func(c *Config) { c.DriverName = "ZFS.csi" }, false},
		{"a node ID with a colon is refused (it ends at the first colon of an ID)", func(c *Config) { c.NodeID = "a:b" }, false},
		{"no parent dataset is refused", func(c *Config) { c.ParentDatasets = nil }, false},
		{"a snapshot as parent is refused", func(c *Config) { c.ParentDatasets = []string{"tank@s"} }, false},
		{"the same parent twice is refused", func(c *Config) { c.ParentDatasets = []string{"tank/a", "tank/a"} }, false},
		{"a parent so long that IDs could not fit is refused", func(c *Config) { c.ParentDatasets = []string{"tank/" + strings.Repeat("p", 80)} }, false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			c := testConfig
			test.change(&c)
			if err := c.Validate(); (err == nil) != test.ok {
				t.Errorf("Validate() = %v", err)
			}
		})
	}
}

func TestOwnedDatasetsAreDirectChildrenOfParents(t *testing.T) {
	c := Config{ParentDatasets: []string{"tank/csi", "fast/k8s"}}
	for dataset, want := range map[string]bool{
		"tank/csi/v": true, "fast/k8s/v:2": true, "tank/csi": false, "tank/csi/v/child": false,
		"tank/csi/v@s": false, "tank/other/v": false, "tank/csix/v": false, "tank/csi/": false,
	} {
		if got := c.OwnedDataset(dataset); got != want {
			t.Errorf("OwnedDataset(%q) = %v", dataset, got)
		}
	}
}

// Every name the spec allows survives EncodeName, `zfs list -H` (tabs
// between columns, newlines between rows, "-" for unset) and DecodeName,
// and no two names share a stored value.
func TestEveryNameTheSpecAllowsRoundTripsThroughItsProperty(t *testing.T) {
	names := []string{
		"pvc-0b7c4f4e-9a4e-4b8e-8d6f-2a1c3e5d7f90", "-", "a\tb", "a\nb", "a\rb", "\t", "\n", " leading", "trailing ",
		strings.Repeat("ü", 64), strings.Repeat("\t", 128), "nul\x00byte", "del\x7f", `"quoted"`, `"a\tb"`, `"\"a\\tb\""`,
		`"-"`, `""`, `"`, `"\`, `\t`, "ünï\u2028code",
	}
	stored := map[string]string{}
	for _, name := range names {
		if problem := SpecNameProblem(name); problem != "" {
			t.Fatalf("%q: %s", name, problem)
		}
		value := EncodeName(name)
		if value == "-" || value == "" || strings.ContainsAny(value, "\t\n\r\x00") {
			t.Errorf("%q is stored as %q, which zfs list -H cannot return intact", name, value)
		}
		if got := DecodeName(value); got != name {
			t.Errorf("%q is stored as %q and reads back as %q", name, value, got)
		}
		if other, taken := stored[value]; taken {
			t.Errorf("%q and %q are both stored as %q", name, other, value)
		}
		stored[value] = name
	}
}

// Names as versions before the encoding stored them read back as they are.
func TestNamesStoredBeforeTheEncodingReadBackAsTheyAre(t *testing.T) {
	for _, value := range []string{"pvc-1", "snapshot-0b7c4f4e", "my volume", `"quoted"`, `say "hi"`, `"unterminated`, `"a\qb"`, "ボリューム"} {
		if NameProblem(value) != "" {
			t.Fatalf("%q was not a name older versions stored", value)
		}
		if got := DecodeName(value); got != value {
			t.Errorf("a property %q written by an older version reads as %q", value, got)
		}
		if got := EncodeName(value); got != value {
			t.Errorf("%q is now stored as %q: a retry would not find the volume an older version made", value, got)
		}
	}
}

func TestNameProblems(t *testing.T) {
	for name, want := range map[string]string{
		"":                       "name is required",
		strings.Repeat("x", 129): "more than 128",
		"\xff":                   "not valid UTF-8",
		strings.Repeat("ü", 64):  "",
		"a\tb":                   "",
		"-":                      "",
	} {
		if got := SpecNameProblem(name); !strings.Contains(got, want) || (want == "") != (got == "") {
			t.Errorf("SpecNameProblem(%q) = %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"-", "a\tb", "a\nb"} {
		if NameProblem(name) == "" {
			t.Errorf("NameProblem(%q) allows a name that cannot be stored as it is", name)
		}
	}
}
