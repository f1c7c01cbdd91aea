package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/rules"
)

// hostDir makes a directory outside the node's path roots holding a file,
// as /srv/app/cron.d is on a host: what a hostile caller aims at.
func (h *harness) hostDir() string {
	h.t.Helper()
	dir := filepath.Join(h.t.TempDir(), "cron.d")
	if err := os.Mkdir(dir, 0o750); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "job"), []byte("* * * * * root true\n"), 0o600); err != nil {
		h.t.Fatal(err)
	}
	return dir
}

// wantHostDirIntact fails the test when dir lost its file or gained
// anything, or when anything is mounted.
func (h *harness) wantHostDirIntact(dir string) {
	h.t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "job" {
		h.t.Errorf("the host directory %s changed: %v %v", dir, entries, err)
	}
	if mounts := h.mountPoints(); len(mounts) != 0 {
		h.t.Errorf("mounted %v", mounts)
	}
}

func TestPathsOutsideTheRootsAreRefused(t *testing.T) {
	for _, fsType := range []string{"zfs", "ext4", "block"} {
		t.Run("a "+fsType+" volume is not staged at a host directory outside the roots, nor below one", func(t *testing.T) {
			h := newHarness(t)
			outside := h.hostDir()
			v := h.volume("vol", fsType)
			for _, staging := range []string{outside, filepath.Join(outside, "new", "staging"), filepath.Join(h.dir, "..", filepath.Base(h.dir)+"x")} {
				v.staging = staging
				wantCode(t, h.stage(v), codes.InvalidArgument)
			}
			h.wantHostDirIntact(outside)
		})
	}
	t.Run("a root itself is no staging or target path", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		v.staging = h.dir
		wantCode(t, h.stage(v), codes.InvalidArgument)
		v = h.volume("other", "zfs")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		v.target = h.dir + "/"
		wantCode(t, h.publish(v, false), codes.InvalidArgument)
	})
	t.Run("a publish onto a host directory outside the roots is refused, and so is its teardown", func(t *testing.T) {
		h := newHarness(t)
		outside := h.hostDir()
		v := h.volume("vol", "zfs")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		v.target = outside
		wantCode(t, h.publish(v, false), codes.InvalidArgument)
		wantCode(t, h.unpublish(v), codes.InvalidArgument)
		if h.mountAt(outside) != nil {
			t.Errorf("mounted over %s", outside)
		}
		v.staging = outside
		wantCode(t, h.unstage(v), codes.InvalidArgument)
	})
	t.Run("a root named by the operator serves as the defaults do", func(t *testing.T) {
		h := newHarness(t)
		extra := t.TempDir()
		h.allowPaths("/var/lib/kubelet-that-is-not-here", extra)
		v := h.volume("vol", "zfs")
		v.staging, v.target = filepath.Join(extra, "staging"), filepath.Join(extra, "target")
		h.mustStageAndPublish(v)
		if h.mountAt(v.target) == nil {
			t.Errorf("not published at %s: %v", v.target, h.mountPoints())
		}
	})
}

func TestALinkBelowARootIsNotFollowed(t *testing.T) {
	for _, fsType := range []string{"zfs", "block"} {
		t.Run("a "+fsType+" volume: a staging or target path through a link to a host directory is FAILED_PRECONDITION, nothing made there", func(t *testing.T) {
			h := newHarness(t)
			outside := h.hostDir()
			link := filepath.Join(h.dir, "pods")
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			v := h.volume("vol", fsType)
			staging := v.staging
			v.staging = filepath.Join(link, "staging")
			wantCode(t, h.stage(v), codes.FailedPrecondition)
			v.staging = staging
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			v.target = filepath.Join(link, "target")
			wantCode(t, h.publish(v, false), codes.FailedPrecondition)
			wantCode(t, h.unpublish(v), codes.FailedPrecondition)
			if err := h.unstage(v); err != nil {
				t.Fatal(err)
			}
			h.wantHostDirIntact(outside)
		})
	}
}

// long: subtests on one shared fixture, one behaviour each
func TestTeardownRemovesOnlyWhatTheDriverMade(t *testing.T) {
	ids := map[string]func(v *testVolume) string{
		"an unknown volume":       func(v *testVolume) string { return rules.VolumeID(testNode, "tank/csi/nothing-here") },
		"another node's volume":   func(v *testVolume) string { return rules.VolumeID("node-2", v.dataset) },
		"a volume of this node's": func(v *testVolume) string { return v.id },
	}
	for name, id := range ids {
		for _, content := range []string{"data", ""} {
			t.Run("unpublishing "+name+" from a host file with "+map[bool]string{true: "nothing", false: "data"}[content == ""]+" in it leaves the file", func(t *testing.T) {
				h := newHarness(t)
				v := h.volume("vol", "block")
				if err := os.WriteFile(v.target, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				_, err := h.server.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id(v), TargetPath: v.target})
				if got, readErr := os.ReadFile(v.target); readErr != nil || string(got) != content {
					t.Errorf("unpublish answered %v and the file holds %q (%v), want %q", err, got, readErr, content)
				}
			})
		}
	}
	t.Run("unstaging a block volume leaves a file it did not bind in the staging directory", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "block")
		file := filepath.Join(v.staging, node.BlockStagingFile)
		if err := os.WriteFile(file, []byte("the CO's"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := h.unstage(v); err != nil {
			t.Fatal(err)
		}
		if !exists(file) {
			t.Error("a file the driver never bound onto was deleted")
		}
	})
	t.Run("a block publish onto a file with data in it is refused and the file kept", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "block")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(v.target, []byte("host data"), 0o600); err != nil {
			t.Fatal(err)
		}
		wantCode(t, h.publish(v, false), codes.FailedPrecondition)
		if h.mountAt(v.target) != nil {
			t.Errorf("bound over the file: %v", h.mountPoints())
		}
		if got, _ := os.ReadFile(v.target); string(got) != "host data" {
			t.Errorf("the file holds %q", got)
		}
	})
	t.Run("a publish onto a directory with files in it is refused and the files kept", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(v.target, "data"), 0o750); err != nil {
			t.Fatal(err)
		}
		wantCode(t, h.publish(v, false), codes.FailedPrecondition)
		if h.mountAt(v.target) != nil || !exists(filepath.Join(v.target, "data")) {
			t.Errorf("mounted %v, files kept %v", h.mountPoints(), exists(filepath.Join(v.target, "data")))
		}
	})
	t.Run("an empty directory the CO made is published on and removed with the mount", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		if err := os.Mkdir(v.target, 0o750); err != nil {
			t.Fatal(err)
		}
		h.mustStageAndPublish(v)
		if err := h.unpublish(v); err != nil {
			t.Fatal(err)
		}
		if exists(v.target) {
			t.Error("the target stayed after its mount went")
		}
	})
	t.Run("a publish that fails removes the mount point it made", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		v.capability = mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "noexec")
		h.host.FailNextRemount()
		if err := h.publish(v, false); err == nil {
			t.Fatal("the publish succeeded although its remount failed")
		}
		if exists(v.target) || h.mountAt(v.target) != nil {
			t.Errorf("the failed publish left its target (mounts %v)", h.mountPoints())
		}
	})
}

