package suite

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// 4k. Adoption as docs/adopting.md tells it for Nomad: data made on node-a
// with plain zfs commands (a filesystem with a refquota, then a zvol
// holding ext4) adopted with `zfs-csi ctl adopt … --mode retain --rename`,
// registered with the docs' `nomad volume register` block (the printed
// volume_id and context filled in), read by a job on node-a with the same
// sha256, deregistered and released: the data is back, without a
// zfs.csi.dev: property.
func testAdoption(t *testing.T, e *env) {
	block := adoptRegisterBlock(t, e)
	t.Run("dataset", func(t *testing.T) {
		plain := e.pool + "/e2e-plain-db"
		must(t, "zfs", "create", "-o", "refquota=64M", plain)
		t.Cleanup(func() { _, _ = run("zfs", "destroy", "-r", plain) })
		mountpoint := strings.TrimSpace(must(t, "zfs", "get", "-H", "-o", "value", "mountpoint", plain))
		sum := writeFile(t, filepath.Join(mountpoint, "data"))
		// Adoption refuses what is mounted on the host (docs: stop what
		// uses it first).
		must(t, "zfs", "unmount", plain)
		target := e.adoptAndRead(t, block, plain, "adopted-db", nil, sum)
		if got := strings.TrimSpace(must(t, "zfs", "get", "-H", "-o", "value", "mountpoint", target)); got != mountpoint {
			t.Errorf("released, %s has mountpoint %s, want %s back", target, got, mountpoint)
		}
		if strings.TrimSpace(must(t, "zfs", "get", "-H", "-o", "value", "mounted", target)) != "yes" {
			must(t, "zfs", "mount", target)
		}
		if got := fileSum(t, filepath.Join(mountpoint, "data")); got != sum {
			t.Errorf("released, %s's file sums to %s, want %s", target, got, sum)
		}
		must(t, "zfs", "destroy", "-r", target)
	})
	t.Run("zvol with ext4", func(t *testing.T) {
		plain := e.pool + "/e2e-plain-vm"
		must(t, "zfs", "create", "-V", "64M", plain)
		t.Cleanup(func() { _, _ = run("zfs", "destroy", "-r", plain) })
		device := zvolDevice(t, plain)
		if out, err := run("mkfs.ext4", "-q", device); err != nil {
			t.Skipf("the zvol cannot be formatted in the guest: %v %s", err, out)
		}
		dir := t.TempDir()
		must(t, "mount", device, dir)
		sum := writeFile(t, filepath.Join(dir, "data"))
		must(t, "umount", dir)
		_, _ = run("udevadm", "settle") // udev's probe of the new filesystem holds it open a moment
		target := e.adoptAndRead(t, block, plain, "adopted-vm", []string{"--fs-type", "ext4"}, sum)
		device = zvolDevice(t, target)
		must(t, "mount", "-o", "ro", device, dir)
		got := fileSum(t, filepath.Join(dir, "data"))
		must(t, "umount", dir)
		if got != sum {
			t.Errorf("released, %s's file sums to %s, want %s", target, got, sum)
		}
		must(t, "zfs", "destroy", "-r", target)
	})
}

// adoptAndRead adopts plain as volume name (retain, rename, with flags),
// registers it with the docs' block, checks a job on this node reads the
// file whose sha256 is sum, and gives it back. It returns where the data
// is now (the rename moved it under the parent).
func (e *env) adoptAndRead(t *testing.T, block, plain, name string, flags []string, sum string) string {
	t.Helper()
	out := must(t, "zfs-csi", append([]string{"ctl", "adopt", plain, name, "--mode", "retain", "--rename"}, flags...)...)
	var adopted struct {
		VolumeID      string            `json:"volume_id"`
		VolumeContext map[string]string `json:"volume_context"`
	}
	if err := json.Unmarshal([]byte(out), &adopted); err != nil || adopted.VolumeID == "" {
		t.Fatalf("adopt printed %q (%v): want the volume", out, err)
	}
	t.Logf("adopted %s: %s", plain, strings.Join(strings.Fields(out), " "))
	node, target, _ := strings.Cut(adopted.VolumeID, ":")
	if node != e.node {
		t.Fatalf("adopted as %s, want a volume of %s", adopted.VolumeID, e.node)
	}
	t.Cleanup(func() { _, _ = run("zfs", "destroy", "-r", target) })

	hcl := registerFromDocs(t, block, name, adopted.VolumeID, adopted.VolumeContext, e.node)
	path := filepath.Join(t.TempDir(), name+".hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s:\n%s", filepath.Base(path), hcl)
	must(t, "nomad", "volume", "register", path)
	// A failed step leaves no volume in Nomad for NothingLeft to find.
	t.Cleanup(func() {
		if _, err := run("nomad", "volume", "status", name); err == nil {
			e.released(t, name)
			_, _ = run("nomad", "volume", "deregister", name)
		}
	})
	placed, got := e.runJob(t, e.workload(t, name+"-reader", name, false, "sha256sum /data/data | cut -d' ' -f1"), name+"-reader")
	if placed != e.node || got != sum {
		t.Errorf("the job on %s read a file with sha256 %q, want %s on %s", placed, got, sum, e.node)
	}
	e.released(t, name)
	must(t, "nomad", "volume", "deregister", name)
	// Nomad unstages a moment after the claim goes: release is refused
	// (FAILED_PRECONDITION) while the volume is staged.
	e2eutil.Eventually(t, 2*time.Minute, "the release of "+adopted.VolumeID, func() (bool, error) {
		_, err := run("zfs-csi", "ctl", "release", adopted.VolumeID)
		return err == nil, err
	})
	if left := csiProperties(t, target); len(left) > 0 {
		t.Errorf("released, %s keeps %v", target, left)
	}
	return target
}

