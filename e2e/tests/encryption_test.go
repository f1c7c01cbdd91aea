//go:build e2e

package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	e2ePassphrase = "e2e-passphrase-never-in-argv"
	e2eHexKey     = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7"
)

// watchArgv samples every process's command line until stop is called and
// reports whether any held one of the needles.
func watchArgv(t *testing.T, needles ...string) (stop func() (seen string, samples int)) {
	var done atomic.Bool
	var wg sync.WaitGroup
	var found string
	var count int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, entry := range entries {
				cmdline, err := os.ReadFile(entry)
				if err != nil {
					continue
				}
				for _, needle := range needles {
					if bytes.Contains(cmdline, []byte(needle)) {
						found = string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
					}
				}
			}
			count++
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() (string, int) {
		done.Store(true)
		wg.Wait()
		return found, count
	}
}

// Encrypted volumes on real ZFS: keys reach zfs on stdin only (never in any
// process's argv, the logs, an error or a property), restores stay
// encrypted, and staging after the key was unloaded (a reboot) loads it from
// the node-stage secrets, refusing a missing or wrong key without damage.
func TestEncryptedVolumesOnZFS(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	stopWatching := watchArgv(t, e2ePassphrase, e2eHexKey)
	encrypted := func(name string, capability *csi.VolumeCapability, secrets map[string]string) *csi.Volume {
		req := volumeRequest(name, 64<<20, capability, map[string]string{"encryption": "aes-256-gcm"})
		req.Secrets = secrets
		return d.createVolume(req)
	}
	fs := encrypted("secret-fs", mountCap(""), map[string]string{"encryptionPassphrase": e2ePassphrase})
	ext4 := encrypted("secret-ext4", mountCap("ext4"), map[string]string{"encryptionKey": e2eHexKey})
	var errs []error
	noKey := volumeRequest("no-key", 64<<20, mountCap(""), map[string]string{"encryption": "on"})
	if _, err := d.controller.CreateVolume(ctx(t), noKey); status.Code(err) != codes.InvalidArgument {
		t.Errorf("encryption without a key: got %v, want InvalidArgument", err)
	} else {
		errs = append(errs, err)
	}

	dataset := datasetOf(t, fs.GetVolumeId())
	for property, want := range map[string]string{"encryption": "aes-256-gcm", "keyformat": "passphrase", "keylocation": "prompt", "keystatus": "available"} {
		if got := zfsGet(t, property, dataset); got != want {
			t.Errorf("%s of %s is %q, want %q", property, dataset, got, want)
		}
	}
	if got := zfsGet(t, "keyformat", datasetOf(t, ext4.GetVolumeId())); got != "hex" {
		t.Errorf("the hex-keyed zvol has keyformat %s", got)
	}

	// Data in, then what a reboot does: unmounted, key unloaded.
	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	mustRun(t, "mkdir", staging)
	stage := func(secrets map[string]string) error {
		_, err := d.node.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: fs.GetVolumeId(), StagingTargetPath: staging,
			VolumeCapability: mountCap(""), VolumeContext: fs.GetVolumeContext(), Secrets: secrets})
		return err
	}
	if err := stage(nil); err != nil {
		t.Fatalf("staging with the key loaded: %v", err)
	}
	if _, err := d.node.NodePublishVolume(ctx(t), &csi.NodePublishVolumeRequest{VolumeId: fs.GetVolumeId(), StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: mountCap("")}); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "sh", "-c", `echo sealed > "$1/data" && sync`, "sh", target)
	if _, err := d.node.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: fs.GetVolumeId(), TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.node.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: fs.GetVolumeId(), StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "zfs", "unload-key", dataset)

	err := stage(nil)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("staging without the key: got %v, want FailedPrecondition", err)
	}
	errs = append(errs, err)
	err = stage(map[string]string{"encryptionPassphrase": "a-wrong-passphrase"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("staging with a wrong key: got %v, want InvalidArgument", err)
	}
	errs = append(errs, err)
	if got := zfsGet(t, "keystatus", dataset); got != "unavailable" {
		t.Errorf("after a wrong key the keystatus is %s", got)
	}
	if err := stage(map[string]string{"encryptionPassphrase": e2ePassphrase}); err != nil {
		t.Fatalf("staging with the key: %v", err)
	}
	if got := mustRun(t, "cat", filepath.Join(staging, "data")); got != "sealed" {
		t.Errorf("after the key was loaded the data reads %q", got)
	}
	if _, err := d.node.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: fs.GetVolumeId(), StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}

	// A restore of an encrypted snapshot is encrypted by the same key.
	snapshot := d.createSnapshot("secret-snap", fs.GetVolumeId())
	restore := volumeRequest("secret-restore", 64<<20, mountCap(""), map[string]string{"encryption": "aes-256-gcm"})
	restore.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot.GetSnapshotId()}}}
	restored := datasetOf(t, d.createVolume(restore).GetVolumeId())
	if got := zfsGet(t, "encryption", restored); got != "aes-256-gcm" {
		t.Errorf("the restore's encryption is %s", got)
	}
	if got := zfsGet(t, "encryptionroot", restored); got != dataset {
		t.Errorf("the restore's encryption root is %s, want %s", got, dataset)
	}

	seen, samples := stopWatching()
	if seen != "" {
		t.Errorf("a key was in a process's argv: %s", seen)
	}
	t.Logf("argv sampled %d times while the keys were in use", samples)
	logged, _ := os.ReadFile(d.logPath)
	properties := mustRun(t, "zfs", "get", "-r", "-H", "all", parent)
	for _, haystack := range []struct{ what, text string }{{"the driver's log", string(logged)}, {"zfs get all", properties}} {
		for _, needle := range []string{e2ePassphrase, e2eHexKey, "a-wrong-passphrase"} {
			if strings.Contains(haystack.text, needle) {
				t.Errorf("%s holds a key", haystack.what)
			}
		}
	}
	for _, err := range errs {
		for _, needle := range []string{e2ePassphrase, e2eHexKey, "a-wrong-passphrase"} {
			if strings.Contains(err.Error(), needle) {
				t.Errorf("an error holds a key: %v", err)
			}
		}
	}
}
