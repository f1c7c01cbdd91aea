package suite

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// installedAdoptionDocs is docs/adopting.md as the package installs it.
const installedAdoptionDocs = "/usr/share/doc/zfs-csi/docs/adopting.md"

// Adoption: docs/adopting.md's Kubernetes recipe, run. Data an operator
// made with zfs on this node (a dataset holding a file; a zvol holding an
// ext4 file system with a file) is adopted in retain mode with `zfs-csi
// ctl adopt --rename`; the docs' static PersistentVolume and claim, with
// the example's values replaced by what adopt printed, bind; a pod on this
// node reads the data that was there before. The claim and the
// PersistentVolume go (Retain: no DeleteVolume), `zfs-csi ctl release`
// gives the data back, and it is the operator's again: its data there, no
// property of the driver left.
func testAdoption(t *testing.T, e *env) {
	doc, err := os.ReadFile(installedAdoptionDocs)
	if err != nil {
		t.Fatal(err)
	}
	recipe, err := staticPVBlock(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	type existing struct {
		name, file, content string
		make                func(t *testing.T, ds, file, content string)
		flags               []string
	}
	for _, x := range []existing{
		{"adopted-db", "table", "rows-of-the-db", makeDataset, nil},
		{"adopted-disk", "image", "blocks-of-the-vm", makeExt4Zvol, []string{"--fs-type", "ext4"}},
	} {
		t.Run(x.name, func(t *testing.T) {
			ds := e.pool + "/operators-" + x.name
			t.Cleanup(func() { e.cleanUpAdoption(t, x.name, ds) })
			x.make(t, ds, x.file, x.content)
			out := must(t, "zfs-csi", append([]string{"ctl", "adopt", ds, x.name, "--mode", "retain", "--rename"}, x.flags...)...)
			var adopted struct { // the volume, as CreateVolume's answer holds one
				VolumeID      string            `json:"volume_id"`
				VolumeContext map[string]string `json:"volume_context"`
			}
			if err := json.Unmarshal([]byte(out), &adopted); err != nil || !strings.HasPrefix(adopted.VolumeID, e.node+":") {
				t.Fatalf("adopt printed %s (%v)", out, err)
			}
			id, vc := adopted.VolumeID, adopted.VolumeContext
			moved := strings.TrimPrefix(id, e.node+":")
			t.Logf("adopted %s as %s, context %v", ds, id, vc)
			yaml := strings.NewReplacer(
				"node-a:tank/csi/db", id, "[node-a]", "["+e.node+"]",
				"name: db", "name: "+x.name, "volumeName: db", "volumeName: "+x.name,
				"kind: dataset", "kind: "+vc["kind"], "fsType: zfs", "fsType: "+vc["fsType"],
			).Replace(recipe)
			cmd := exec.Command(e.kubectl, "apply", "-n", e.ns, "-f", "-")
			cmd.Stdin = strings.NewReader(yaml)
			if applied, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("kubectl apply of the docs' recipe: %v: %s\n%s", err, applied, yaml)
			}
			if pv := e.boundPV(t, x.name); pv != x.name {
				t.Errorf("claim %s is bound to %s, want the docs' PersistentVolume", x.name, pv)
			}
			e.pod(t, x.name+"-reader", x.name, false, "set -e; cat /data/"+x.file+" > /dev/termination-log")
			if got := e.finished(t, x.name+"-reader", podWait); got != x.content {
				t.Errorf("the adopted %s reads %q, want %q as the operator wrote it", x.name, got, x.content)
			}
			e.deletePod(t, x.name+"-reader")
			e.dropStaticPV(t, x.name)
			t.Logf("released: %s", strings.TrimSpace(must(t, "zfs-csi", "ctl", "release", id)))
			if left := e2eutil.LocalProperties(t, moved, driverName+":"); len(left) > 0 {
				t.Errorf("the released %s keeps the driver's properties %v", moved, left)
			}
			if got := readBack(t, moved, x.file); got != x.content {
				t.Errorf("the released %s reads %q, want %q", moved, got, x.content)
			}
		})
	}
}

