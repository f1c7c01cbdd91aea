package node_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/node"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// These tests run the node service on the real kernel: real mount(2) and
// umount2, the real /proc/self/mountinfo, the kernel's own resolution of
// symbolic links. Each runs in a private mount namespace (the test binary
// re-executed under unshare), so nothing it mounts reaches the host, and all
// of it goes when the process ends. They need root and are skipped without.

// mountNamespaceEnv names the test a re-executed binary runs in its private
// mount namespace.
const mountNamespaceEnv = "ZFS_CSI_TEST_IN_MOUNT_NAMESPACE"

// inPrivateMountNamespace reports whether the test runs in its private mount
// namespace. Called outside one, it re-executes the test binary for this
// test in a new one, reports its outcome and returns false: the caller
// returns at once.
func inPrivateMountNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(mountNamespaceEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		skipOnlyIfAsked(t, "real-kernel mount tests need root (they mount tmpfs and bind mounts in a private mount namespace); run go test as root")
	}
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "true").CombinedOutput(); err != nil {
		skipOnlyIfAsked(t, fmt.Sprintf("cannot make a private mount namespace with unshare (%v: %s)", err, bytes.TrimSpace(out)))
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private",
		os.Args[0], "-test.run", "^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), mountNamespaceEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("in a private mount namespace: %v\n%s", err, out)
	}
	return false
}

// skipNeedsEnv is the environment switch that lets the tests that need root
// and a private mount namespace skip where they cannot run; without it they
// fail, so a run that could not test the kernel never passes for one that did
// (TopoLVM's RequireRoot is the model).
const skipNeedsEnv = "ZFS_CSI_TEST_SKIP_PRIVILEGED"

// skipOnlyIfAsked skips the test when skipNeedsEnv=1, and fails it otherwise.
func skipOnlyIfAsked(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(skipNeedsEnv) == "1" {
		t.Skip("skipped (" + skipNeedsEnv + "=1): " + why)
	}
	t.Fatal(why + "; set " + skipNeedsEnv + "=1 to skip the real-kernel tests instead")
}

// tmpfsDatasets is the real mounter with one change: there is no ZFS on the
// development hosts, so a dataset is mounted as a tmpfs named after it and
// listed as zfs. Everything else is the kernel's.
type tmpfsDatasets struct{ node.Mounter }

func (m tmpfsDatasets) Mount(source, target, fsType string, flags, data []string) error {
	if fsType == "zfs" {
		fsType = "tmpfs"
	}
	return m.Mounter.Mount(source, target, fsType, flags, data)
}

func (m tmpfsDatasets) Mounts() ([]node.MountInfo, error) {
	mounts, err := m.Mounter.Mounts()
	for i := range mounts {
		if mounts[i].FSType == "tmpfs" && strings.HasPrefix(mounts[i].Source, "tank/") {
			mounts[i].FSType = "zfs"
		}
	}
	return mounts, err
}

// newKernelHarness is the harness with the real mounter. Whatever a test
// leaves mounted under its directory is detached before the directory is
// removed.
func newKernelHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	h.mounter = tmpfsDatasets{node.NewMounter(zerolog.Nop())}
	h.server = node.New(h.cfg, h.zfs, h.mounter, zerolog.Nop(), h.opts)
	t.Cleanup(func() {
		for _, path := range h.kernelMountPoints() {
			_ = unix.Unmount(path, unix.MNT_DETACH)
		}
	})
	return h
}

// kernelMounts are the mounts under the test's directory, as the kernel
// lists them.
func (h *harness) kernelMounts() []node.MountInfo {
	h.t.Helper()
	return kernelMountsBelow(h.t, h.dir)
}

// kernelMountsBelow are the kernel's mounts at or below dir.
func kernelMountsBelow(t *testing.T, dir string) []node.MountInfo {
	t.Helper()
	mounts, err := node.NewMounter(zerolog.Nop()).Mounts()
	if err != nil {
		t.Fatalf("reading the mount table: %v", err)
	}
	var below []node.MountInfo
	for _, mount := range mounts {
		if mount.MountPoint == dir || strings.HasPrefix(mount.MountPoint, dir+"/") {
			below = append(below, mount)
		}
	}
	return below
}

func (h *harness) kernelMountPoints() []string {
	var paths []string
	for _, mount := range slices.Backward(h.kernelMounts()) {
		paths = append(paths, mount.MountPoint)
	}
	return paths
}

