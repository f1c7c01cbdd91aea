package node

import (
	"errors"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hostPath turns a path from a request (a staging or target path) into the
// path the kernel shows in the mount table, which is what every comparison
// with a mount point and every mount call then uses. The kernel shows paths
// with every symbolic link resolved, and hosts often reach the CO's
// directory through one (/var/lib/kubelet -> /data/kubelet): comparing the
// request's spelling with the kernel's would miss the volume's own mounts,
// stacking a new one on every stage and leaking them on unstage.
//
// The parent is resolved; the path itself must not be a symbolic link. The
// driver makes and removes what is at that path (a directory or a file to
// mount on), and following a link there would mount onto, and unpublish
// would then delete, something other than what the CO named. Such a path is
// FAILED_PRECONDITION rather than INVALID_ARGUMENT: the request is well
// formed, the host holds the wrong thing at the path, and only its operator
// can remove it.
//
// A parent that does not exist holds no mounts below it: the path is then
// used as given, which unpublish and unstage answer OK.
func hostPath(field, path string) (string, error) {
	clean := filepath.Clean(path)
	if !filepath.IsAbs(clean) {
		return "", invalid("%s %q is not an absolute path", field, path)
	}
	if info, err := os.Lstat(clean); err == nil && info.Mode()&os.ModeSymlink != 0 {
		return "", status.Errorf(codes.FailedPrecondition, "%s %s is a symbolic link; the driver does not follow it "+
			"(it would mount onto, or delete, something other than the path named): remove it", field, clean)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(clean))
	if errors.Is(err, os.ErrNotExist) {
		return clean, nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Join(parent, filepath.Base(clean)), nil
}