// adoptRegisterBlock is the hcl block of docs/adopting.md's "Nomad: nomad
// volume register", from the installed package's copy (host.sh's copy of
// the repository's when the guest's dpkg left documentation out).
func adoptRegisterBlock(t *testing.T, e *env) string {
	t.Helper()
	var doc []byte
	var err error
	for _, path := range []string{"/usr/share/doc/zfs-csi/docs/adopting.md", filepath.Join(filepath.Dir(e.specs), "adopting.md")} {
		if doc, err = os.ReadFile(path); err == nil {
			t.Logf("the register block from %s", path)
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Nomad: nomad volume register\n")
	if !ok {
		t.Fatal("docs/adopting.md has no section \"Nomad: nomad volume register\"")
	}
	_, rest, ok := strings.Cut(section, "```hcl\n")
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("docs/adopting.md's Nomad section has no hcl block")
	}
	return block
}

// registerFromDocs fills the docs' block in as its reader would: the
// volume's name for "db", the printed volume_id and context (its fsType in
// mount_options too), the node that holds the data for node-a. Each example value must be there: a changed
// block fails here rather than register something else.
func registerFromDocs(t *testing.T, block, name, volumeID string, context map[string]string, node string) string {
	t.Helper()
	keys := make([]string, 0, len(context))
	for key := range context {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	contextLines := []string{"context {"}
	for _, key := range keys {
		contextLines = append(contextLines, fmt.Sprintf("  %s = %q", key, context[key]))
	}
	contextLines = append(contextLines, "}")
	for _, edit := range []struct{ pattern, replacement string }{
		{`(?m)^(id\s*=\s*)"db"$`, `${1}"` + name + `"`},
		{`(?m)^(name\s*=\s*)"db"$`, `${1}"` + name + `"`},
		{`(?m)^(external_id\s*=\s*)"node-a:tank/csi/db"$`, `${1}"` + volumeID + `"`},
		{`(?ms)^context \{\n.*?^\}`, strings.Join(contextLines, "\n")},
		// Nomad stages with this filesystem type: the volume's own.
		{`(?m)^(\s*fs_type\s*=\s*)"zfs"$`, `${1}"` + context["fsType"] + `"`},
		{`("zfs\.csi\.dev/node"\s*=\s*)"node-a"`, `${1}"` + node + `"`},
	} {
		re := regexp.MustCompile(edit.pattern)
		if !re.MatchString(block) {
			t.Fatalf("docs/adopting.md's register block has no %s: the docs changed, update the scenario\n%s", edit.pattern, block)
		}
		block = re.ReplaceAllString(block, edit.replacement)
	}
	return block
}

// csiProperties lists the zfs.csi.dev: properties ds still carries.
func csiProperties(t *testing.T, ds string) []string {
	t.Helper()
	var left []string
	for _, line := range strings.Split(must(t, "zfs", "get", "-H", "-o", "property,value,source", "all", ds), "\n") {
		if strings.HasPrefix(line, "zfs.csi.dev:") {
			left = append(left, strings.Join(strings.Fields(line), " "))
		}
	}
	return left
}

// zvolDevice waits for udev's link of a zvol and returns it.
func zvolDevice(t *testing.T, zvol string) string {
	t.Helper()
	device := "/dev/zvol/" + zvol
	e2eutil.Eventually(t, time.Minute, device, func() (bool, error) {
		_, _ = run("udevadm", "settle")
		_, err := os.Stat(device)
		return err == nil, err
	})
	return device
}

// writeFile writes 4 MiB of random data to path and returns its sha256.
func writeFile(t *testing.T, path string) string {
	t.Helper()
	must(t, "dd", "if=/dev/urandom", "of="+path, "bs=1M", "count=4", "conv=fsync", "status=none")
	return fileSum(t, path)
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
