package nodetest

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// kernelPath is path as the kernel resolves it and shows it in the mount
// table: every symbolic link followed, the last one only when followLast
// (mount(2) follows it, umount2 with UMOUNT_NOFOLLOW does not). A path that
// does not resolve is left as it is.
func kernelPath(path string, followLast bool) string {
	path = filepath.Clean(path)
	if followLast {
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			return resolved
		}
		return path
	}
	if parent, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(parent, filepath.Base(path))
	}
	return path
}

// withoutLinks refuses a path with a symbolic link anywhere along it
// (ELOOP), as the real mounter does: it opens every path it mounts on, binds
// from or unmounts with openat2(RESOLVE_NO_SYMLINKS).
func withoutLinks(op, path string) error {
	clean := filepath.Clean(path)
	for prefix := clean; prefix != "/" && prefix != "."; prefix = filepath.Dir(prefix) {
		if info, err := os.Lstat(prefix); err == nil && info.Mode()&os.ModeSymlink != 0 {
			return &os.PathError{Op: op, Path: path, Err: unix.ELOOP}
		}
	}
	return nil
}

func checkDir(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return &os.PathError{Op: "mount", Path: path, Err: unix.ENOTDIR}
	}
	return nil
}
