package node

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

// DefaultPathRoots are the directories staging and target paths may lie
// under when the operator names none: kubelet's root directory and Nomad's
// client data directory, where the orchestrators keep their staging and
// per-workload mount points (ARCHITECTURE.md decision 13).
var DefaultPathRoots = []string{rules.DefaultKubeletDir, DefaultNomadDataDir}

// DefaultNomadDataDir is the Nomad client's default data_dir in its
// distribution packages.
const DefaultNomadDataDir = "/opt/nomad/data"

// hostPath turns a path from a request (a staging, target or volume path)
// into the path the kernel shows in the mount table, which is what every
// comparison with a mount point and every host operation then uses.
//
// Whoever reaches the socket is untrusted with host paths: the path must lie
// strictly below one of the configured roots (Options.PathRoots), or the
// call is refused before anything is mounted, created or removed. A root
// is the operator's and may be reached through a symbolic link (hosts often
// have /var/lib/kubelet -> /data/kubelet, and the kernel shows mount points
// with the link resolved); below the root nothing is followed: a symbolic
// link anywhere there is FAILED_PRECONDITION rather than INVALID_ARGUMENT,
// since the request is well formed, the host holds the wrong thing, and only
// its operator can remove it. The path this returns holds no symbolic link,
// and every operation on it opens it again refusing links (openBeneath), so
// a link swapped in after this check fails the operation instead of
// redirecting it.
//
// A path whose parent does not exist holds no mounts below it: it is used
// as given (below the resolved root), which unpublish and unstage answer OK.
func (s *Server) hostPath(field, path string) (string, error) {
	clean := filepath.Clean(path)
	if !filepath.IsAbs(clean) {
		return "", invalid("%s %q is not an absolute path", field, path)
	}
	root, rest, ok, err := s.underRoot(clean)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", invalid("%s %s is outside the directories this node serves (%s): the orchestrators' own "+
			"directories, and those the operator adds with --allow-paths (ZFS_CSI_ALLOW_PATHS)", field, clean, strings.Join(s.opts.PathRoots, ", "))
	}
	kernel := filepath.Join(root, rest)
	fd, err := openBeneath(filepath.Dir(kernel), unix.O_PATH|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.ENOENT):
		return kernel, nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return "", status.Errorf(codes.FailedPrecondition, "%s %s passes through a symbolic link or a file below %s; the driver "+
			"does not follow links there (it would mount onto, or delete, something other than the path named): remove it", field, clean, root)
	case err != nil:
		return "", err
	}
	defer unix.Close(fd)
	var stat unix.Stat_t
	err = unix.Fstatat(fd, filepath.Base(kernel), &stat, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && stat.Mode&unix.S_IFMT == unix.S_IFLNK {
		return "", status.Errorf(codes.FailedPrecondition, "%s %s is a symbolic link; the driver does not follow it "+
			"(it would mount onto, or delete, something other than the path named): remove it", field, clean)
	}
	return kernel, nil
}

// underRoot finds the configured root a clean absolute path lies strictly
// below, as spelled in the configuration or with its links resolved, and
// returns the resolved root and the rest of the path. Of roots inside one
// another the innermost one counts: a root reached through a link (kubelet's
// directory, /var/lib/kubelet -> /data/kubelet) inside another root is
// resolved as the operator named it, not refused as a link below the outer.
// The root found is checked again at every call (rootProblem), since what
// confined paths at start may since have become a link to / or been opened
// to other users: a root that no longer confines anything is
// FAILED_PRECONDITION, the operator's to fix.
func (s *Server) underRoot(clean string) (root, rest string, ok bool, err error) {
	longest, found := 0, ""
	for _, configured := range s.opts.PathRoots {
		resolved, resolveErr := filepath.EvalSymlinks(configured)
		if resolveErr != nil || !filepath.IsAbs(configured) {
			continue // a root that does not exist holds nothing
		}
		for _, spelling := range []string{configured, resolved} {
			prefix := strings.TrimSuffix(spelling, "/") + "/"
			if after, match := strings.CutPrefix(clean, prefix); match && after != "" && len(prefix) > longest {
				root, rest, ok, longest, found = resolved, after, true, len(prefix), configured
			}
		}
	}
	if !ok {
		return "", "", false, nil
	}
	if problem := rootProblem(found); problem != "" {
		return "", "", false, status.Errorf(codes.FailedPrecondition, "%s: the path root %s %s; the driver touches "+
			"nothing below it until the operator fixes that", clean, found, problem)
	}
	return root, rest, true, nil
}

