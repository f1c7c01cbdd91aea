package e2eutil

import (
	"os/exec"
	"strings"
	"testing"
)

// LocalProperties are the properties named with prefix (the driver's:
// "zfs.csi.dev:") set locally on dataset, as `zfs get -s local` lists
// them: what the scenarios check adoption and release by.
func LocalProperties(t testing.TB, dataset, prefix string) []string {
	t.Helper()
	out, err := exec.Command("zfs", "get", "-H", "-s", "local", "-o", "property", "all", dataset).Output()
	if err != nil {
		t.Fatalf("zfs get -s local all %s: %v", dataset, err)
	}
	var found []string
	for _, property := range strings.Fields(string(out)) {
		if strings.HasPrefix(property, prefix) {
			found = append(found, property)
		}
	}
	return found
}
