package node_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/node"
)

func TestKernelNothingIsMountedOutsideTheRoots(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	outside := h.hostDir()
	link := filepath.Join(h.dir, "pods")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	v := h.volume("vol", "zfs")
	v.staging = outside
	wantCode(t, h.stage(v), codes.InvalidArgument)
	v.staging = filepath.Join(link, "staging")
	wantCode(t, h.stage(v), codes.FailedPrecondition)
	if found := kernelMountsBelow(t, outside); len(found) != 0 {
		t.Errorf("the kernel lists %v mounted in the host directory", found)
	}
	h.wantHostDirIntact(outside)
}

func TestKernelTheMounterRefusesALinkSwappedInAfterTheCheck(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	outside := h.hostDir()
	mounter := node.NewMounter(zerolog.Nop())
	// What hostPath checked was a directory; by the time of the mount it is
	// a link to the host directory.
	swapped := filepath.Join(h.dir, "pods")
	if err := os.Symlink(outside, swapped); err != nil {
		t.Fatal(err)
	}
	source := filepath.Join(h.dir, "source")
	if err := os.Mkdir(source, 0o750); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"mount":         mounter.Mount("none", swapped, "tmpfs", nil, nil),
		"bind onto":     mounter.Bind(source, filepath.Join(swapped, "job")),
		"bind from":     mounter.Bind(filepath.Join(swapped, "job"), source),
		"remount":       mounter.RemountBind(swapped, []string{"ro"}),
		"mount through": mounter.Mount("none", filepath.Join(swapped, "."), "tmpfs", nil, nil),
	} {
		if err == nil {
			t.Errorf("%s through a link succeeded", name)
		}
	}
	if found := kernelMountsBelow(t, outside); len(found) != 0 {
		t.Errorf("the kernel lists %v mounted in the host directory", found)
	}
	// An unmount through a link leaves the mount it would reach.
	if err := unix.Mount("none", outside, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(outside, unix.MNT_DETACH)
	nested := filepath.Join(h.dir, "nested")
	if err := os.Symlink(filepath.Dir(outside), nested); err != nil {
		t.Fatal(err)
	}
	if err := mounter.Unmount(filepath.Join(nested, filepath.Base(outside))); err == nil {
		t.Error("an unmount through a link succeeded")
	}
	if found := kernelMountsBelow(t, outside); len(found) != 1 {
		t.Errorf("the host directory's own mount is gone: %v", found)
	}
}

func TestKernelALinkNamedZvolInAStagedVolumeDoesNotWedgeUnstage(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	v := h.volume("vol", "zfs")
	h.unstageWithAWorkloadsLink(v)
	if paths := h.kernelMountPoints(); len(paths) != 0 || exists(filepath.Join(v.staging, node.BlockStagingFile)) {
		t.Errorf("the kernel lists %q mounted; the link is seen in the host's staging directory: %v", paths,
			exists(filepath.Join(v.staging, node.BlockStagingFile)))
	}
}

func TestKernelNothingIsMountedThroughARootTurnedIntoALinkToTheHostRoot(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	outside := h.rootToHostRoot(h.pathRoot(filepath.Join(h.dir, "co"), 0o750))
	v := h.volume("vol", "zfs")
	v.staging = outside
	wantRootRefused(t, h.stage(v), "resolves to /")
	if found := kernelMountsBelow(t, outside); len(found) != 0 {
		t.Errorf("the kernel lists %v mounted outside the roots", found)
	}
}

func TestKernelStageOnlyIntoAnEmptyDirectory(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	v := h.volume("vol", "zfs")
	planted := plantFile(t, v.staging, "job.log")
	wantCode(t, h.stage(v), codes.FailedPrecondition)
	if paths := h.kernelMountPoints(); len(paths) != 0 {
		t.Errorf("the kernel lists %q mounted", paths)
	}
	wantPlanted(t, planted)
	if err := os.Remove(planted); err != nil {
		t.Fatal(err)
	}
	if err := h.stage(v); err != nil {
		t.Fatal(err)
	}
	plantFile(t, v.staging, "data") // in the volume now
	if err := h.stage(v); err != nil {
		t.Fatalf("the retry of a stage that succeeded: %v", err)
	}
	if paths := h.kernelMountPoints(); len(paths) != 1 {
		t.Errorf("the kernel lists %q mounted, want the one staging mount", paths)
	}
}

func TestKernelUnpublishLeavesAFilePlantedUnderTheMount(t *testing.T) {
	if !inPrivateMountNamespace(t) {
		return
	}
	h := newKernelHarness(t)
	v := h.volume("vol", "zfs")
	h.mustStageAndPublish(v)
	// A bind of the target's directory without the mounts in it reaches the
	// directory the volume is published on.
	under := filepath.Join(t.TempDir(), "under")
	if err := os.Mkdir(under, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(filepath.Dir(v.target), under, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(under, unix.MNT_DETACH)
	plantFile(t, filepath.Join(under, filepath.Base(v.target)), "job.log")
	wantCode(t, h.unpublish(v), codes.FailedPrecondition)
	if mount := node.MountAt(h.kernelMounts(), v.target); mount != nil {
		t.Errorf("still published: %q", h.kernelMountPoints())
	}
	wantPlanted(t, filepath.Join(v.target, "job.log"))
}
