package node_test

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
)

// symlinkedDir makes a directory reached through a symbolic link, as a host
// with /var/lib/kubelet -> /data/kubelet has, makes the link the node's path
// root (as --kubelet-dir /var/lib/kubelet does), and returns it.
func (h *harness) symlinkedDir() string {
	h.t.Helper()
	real, link := filepath.Join(h.dir, "data"), filepath.Join(h.dir, "kubelet")
	if err := os.Mkdir(real, 0o750); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		h.t.Fatal(err)
	}
	h.allowPaths(link)
	return link
}

func TestVolumesUnderASymlinkedCODirectory(t *testing.T) {
	for _, fsType := range []string{"zfs", "ext4", "block"} {
		t.Run("a "+fsType+" volume is staged and published once however often asked, and torn down completely", func(t *testing.T) {
			h := newHarness(t)
			link := h.symlinkedDir()
			v := h.volume("vol", fsType)
			v.staging, v.target = filepath.Join(link, "vol", "staging"), filepath.Join(link, "vol", "target")
			if err := os.MkdirAll(v.staging, 0o750); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				h.mustStageAndPublish(v)
			}
			if got := len(h.host.MountTable()); got != 2 {
				t.Fatalf("%d mounts after three stages and publishes, want one staging and one target mount: %v", got, h.mountPoints())
			}
			if err := h.unpublish(v); err != nil {
				t.Fatal(err)
			}
			if err := h.unstage(v); err != nil {
				t.Fatal(err)
			}
			if len(h.host.MountTable()) != 0 || exists(v.target) {
				t.Errorf("teardown left mounts %v, target kept: %v", h.mountPoints(), exists(v.target))
			}
		})
	}
}

func TestASymlinkAtTheStagingOrTargetPathIsRefused(t *testing.T) {
	t.Run("a staging path that is a symlink is FAILED_PRECONDITION and nothing is mounted", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		elsewhere := filepath.Join(h.dir, "elsewhere")
		if err := os.Mkdir(elsewhere, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(v.staging); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, v.staging); err != nil {
			t.Fatal(err)
		}
		wantCode(t, h.stage(v), codes.FailedPrecondition)
		wantCode(t, h.unstage(v), codes.FailedPrecondition)
		if len(h.host.MountTable()) != 0 {
			t.Errorf("mounted %v", h.mountPoints())
		}
	})
	t.Run("a target path that is a symlink is FAILED_PRECONDITION: not followed on publish, not deleted on unpublish", func(t *testing.T) {
		h := newHarness(t)
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
		if h.mountAt(elsewhere) != nil || !exists(v.target) {
			t.Errorf("mounts %v, link kept: %v", h.mountPoints(), exists(v.target))
		}
	})
}