func TestKernelVolumesUnderASymlinkedCODirectory(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	link := h.symlinkedDir()
	v := h.volume("vol", "zfs")
	v.staging, v.target = filepath.Join(link, "vol", "staging"), filepath.Join(link, "vol", "target")
	if err := os.MkdirAll(v.staging, 0o750); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.mustStageAndPublish(v)
	}
	if paths := h.kernelMountPoints(); len(paths) != 2 {
		t.Fatalf("after three stages and publishes the kernel lists %d mounts, want 2: %q", len(paths), paths)
	}
	if err := h.unpublish(v); err != nil {
		t.Fatal(err)
	}
	if err := h.unstage(v); err != nil {
		t.Fatal(err)
	}
	if paths := h.kernelMountPoints(); len(paths) != 0 || exists(v.target) {
		t.Errorf("teardown left %q mounted, target kept: %v", paths, exists(v.target))
	}
}

func TestKernelSymlinkAtTheTargetIsNotFollowed(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	v := h.volume("vol", "zfs")
	if err := h.stage(v); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(h.dir, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, v.target); err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.publish(v, false), codes.FailedPrecondition)
	wantCode(t, h.unpublish(v), codes.FailedPrecondition)
	if paths := h.kernelMountPoints(); len(paths) != 1 || !exists(v.target) {
		t.Errorf("the kernel lists %q mounted (want only the staging mount), the link kept: %v", paths, exists(v.target))
	}
}

func TestKernelOddMountsDoNotBreakTheNode(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	odd := map[string]string{ // mount point → source
		filepath.Join(h.dir, "empty-source"):   "",
		filepath.Join(h.dir, "with space"):     "source with space",
		filepath.Join(h.dir, "new\nline"):      "none",
		filepath.Join(h.dir, `back\slash	tab`): "none",
	}
	for path, source := range odd {
		if err := os.Mkdir(path, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(source, path, "tmpfs", 0, ""); err != nil {
			t.Fatalf("mount tmpfs %q on %q: %v", source, path, err)
		}
	}
	found := map[string]string{}
	for _, mount := range h.kernelMounts() {
		found[mount.MountPoint] = mount.Source
	}
	for path, source := range odd {
		if got, ok := found[path]; !ok || got != source {
			t.Errorf("the mount table lists %q from %q (listed: %v), want source %q", path, got, ok, source)
		}
	}
	v := h.volume("vol", "zfs")
	h.mustStageAndPublish(v)
	if err := h.unpublish(v); err != nil {
		t.Fatal(err)
	}
	if err := h.unstage(v); err != nil {
		t.Fatal(err)
	}
}

func TestKernelStagingAndPublishMountsAreNosuidNodev(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	v := h.volume("vol", "zfs")
	h.mustStageAndPublish(v)
	for _, mount := range h.kernelMounts() {
		if !mount.HasOption("nosuid") || !mount.HasOption("nodev") {
			t.Errorf("%s is mounted %v, want nosuid and nodev", mount.MountPoint, mount.Options)
		}
	}
}

// TestKernelStatfsAgreesWithDf reads a filesystem's space and inodes with
// the real mounter and with df(1), which reads the same statfs(2) fields.
func TestKernelStatfsAgreesWithDf(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	dir := t.TempDir()
	if err := unix.Mount("none", dir, "tmpfs", 0, "size=64m,nr_inodes=4096"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(dir, "data"), bytes.Repeat([]byte{1}, 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	stats, err := node.NewMounter(zerolog.Nop()).Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	df := func(args ...string) string {
		out, err := exec.Command("df", append(args, dir)...).Output()
		if err != nil {
			t.Fatalf("df %v: %v", args, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return strings.Join(strings.Fields(lines[len(lines)-1]), " ")
	}
	got := fmt.Sprintf("%d %d %d", stats.TotalBytes, stats.UsedBytes, stats.AvailableBytes)
	if want := df("-B1", "--output=size,used,avail"); got != want {
		t.Errorf("bytes total/used/available: %s, df says %s", got, want)
	}
	got = fmt.Sprintf("%d %d %d", stats.TotalInodes, stats.UsedInodes, stats.FreeInodes)
	if want := df("--output=itotal,iused,iavail"); got != want {
		t.Errorf("inodes total/used/free: %s, df says %s", got, want)
	}
}
