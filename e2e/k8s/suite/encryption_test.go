package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// keySecret is the Secret packaging/kubernetes/encryption/ names, in the
// sidecars' namespace, as docs/encryption.md has the user create it.
const keySecret = "zfs-csi-encryption-key"

// 12. Encryption through the opt-in manifests: the key Secret, the Role that
// lets the provisioner read it, the encrypted StorageClass. A claim and a
// restore of its snapshot provision encrypted; once the node's key is
// unloaded (as after a reboot) both mount again, kubelet's NodeStageVolume
// loading the key from the class's node-stage Secret.
func testEncryption(t *testing.T, e *env) {
	// As docs/encryption.md has the user make it.
	passphrase := filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(passphrase, []byte("e2e passphrase of zfs-csi"), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, e.kubectl, "-n", driverNS, "create", "secret", "generic", keySecret, "--from-file=encryptionPassphrase="+passphrase)
	dir := e.optional(t, "encryption")
	must(t, e.kubectl, "apply", "-f", dir)
	t.Cleanup(func() {
		// The Role and the class go with the chart scenario's deletion of
		// the manifests only if applied with them: remove them here.
		_, _ = run(e.kubectl, "delete", "-f", dir, "--ignore-not-found")
		_ = e.cs.CoreV1().Secrets(driverNS).Delete(ctx(), keySecret, metav1.DeleteOptions{})
	})
	c := class{"zfs-encrypted", false}
	src := "encrypted"
	snap, restore := src+"-snap", src+"-restore"
	token := "token-of-" + src
	t.Cleanup(func() {
		// After a failure half-way. The provisioner reads the key's Secret
		// to delete these volumes, and the cleanup above deletes it: this
		// one (run first) waits for the volumes to go.
		e.removeQuietly([]string{src + "-writer", restore + "-reader", src + "-after-unload", restore + "-after-unload"},
			[]string{restore}, snap, src)
		e.volumesGoneQuietly([]string{src, restore}, podWait)
	})
	e.written(t, src, c, token)
	ds := e.dataset(t, e.boundPV(t, src))
	if got := e.props(t, ds, "encryption", "keystatus", "encryptionroot"); got[0] != "aes-256-gcm" || got[1] != "available" || got[2] != ds {
		t.Errorf("%s: encryption, keystatus, encryptionroot = %v; want aes-256-gcm, available, itself", ds, got)
	}
	e.snapshot(t, snap, src)
	e.pvc(t, restore, c.name, "1Gi", c.mode(), "snap:"+snap)
	e.pod(t, restore+"-reader", restore, false, c.read())
	if got := e.finished(t, restore+"-reader", podWait); got != token {
		t.Errorf("the restore holds %q, want %q", got, token)
	}
	e.deletePod(t, restore+"-reader")
	restoreDS := e.dataset(t, e.boundPV(t, restore))
	if got := e.props(t, restoreDS, "encryptionroot")[0]; got != ds {
		t.Errorf("the restore %s has encryption root %s, want its origin's %s (restores share the key)", restoreDS, got, ds)
	}

	// As after a reboot: nothing mounted, the key unloaded.
	unstaged(t, ds, restoreDS)
	must(t, "zfs", "unload-key", ds)
	for _, d := range []string{ds, restoreDS} {
		if got := e.props(t, d, "keystatus")[0]; got != "unavailable" {
			t.Fatalf("%s: keystatus %s after zfs unload-key, want unavailable", d, got)
		}
	}
	for _, claim := range []string{src, restore} {
		e.pod(t, claim+"-after-unload", claim, false, c.read())
	}
	for _, claim := range []string{src, restore} {
		if got := e.finished(t, claim+"-after-unload", podWait); got != token {
			t.Errorf("%s after the key was unloaded holds %q, want %q", claim, got, token)
		}
	}
	if got := e.props(t, ds, "keystatus")[0]; got != "available" {
		t.Errorf("%s: keystatus %s after the pods mounted it again, want available (NodeStageVolume loads it)", ds, got)
	}
	if log := must(t, "journalctl", "-u", "zfs-csi", "-o", "cat", "--no-pager"); strings.Contains(log, "e2e passphrase of zfs-csi") {
		t.Error("the daemon's journal holds the passphrase")
	}
	for _, claim := range []string{src, restore} {
		e.deletePod(t, claim+"-after-unload")
	}
	e.deletePVC(t, restore, restoreDS)
	e.deleteSnapshot(t, snap)
	e.deletePVC(t, src, "")
	e.reaped(t, ds)
}

// unstaged waits for the datasets to be unmounted. A pod is gone from the
// API before kubelet unstages its volume (NodeUnstageVolume comes once no
// pod on the node uses it), so reading `mounted` once after a pod's
// deletion races kubelet.
func unstaged(t *testing.T, datasets ...string) {
	t.Helper()
	for _, d := range datasets {
		e2eutil.Eventually(t, podWait, d+" to be unmounted with no pod using it", func() (bool, error) {
			out, err := run("zfs", "get", "-H", "-o", "value", "mounted", d)
			return err == nil && strings.TrimSpace(out) == "no", fmt.Errorf("mounted: %q (%v)", strings.TrimSpace(out), err)
		})
	}
}
