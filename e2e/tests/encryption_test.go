//go:build e2e

package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	gozfs "github.com/mistifyio/go-zfs/v3"
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
//
// long: one scenario on real ZFS whose steps build on the volumes before them
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
	// zfs reads one line: "<passphrase>\nanything" would make a volume that
	// "<passphrase>\nelse" opens too.
	twoLines := volumeRequest("two-lines", 64<<20, mountCap(""), map[string]string{"encryption": "on"})
	twoLines.Secrets = map[string]string{"encryptionPassphrase": e2ePassphrase + "\nanything"}
	if _, err := d.controller.CreateVolume(ctx(t), twoLines); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a passphrase of two lines: got %v, want InvalidArgument", err)
	} else {
		errs = append(errs, err)
	}
	for _, name := range zfsNames(t, gozfs.Datasets, parent) {
		if strings.Contains(name, "two-lines") || strings.Contains(name, "no-key") {
			t.Errorf("a refused volume left %s", name)
		}
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

// encryptedNodeVolume makes a volume for the node calls below: from source
// when given (it shares its source's key and needs none), else encrypted
// with the key in secrets. Its staging and target paths are fresh; it is
// unpublished and unstaged when the test ends.
func (d *driverProcess) encryptedNodeVolume(name string, capability *csi.VolumeCapability, source *csi.VolumeContentSource, secrets map[string]string) *nodeVolume {
	d.t.Helper()
	request := volumeRequest(name, 64<<20, capability, map[string]string{"encryption": "aes-256-gcm"})
	request.VolumeContentSource, request.Secrets = source, secrets
	dir := d.t.TempDir()
	v := &nodeVolume{volume: d.createVolume(request), capability: capability,
		staging: filepath.Join(dir, "staging"), target: filepath.Join(dir, "target")}
	mustRun(d.t, "mkdir", v.staging)
	d.t.Cleanup(func() {
		if d.running() {
			d.unpublish(v)
			d.unstage(v)
		}
	})
	return v
}

func (d *driverProcess) stageWith(v *nodeVolume, staging string, secrets map[string]string) error {
	_, err := d.node.NodeStageVolume(ctx(d.t), &csi.NodeStageVolumeRequest{VolumeId: v.volume.GetVolumeId(),
		StagingTargetPath: staging, VolumeCapability: v.capability, VolumeContext: v.volume.GetVolumeContext(), Secrets: secrets})
	return err
}

// zfsWithKey runs zfs with key on its stdin, as the driver does.
func zfsWithKey(t *testing.T, key string, args ...string) (stdout, stderr string, exitCode int) {
	t.Helper()
	cmd := exec.Command("zfs", args...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(key+"\n"), &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("zfs %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// reboot does to encryption roots what a reboot does: nothing is mounted
// (the volumes were unstaged) and the keys are unloaded. udev may still
// hold a zvol open for a moment after it appeared, so unload-key is retried.
func reboot(t *testing.T, roots ...string) {
	t.Helper()
	for _, root := range roots {
		eventually(t, 30*time.Second, func() string {
			if zfsGet(t, "keystatus", root) == "unavailable" {
				return ""
			}
			return run(t, "zfs", "unload-key", root)
		})
	}
}

// After a reboot, ZFS loads a clone's key only at its encryption root, its
// origin: `zfs load-key` of the clone itself is refused. Staging a restore,
// a clone of a volume, a raw block restore and a restore whose origin
// volume was deleted (kept for it) must load the key there from the
// node-stage secrets; secrets given for a loaded key are checked with
// `zfs load-key -n`. The zfs answers the driver relies on are checked here
// too, as zfstest.Fake plays them.
//
// long: one scenario on real ZFS whose steps build on the volumes before them
func TestEncryptedRestoresStageAfterAReboot(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	stopWatching := watchArgv(t, e2ePassphrase, e2eHexKey)
	withPassphrase := map[string]string{"encryptionPassphrase": e2ePassphrase}
	withHexKey := map[string]string{"encryptionKey": e2eHexKey}
	wrong := map[string]string{"encryptionPassphrase": "a-wrong-passphrase"}
	snapshotOf := func(name string, v *nodeVolume) *csi.VolumeContentSource {
		snapshot := d.createSnapshot(name, v.volume.GetVolumeId())
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot.GetSnapshotId()}}}
	}
	filled := func(v *nodeVolume) string { // stage with the key loaded (no secrets needed), write, tear down
		d.stage(v)
		d.publish(v, false)
		sum := writeData(t, v)
		d.unpublish(v)
		d.unstage(v)
		return sum
	}

	origin := d.encryptedNodeVolume("enc-origin", mountCap(""), nil, withPassphrase)
	originSum := filled(origin)
	blockOrigin := d.encryptedNodeVolume("enc-block", blockCap(), nil, withHexKey)
	blockSum := filled(blockOrigin)
	gone := d.encryptedNodeVolume("enc-gone", mountCap(""), nil, withPassphrase)
	goneSum := filled(gone)

	restore := d.encryptedNodeVolume("enc-restore", mountCap(""), snapshotOf("enc-snap", origin), nil)
	clone := d.encryptedNodeVolume("enc-clone", mountCap(""), &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: origin.volume.GetVolumeId()}}}, nil)
	blockRestore := d.encryptedNodeVolume("enc-block-restore", blockCap(), snapshotOf("enc-block-snap", blockOrigin), nil)
	goneSnapshot := snapshotOf("enc-gone-snap", gone)
	held := d.encryptedNodeVolume("enc-held", mountCap(""), goneSnapshot, nil)
	// Snapshot and volume deleted: what is left of them only the restore holds.
	if _, err := d.controller.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: goneSnapshot.GetSnapshot().GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: gone.volume.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	originRoot, blockRoot, goneRoot := datasetOf(t, origin.volume.GetVolumeId()), datasetOf(t, blockOrigin.volume.GetVolumeId()),
		datasetOf(t, gone.volume.GetVolumeId())
	if zfsGet(t, "zfs.csi.dev:deleted", goneRoot) != "true" {
		t.Fatalf("%s is not kept, marked deleted, for its restore", goneRoot)
	}
	for _, shared := range []struct {
		root   string
		clones []*nodeVolume
	}{{originRoot, []*nodeVolume{restore, clone}}, {blockRoot, []*nodeVolume{blockRestore}}, {goneRoot, []*nodeVolume{held}}} {
		for _, v := range shared.clones {
			if got := zfsGet(t, "encryptionroot", datasetOf(t, v.volume.GetVolumeId())); got != shared.root {
				t.Fatalf("the encryption root of %s is %s, want %s", v.volume.GetVolumeId(), got, shared.root)
			}
		}
	}

	reboot(t, originRoot, blockRoot, goneRoot)
	restoreDataset := datasetOf(t, restore.volume.GetVolumeId())
	// What OpenZFS 2.3 answers (lib/libzfs/libzfs_crypto.c): load-key only
	// at the root, exit 255; -n checks a key, loaded or not, loading nothing.
	_, stderr, code := zfsWithKey(t, e2ePassphrase, "load-key", restoreDataset)
	if want := "Key load error: Keys must be loaded for encryption root of '" + restoreDataset + "' (" + originRoot + ").\n"; stderr != want || code != 255 {
		t.Errorf("zfs load-key of a restore: exit %d, stderr %q; want 255, %q", code, stderr, want)
	}
	_, stderr, code = zfsWithKey(t, "a-wrong-passphrase", "load-key", "-n", originRoot)
	if !strings.Contains(stderr, "Incorrect key provided for '"+originRoot+"'") || code != 255 {
		t.Errorf("zfs load-key -n with a wrong key: exit %d, stderr %q", code, stderr)
	}
	stdout, stderr, code := zfsWithKey(t, e2ePassphrase, "load-key", "-n", originRoot)
	if stdout != "1 / 1 key(s) successfully verified\n" || stderr != "" || code != 0 || zfsGet(t, "keystatus", originRoot) != "unavailable" {
		t.Errorf("zfs load-key -n with the key: exit %d, stdout %q, stderr %q, keystatus %s", code, stdout, stderr, zfsGet(t, "keystatus", originRoot))
	}

	// The restore: no key, a wrong one, then its own.
	err := d.stageWith(restore, restore.staging, nil)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "zfs load-key "+originRoot) {
		t.Fatalf("staging the restore without secrets: got %v, want FailedPrecondition naming zfs load-key %s", err, originRoot)
	}
	if err := d.stageWith(restore, restore.staging, wrong); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("staging the restore with a wrong key: got %v, want InvalidArgument", err)
	}
	if zfsGet(t, "keystatus", originRoot) != "unavailable" || mountLine(t, restore.staging) != "" {
		t.Fatalf("a wrong key changed something")
	}
	if err := d.stageWith(restore, restore.staging, withPassphrase); err != nil {
		t.Fatalf("staging the restore after a reboot: %v", err)
	}
	d.publish(restore, false)
	if got := readData(t, restore); got != originSum {
		t.Errorf("the restore reads %s, its snapshot held %s", got, originSum)
	}

	// The key is loaded now: secrets given are still checked, from any
	// staging path (a second volume specification with the same ID).
	stdout, _, code = zfsWithKey(t, e2ePassphrase, "load-key", "-n", originRoot)
	if stdout != "1 / 1 key(s) successfully verified\n" || code != 0 {
		t.Errorf("zfs load-key -n of a loaded key: exit %d, stdout %q", code, stdout)
	}
	elsewhere := filepath.Join(t.TempDir(), "staging")
	mustRun(t, "mkdir", elsewhere)
	if err := d.stageWith(clone, elsewhere, wrong); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "does not open it") {
		t.Errorf("staging with a wrong key while the key is loaded: got %v, want InvalidArgument", err)
	}
	if line := mountLine(t, elsewhere); line != "" {
		t.Errorf("a wrong key got the volume mounted: %s", line)
	}
	d.unpublish(restore)
	d.unstage(restore)

	// The clone of a volume after a second reboot, then the raw block
	// restore (its device appears only once the root's key is loaded) and
	// the restore whose origin volume is deleted.
	reboot(t, originRoot)
	for _, staged := range []struct {
		v       *nodeVolume
		secrets map[string]string
		sum     string
	}{{clone, withPassphrase, originSum}, {blockRestore, withHexKey, blockSum}, {held, withPassphrase, goneSum}} {
		if err := d.stageWith(staged.v, staged.v.staging, staged.secrets); err != nil {
			t.Fatalf("staging %s after a reboot: %v", staged.v.volume.GetVolumeId(), err)
		}
		d.publish(staged.v, false)
		if got := readData(t, staged.v); got != staged.sum {
			t.Errorf("%s reads %s, want %s", staged.v.volume.GetVolumeId(), got, staged.sum)
		}
	}

	seen, _ := stopWatching()
	if seen != "" {
		t.Errorf("a key was in a process's argv: %s", seen)
	}
	logged, _ := os.ReadFile(d.logPath)
	for _, needle := range []string{e2ePassphrase, e2eHexKey, "a-wrong-passphrase"} {
		if strings.Contains(string(logged), needle) {
			t.Errorf("the driver's log holds a key")
		}
	}
}