// cleanUpAdoption, after a failure midway: the reader and the claim go
// first (kubelet unstages the volume), then the operator's data, wherever
// adoption left it (ds, or the parent's name), once nothing holds it.
func (e *env) cleanUpAdoption(t *testing.T, name, ds string) {
	_ = e.cs.CoreV1().Pods(e.ns).Delete(ctx(), name+"-reader", metav1.DeleteOptions{})
	_ = e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx(), name, metav1.DeleteOptions{})
	_ = e.cs.CoreV1().PersistentVolumes().Delete(ctx(), name, metav1.DeleteOptions{})
	_, _ = run("zfs", "destroy", "-r", ds)
	e2eutil.Eventually(t, 3*time.Minute, "the adopted "+name+" to be destroyed", func() (bool, error) {
		out, err := run("zfs", "destroy", "-r", e.pool+"/csi/"+name)
		return err == nil || strings.Contains(out, "does not exist"), fmt.Errorf("%s", strings.TrimSpace(out))
	})
}

// dropStaticPV deletes the claim name and then its Retain PersistentVolume
// of the same name, as the docs' operator does: the claim goes, the PV stays
// Released (no DeleteVolume) until it is deleted.
func (e *env) dropStaticPV(t *testing.T, name string) {
	t.Helper()
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e2eutil.Eventually(t, 3*time.Minute, "PV "+name+" to be Released", func() (bool, error) {
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pv.Status.Phase == corev1.VolumeReleased, fmt.Errorf("phase %s", pv.Status.Phase)
	})
	if err := e.cs.CoreV1().PersistentVolumes().Delete(ctx(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	e.gonePV(t, name)
}

// staticPVBlock is docs/adopting.md's YAML block of its Kubernetes section.
func staticPVBlock(doc string) (string, error) {
	_, section, ok := strings.Cut(doc, "## Kubernetes: a static PersistentVolume")
	if !ok {
		return "", fmt.Errorf("docs/adopting.md has no section Kubernetes: a static PersistentVolume")
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)\n```").FindStringSubmatch(section)
	if m == nil {
		return "", fmt.Errorf("docs/adopting.md's Kubernetes section has no yaml block")
	}
	return m[1] + "\n", nil
}

// makeDataset is an operator's dataset with a file and a refquota,
// unmounted (adoption refuses mounted data).
func makeDataset(t *testing.T, ds, file, content string) {
	t.Helper()
	dir := t.TempDir()
	// Released, the dataset is mounted here again, its mountpoint given
	// back: unmounted before the directory goes (cleanups run last first).
	t.Cleanup(func() { _, _ = run("umount", dir) })
	must(t, "zfs", "create", "-o", "refquota=256M", "-o", "mountpoint="+dir, ds)
	must(t, "sh", "-c", `printf %s "$2" > "$1" && sync`, "sh", dir+"/"+file, content)
	must(t, "zfs", "unmount", ds)
}

// makeExt4Zvol is an operator's zvol holding an ext4 file system with a
// file.
func makeExt4Zvol(t *testing.T, ds, file, content string) {
	t.Helper()
	must(t, "zfs", "create", "-V", "128M", ds)
	must(t, "udevadm", "settle")
	must(t, "mkfs.ext4", "-q", "/dev/zvol/"+ds)
	dir := t.TempDir()
	must(t, "mount", "/dev/zvol/"+ds, dir)
	must(t, "sh", "-c", `printf %s "$2" > "$1" && sync`, "sh", dir+"/"+file, content)
	must(t, "umount", dir)
}

// readBack reads file of a released dataset where ZFS mounts it, or of an
// ext4 zvol mounted read-only in a directory of its own.
func readBack(t *testing.T, ds, file string) string {
	t.Helper()
	props := strings.Fields(must(t, "zfs", "get", "-H", "-o", "value", "type,mounted,mountpoint", ds))
	if props[0] == "filesystem" {
		if props[1] != "yes" {
			must(t, "zfs", "mount", ds)
		}
		return must(t, "cat", props[2]+"/"+file)
	}
	dir := t.TempDir()
	must(t, "udevadm", "settle")
	must(t, "mount", "-o", "ro", "/dev/zvol/"+ds, dir)
	defer must(t, "umount", dir)
	return must(t, "cat", dir+"/"+file)
}
