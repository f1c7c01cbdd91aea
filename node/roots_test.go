package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/node"
)

// pathRoot makes the directory root below parent (made with parentMode when
// missing), makes it the node's only path root, and returns it.
func (h *harness) pathRoot(parent string, parentMode os.FileMode) string {
	h.t.Helper()
	if err := os.MkdirAll(parent, 0o750); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Chmod(parent, parentMode); err != nil {
		h.t.Fatal(err)
	}
	root := filepath.Join(parent, "root")
	if err := os.Mkdir(root, 0o750); err != nil {
		h.t.Fatal(err)
	}
	h.allowPaths(root)
	return root
}

// volumeBelow is a volume whose staging directory lies below dir.
func (h *harness) volumeBelow(dir, name, fsType string) *testVolume {
	h.t.Helper()
	v := h.volume(name, fsType)
	v.staging, v.target = filepath.Join(dir, name, "staging"), filepath.Join(dir, name, "target")
	if err := os.MkdirAll(v.staging, 0o750); err != nil {
		h.t.Fatal(err)
	}
	return v
}

// rootToHostRoot turns the path root into a link to /, as whoever can write
// the directory it lies in could, and returns an empty directory outside
// every root: where a stage through the link would mount.
func (h *harness) rootToHostRoot(root string) string {
	h.t.Helper()
	if err := os.Rename(root, root+".old"); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink("/", root); err != nil {
		h.t.Fatal(err)
	}
	outside := filepath.Join(h.t.TempDir(), "srv")
	if err := os.Mkdir(outside, 0o750); err != nil {
		h.t.Fatal(err)
	}
	return outside
}

// wantRootRefused fails the test unless err is FAILED_PRECONDITION naming
// the root's problem.
func wantRootRefused(t *testing.T, err error, problem string) {
	t.Helper()
	wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(status.Convert(err).Message(), problem) {
		t.Errorf("the refusal %q does not say the root %s", status.Convert(err).Message(), problem)
	}
}

func TestAPathRootThatConfinesNothingIsRefused(t *testing.T) {
	t.Run("a root that is a link to / is refused at start", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "kubelet")
		if err := os.Symlink("/", link); err != nil {
			t.Fatal(err)
		}
		if err := node.CheckPathRoots([]string{link}); err == nil || !strings.Contains(err.Error(), "resolves to /") {
			t.Errorf("CheckPathRoots answered %v for a root that is a link to /", err)
		}
	})
	t.Run("a relative root and / itself are refused at start", func(t *testing.T) {
		for _, root := range []string{"var/lib/kubelet", "/", "/var/.."} {
			if err := node.CheckPathRoots([]string{root}); err == nil {
				t.Errorf("CheckPathRoots accepted %q", root)
			}
		}
	})
	t.Run("a root that becomes a link to / after start serves no path, and nothing is mounted outside it", func(t *testing.T) {
		h := newHarness(t)
		root := h.pathRoot(filepath.Join(h.dir, "co"), 0o750)
		if err := h.stage(h.volumeBelow(root, "before", "zfs")); err != nil {
			t.Fatalf("the root served nothing before it changed: %v", err)
		}
		v := h.volume("vol", "zfs")
		v.staging = h.rootToHostRoot(root)
		wantRootRefused(t, h.stage(v), "resolves to /")
		if h.mountAt(v.staging) != nil {
			t.Errorf("mounted outside the roots: %v", h.mountPoints())
		}
	})
	for _, test := range []struct {
		how, problem string
		needsRoot    bool
		change       func(path string) error
	}{
		{"writable by its group", "writable by its group or by others", false, func(path string) error { return os.Chmod(path, 0o770) }},
		{"writable by others", "writable by its group or by others", false, func(path string) error { return os.Chmod(path, 0o757) }},
		{"owned by another user", "owned by user 4242", true, func(path string) error { return os.Chown(path, 4242, 4242) }},
	} {
		for _, which := range []string{"the root", "the directory above the root"} {
			t.Run(which+" "+test.how+" is refused at start and at every call", func(t *testing.T) {
				if test.needsRoot && os.Geteuid() != 0 {
					skipOnlyIfAsked(t, "giving a directory to another user needs root; run go test as root")
				}
				h := newHarness(t)
				root := h.pathRoot(filepath.Join(h.dir, "co"), 0o755)
				v := h.volumeBelow(root, "vol", "zfs")
				changed := root
				if which != "the root" {
					changed = filepath.Dir(root)
				}
				if err := test.change(changed); err != nil {
					t.Fatal(err)
				}
				if err := node.CheckPathRoots([]string{root}); err == nil || !strings.Contains(err.Error(), test.problem) {
					t.Errorf("CheckPathRoots answered %v", err)
				}
				wantRootRefused(t, h.stage(v), test.problem)
				if mounts := h.mountPoints(); len(mounts) != 0 {
					t.Errorf("mounted %v", mounts)
				}
			})
		}
	}
	t.Run("a root in a sticky directory writable by all, as /tmp is, serves", func(t *testing.T) {
		h := newHarness(t)
		root := h.pathRoot(filepath.Join(h.dir, "tmp"), 0o777|os.ModeSticky)
		if err := node.CheckPathRoots([]string{root}); err != nil {
			t.Fatal(err)
		}
		h.mustStageAndPublish(h.volumeBelow(root, "vol", "zfs"))
	})
}