// CheckPathRoots checks the configured roots at start (rootProblem): a root
// that does not exist yet is no problem, it holds nothing until it does.
func CheckPathRoots(roots []string) error {
	for _, root := range roots {
		if problem := rootProblem(root); problem != "" {
			return fmt.Errorf("path root %q %s", root, problem)
		}
	}
	return nil
}

// rootProblem says why a configured root would not confine the paths below
// it, or is "" (also when it does not exist). A root must be absolute and must not resolve to the host's root directory.
// Nobody but root (or the daemon's own user, an unprivileged daemon's as in
// tests) may be able to move or replace an entry in the root or in any
// directory above it, as the root resolves and where its configured name
// lies: such a user could turn the root into a link to / (or to /etc) after
// this check, or swap what lies below it. So each of those directories must
// be owned by root or the daemon's user, and not writable by its group or by
// others unless it is sticky (as /tmp is: others may add names to it, but
// not move or remove what root made there; below a root the driver follows
// no link and stages only onto an empty directory).
func rootProblem(configured string) string {
	if !filepath.IsAbs(configured) {
		return "is not an absolute path"
	}
	resolved, err := filepath.EvalSymlinks(configured)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		return fmt.Sprintf("cannot be resolved: %v", err)
	}
	if resolved == "/" {
		return "resolves to /, which confines nothing"
	}
	holder, err := filepath.EvalSymlinks(filepath.Dir(filepath.Clean(configured)))
	if err != nil {
		return fmt.Sprintf("cannot be resolved: %v", err)
	}
	starts := []string{resolved}
	if holder != filepath.Dir(resolved) {
		starts = append(starts, holder) // the directory the configured link lies in
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			if problem := dirProblem(dir, dir == resolved); problem != "" {
				return problem
			}
			if dir == "/" {
				break
			}
		}
	}
	return ""
}

// dirProblem checks one directory of rootProblem's: owned by root or the
// daemon's user, and not writable by group or others unless sticky.
func dirProblem(dir string, isRoot bool) string {
	var stat unix.Stat_t
	if err := unix.Lstat(dir, &stat); err != nil {
		return fmt.Sprintf("cannot be checked: %v", err)
	}
	what := "lies in " + dir + ", which"
	if isRoot {
		what = "resolves to " + dir + ", which"
	}
	switch {
	case stat.Mode&unix.S_IFMT != unix.S_IFDIR:
		return what + " is not a directory"
	case stat.Uid != 0 && int(stat.Uid) != os.Geteuid():
		return fmt.Sprintf("%s is owned by user %d: only root (or the daemon's own user) may own a path root and the directories above it", what, stat.Uid)
	case stat.Mode&0o022 != 0 && stat.Mode&unix.S_ISVTX == 0:
		return fmt.Sprintf("%s is writable by its group or by others (mode %04o): they could replace the root or what lies below it",
			what, stat.Mode&0o7777)
	}
	return ""
}

// openBeneath opens path (absolute, as hostPath returns it) without
// following a symbolic link anywhere along it: openat2 with
// RESOLVE_NO_SYMLINKS, or on kernels before 5.6 a walk that opens one
// component at a time with O_NOFOLLOW. flags are open(2) flags; O_CLOEXEC
// is added.
func openBeneath(path string, flags int) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if !errors.Is(err, unix.ENOSYS) {
		return fd, err
	}
	return openByComponents(path, flags)
}

// openByComponents is openBeneath without openat2: each directory is opened
// from the one before (openChild), so a link is met as what it is.
func openByComponents(path string, flags int) (int, error) {
	dir, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	components := strings.Split(strings.Trim(filepath.Clean(path), "/"), "/")
	for i, component := range components {
		openFlags := unix.O_PATH
		if i == len(components)-1 {
			openFlags = flags
		}
		next, err := openChild(dir, component, openFlags)
		unix.Close(dir)
		if err != nil {
			return -1, err
		}
		dir = next
	}
	return dir, nil
}

// openChild opens the entry name of the directory dir without following it
// if it is a link (ELOOP then): one component, so nothing else along the way
// can be one.
func openChild(dir int, name string, flags int) (int, error) {
	fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var stat unix.Stat_t
	if err := unix.Fstat(fd, &stat); err != nil || stat.Mode&unix.S_IFMT == unix.S_IFLNK {
		unix.Close(fd)
		return -1, errors.Join(err, unix.ELOOP)
	}
	return fd, nil
}

