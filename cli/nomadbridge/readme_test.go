package nomadbridge

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeNomad is docs/nomad.md, where the README sends Nomad's users. make
// e2e-nomad runs its sh blocks on a real cluster; these checks keep the
// rest of it true offline.
func readmeNomad(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/nomad.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestReadmeNomadSettingsAreTheBridgesFlags(t *testing.T) {
	var help bytes.Buffer
	if err := Run([]string{"-help"}, nil, &help); err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile("`((?:ZFS_CSI_NOMAD|NOMAD)_[A-Z_]+)`").FindAllStringSubmatch(readmeNomad(t), -1) {
		if !strings.Contains(help.String(), "["+name[1]+"]") {
			t.Errorf("docs/nomad.md names %s, which no flag of zfs-csi nomad-bridge reads", name[1])
		}
	}
}

func TestReadmeNomadCommandsUseShippedFiles(t *testing.T) {
	// File names the commands and text use, not paths on a client
	// (/etc/nomad.d/zfs-csi.hcl is where one goes).
	for _, file := range regexp.MustCompile("(?:^|[\\s`])([a-z0-9.-]+\\.hcl)\\b").FindAllStringSubmatch(readmeNomad(t), -1) {
		if _, err := os.Stat(filepath.Join("../../packaging/nomad", file[1])); err != nil {
			t.Errorf("docs/nomad.md names %s: %v", file[1], err)
		}
	}
	if _, err := os.Stat("../../systemd/zfs-csi-nomad.service"); err != nil || !strings.Contains(readmeNomad(t), "systemctl enable --now zfs-csi-nomad") {
		t.Errorf("docs/nomad.md enables zfs-csi-nomad, the unit the package ships: %v", err)
	}
}
