package cli

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite packaging/zfs-csi.8 from the flag tables")

func TestTheManualPageIsWrittenFromTheFlagTables(t *testing.T) {
	var page bytes.Buffer
	writeManPage(&page)
	const path = "../packaging/zfs-csi.8"
	if *update {
		if err := os.WriteFile(path, page.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, page.Bytes()) {
		t.Fatalf("%s is not what the flag tables say: go test ./cli -run ManualPage -update rewrites it", path)
	}
	for _, section := range []string{"OPTIONS", "ENVIRONMENT", "EXIT STATUS", "EXAMPLES"} {
		if !strings.Contains(page.String(), ".SH "+section+"\n") {
			t.Errorf("the page has no %s section", section)
		}
	}
	for _, name := range []string{"parent-dataset", "allow-paths", "metrics-web-config"} {
		if !strings.Contains(page.String(), ".BR \\-\\-"+strings.ReplaceAll(name, "-", `\-`)) {
			t.Errorf("OPTIONS lacks --%s", name)
		}
	}
	// man(1) renders it without a warning, where it is installed.
	if _, err := exec.LookPath("groff"); err == nil {
		cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
		cmd.Stdin = bytes.NewReader(page.Bytes())
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("groff -man -ww: %v\n%s", err, out)
		}
	}
}