// procPath names an open file descriptor as a path the kernel resolves to
// that very file: what mount(2) is given, so the mount lands on what was
// opened, whatever happens to the path meanwhile.
func procPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// inParent runs fn with the parent directory of path opened without
// following links, and the last component of path.
func inParent(path string, fn func(parent int, name string) error) error {
	parent, err := openBeneath(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(parent)
	return fn(parent, filepath.Base(path))
}

// makeDirs makes the directory path and its missing parents (mode 0750),
// each made and then opened below the one before (openChild).
func makeDirs(path string) error {
	dir, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { unix.Close(dir) }()
	for _, component := range strings.Split(strings.Trim(filepath.Clean(path), "/"), "/") {
		if err := unix.Mkdirat(dir, component, 0o750); err != nil && !errors.Is(err, unix.EEXIST) {
			return &os.PathError{Op: "mkdir", Path: path, Err: err}
		}
		next, err := openChild(dir, component, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		unix.Close(dir)
		dir = next
	}
	return nil
}

// makeMountPoint makes what a mount lands on at path: a directory, or with
// file an empty file (a device node is bound onto a file). It reports whether
// it made it. One that exists is kept when it is of that kind and empty:
// a mount over a directory or a file with something in it would hide it, and
// the teardown that removes the mount point would then take it with it.
func makeMountPoint(path string, file bool) (made bool, err error) {
	err = inParent(path, func(parent int, name string) error {
		if file {
			fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			if err == nil {
				made = true
				return unix.Close(fd)
			}
			if !errors.Is(err, unix.EEXIST) {
				return &os.PathError{Op: "create", Path: path, Err: err}
			}
		} else {
			err := unix.Mkdirat(parent, name, 0o750)
			if err == nil {
				made = true
				return nil
			}
			if !errors.Is(err, unix.EEXIST) {
				return &os.PathError{Op: "mkdir", Path: path, Err: err}
			}
		}
		kind, empty, err := whatIsAt(parent, name)
		if err != nil {
			return err
		}
		if wanted := map[bool]string{true: "file", false: "directory"}[file]; kind != wanted || !empty {
			return status.Errorf(codes.FailedPrecondition, "%s exists and is not an empty %s; the driver mounts only onto an "+
				"empty one (a mount would hide what it holds, and take in what is meant for it): remove it, or name another path",
				path, wanted)
		}
		return nil
	})
	return made, err
}

// whatIsAt says what the entry name in the directory parent is ("file",
// "directory", or another kind), without following a link, and whether it
// is empty.
func whatIsAt(parent int, name string) (kind string, empty bool, err error) {
	var stat unix.Stat_t
	if err := unix.Fstatat(parent, name, &stat, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", false, err
	}
	switch stat.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file", stat.Size == 0, nil
	case unix.S_IFDIR:
		fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", false, err
		}
		names, err := namesIn(fd, 1)
		return "directory", len(names) == 0, err
	}
	return "other", false, nil
}

// namesIn reads up to n names from the directory open at fd, which it
// closes.
func namesIn(fd, n int) ([]string, error) {
	dir := os.NewFile(uintptr(fd), "")
	defer dir.Close()
	names, err := dir.Readdirnames(n)
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	return names, err
}

// removeMountPoint removes what a mount of the driver's was on, once that
// mount is gone: an empty directory or an empty file, never anything with
// something in it (FAILED_PRECONDITION, left alone), never a link or any
// other kind. Nothing at path is success.
func removeMountPoint(path string) error {
	err := inParent(path, func(parent int, name string) error {
		kind, empty, err := whatIsAt(parent, name)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil
		case err != nil:
			return err
		case !empty || (kind != "file" && kind != "directory"):
			return status.Errorf(codes.FailedPrecondition, "%s is not mounted and not an empty file or directory; it is left alone", path)
		}
		flags := 0
		if kind == "directory" {
			flags = unix.AT_REMOVEDIR
		}
		err = unix.Unlinkat(parent, name, flags)
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return status.Errorf(codes.FailedPrecondition, "%s is not mounted and not empty; it is left alone", path)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "remove", Path: path, Err: err}
		}
		return nil
	})
	if errors.Is(err, unix.ENOENT) {
		return nil // no parent: nothing there
	}
	return err
}
