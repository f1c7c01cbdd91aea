package ctl

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"testing"
)

// docs/ctl.md lists ctl's commands in a table, one a row; a command added,
// renamed or removed here must be there too, or users read of commands that
// are not (or miss one that is).
func TestTheDocumentListsEveryCommandAndNoOther(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ctl.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, row := range regexp.MustCompile("(?m)^\\| `([a-z-]+)[ `]").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, row[1])
	}
	sort.Strings(documented)
	var names []string
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	if !slices.Equal(documented, names) {
		t.Errorf("docs/ctl.md lists\n%v\nzfs-csi ctl has\n%v", documented, names)
	}
}