// unstageWithAWorkloadsLink stages a filesystem volume, makes a link named
// like the driver's block staging file in the volume's root (a workload's
// own file), and unstages it, which must succeed.
func (h *harness) unstageWithAWorkloadsLink(v *testVolume) {
	h.t.Helper()
	if err := h.stage(v); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(v.staging, node.BlockStagingFile)); err != nil {
		h.t.Fatal(err)
	}
	if err := h.unstage(v); err != nil {
		h.t.Fatalf("unstage: %v", err)
	}
}

func TestAWorkloadCannotWedgeUnstage(t *testing.T) {
	t.Run("a link named zvol in a staged filesystem does not stop its unstage", func(t *testing.T) {
		h := newHarness(t)
		// The fake mounts nothing on the directory, so the staging directory
		// stands for the volume's root: what the workload's link is in.
		h.unstageWithAWorkloadsLink(h.volume("vol", "ext4"))
		if mounts := h.mountPoints(); len(mounts) != 0 {
			t.Errorf("still mounted: %v", mounts)
		}
	})
}

func TestARootInsideAnotherIsResolvedAsNamed(t *testing.T) {
	h := newHarness(t)
	link := h.symlinkedDir() // h.dir/kubelet -> h.dir/data, a root
	h.allowPaths(h.dir, link)
	v := h.volume("vol", "zfs")
	v.staging, v.target = filepath.Join(link, "staging"), filepath.Join(link, "target")
	if err := os.MkdirAll(v.staging, 0o750); err != nil {
		t.Fatal(err)
	}
	h.mustStageAndPublish(v)
	if h.mountAt(filepath.Join(h.dir, "data", "target")) == nil {
		t.Errorf("not published through the inner root: %v", h.mountPoints())
	}
}

// plantFile writes a file into dir, as another workload's or the host's.
func plantFile(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("not the volume's"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func wantPlanted(t *testing.T, path string) {
	t.Helper()
	if got, err := os.ReadFile(path); err != nil || string(got) != "not the volume's" {
		t.Errorf("the planted file %s holds %q (%v)", path, got, err)
	}
}

func TestStageOnlyIntoAnEmptyDirectory(t *testing.T) {
	for _, fsType := range []string{"zfs", "ext4", "block"} {
		t.Run("a "+fsType+" volume is not staged in a directory holding another's files, which stay", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			planted := plantFile(t, v.staging, "job.log")
			err := h.stage(v)
			wantCode(t, err, codes.FailedPrecondition)
			if !strings.Contains(status.Convert(err).Message(), v.staging) {
				t.Errorf("the refusal %q does not name the staging path", status.Convert(err).Message())
			}
			if mounts := h.mountPoints(); len(mounts) != 0 {
				t.Errorf("mounted %v", mounts)
			}
			wantPlanted(t, planted)
		})
		t.Run("a "+fsType+" volume staged already answers OK again, whatever it holds now", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			// The fake mounts nothing on the directory: what is written
			// there stands for the volume's own files.
			plantFile(t, v.staging, "data")
			if err := h.stage(v); err != nil {
				t.Fatalf("the retry: %v", err)
			}
			if mounts := h.mountPoints(); len(mounts) != 1 {
				t.Errorf("mounts after the retry: %v", mounts)
			}
		})
	}
	t.Run("a block stage cut off before its bind, leaving the empty file, is staged again", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "block")
		if err := os.WriteFile(filepath.Join(v.staging, node.BlockStagingFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
	})
}

func TestUnpublishRemovesOnlyAnEmptyMountPoint(t *testing.T) {
	for _, fsType := range []string{"zfs", "block"} {
		t.Run("a "+fsType+" target with a file planted under the mount survives unpublish, with the file", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			h.mustStageAndPublish(v)
			// The fake mounts nothing on the target: what is written there
			// lies under the mount, in the directory or file it is on.
			planted := v.target
			if fsType == "block" {
				if err := os.WriteFile(v.target, []byte("not the volume's"), 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				planted = plantFile(t, v.target, "job.log")
			}
			wantCode(t, h.unpublish(v), codes.FailedPrecondition)
			if h.mountAt(v.target) != nil {
				t.Errorf("still published: %v", h.mountPoints())
			}
			wantPlanted(t, planted)
		})
	}
}
