package node

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The mount table is the node's state (with ZFS): this file reads it and
// holds the one rule for "does this mount show this volume", which the
// operator tools (package inventory) use too, so that the node and the
// reports never disagree about a mount.

// MountInfo is one line of /proc/self/mountinfo.
type MountInfo struct {
	ID         int
	ParentID   int
	MajorMinor string
	// Root is the path inside the source filesystem that is mounted: "/" for
	// a whole filesystem, "/zd0" for a device node bind-mounted from /dev.
	Root       string
	MountPoint string
	// Options are the per-mount options (ro/rw, nosuid, noatime, …).
	Options []string
	FSType  string
	// Source is the dataset name for ZFS, the device for a block filesystem.
	Source       string
	SuperOptions []string
}

// HasOption reports whether the per-mount options include option.
func (m MountInfo) HasOption(option string) bool {
	for _, o := range m.Options {
		if o == option {
			return true
		}
	}
	return false
}

// ReadOnly reports whether writes through this mount are refused.
func (m MountInfo) ReadOnly() bool { return m.HasOption("ro") }

// ReadMountInfo reads and parses a mountinfo file (/proc/self/mountinfo).
// It is read whole, in one pass of the kernel's table, and parsed in
// place: every stage and publish reads it, and a scanner's buffer and a
// slice of fields per line cost them more than the kernel's own work (bench
// section 4).
func ReadMountInfo(path string) ([]MountInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseMountInfo(string(data))
}

// ParseMountInfo parses the format of /proc/<pid>/mountinfo (proc(5)).
func ParseMountInfo(r io.Reader) ([]MountInfo, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return parseMountInfo(string(data))
}

func parseMountInfo(text string) ([]MountInfo, error) {
	mounts := make([]MountInfo, 0, strings.Count(text, "\n")+1)
	for text != "" {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		if line == "" {
			continue
		}
		mount, err := parseMountInfoLine(line)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, mount)
	}
	return mounts, nil
}

// parseMountInfoLine cuts a line at single spaces, not at runs of them:
// the kernel escapes every space, tab, newline and backslash inside a field
// (as \040, \011, \012, \134), so a field is never cut, but it may be
// empty (a mount whose source is "", as `mount -t tmpfs "" /x` makes).
// After the six fixed fields come optional ones ("shared:1", "master:2") up
// to the "-" separator, then the filesystem type, the source and the
// superblock options.
func parseMountInfoLine(line string) (MountInfo, error) {
	var fixed [6]string
	rest := line
	for i := range fixed {
		var found bool
		if fixed[i], rest, found = strings.Cut(rest, " "); !found {
			return MountInfo{}, fmt.Errorf("mountinfo line %q: unexpected format", line)
		}
	}
	for separator := false; !separator; {
		var field string
		var found bool
		if field, rest, found = strings.Cut(rest, " "); !found {
			return MountInfo{}, fmt.Errorf("mountinfo line %q: unexpected format", line)
		}
		separator = field == "-"
	}
	fsType, rest, found1 := strings.Cut(rest, " ")
	source, superOptions, found2 := strings.Cut(rest, " ")
	if !found1 || !found2 {
		return MountInfo{}, fmt.Errorf("mountinfo line %q: unexpected format", line)
	}
	id, err1 := strconv.Atoi(fixed[0])
	parent, err2 := strconv.Atoi(fixed[1])
	if err1 != nil || err2 != nil {
		return MountInfo{}, fmt.Errorf("mountinfo line %q: bad mount IDs", line)
	}
	return MountInfo{
		ID: id, ParentID: parent, MajorMinor: fixed[2],
		Root:         unescapeMountPath(fixed[3]),
		MountPoint:   unescapeMountPath(fixed[4]),
		Options:      strings.Split(fixed[5], ","),
		FSType:       unescapeMountPath(fsType),
		Source:       unescapeMountPath(source),
		SuperOptions: strings.Split(superOptions, ","),
	}, nil
}

// unescapeMountPath undoes the kernel's octal escapes (\040 for a space, …).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountAt is the topmost mount at path (the one a lookup of path sees), or
// nil: of the mounts at path, the one no other mount there is stacked on.
func MountAt(mounts []MountInfo, path string) *MountInfo {
	var top *MountInfo
	for i := range mounts {
		if mounts[i].MountPoint != path {
			continue
		}
		covered := false
		for j := range mounts {
			if mounts[j].MountPoint == path && mounts[j].ParentID == mounts[i].ID {
				covered = true
				break
			}
		}
		if !covered {
			top = &mounts[i]
		}
	}
	return top
}

// VolumeMounts recognises a volume's mounts in the mount table.
type VolumeMounts struct {
	Dataset string
	Link    string // /dev/zvol/<dataset>
	Device  string // the node the link resolves to (/dev/zd0), "" when there is none
}

// Shows reports whether a mount shows this volume, whole or a directory of
// it (a bind of a subdirectory, as kubelet's subPath makes): the dataset
// itself, a filesystem on the zvol (btrfs reports the path it was mounted
// with, the others the device node), or the zvol's device node bind-mounted
// from /dev.
func (v VolumeMounts) Shows(mount MountInfo) bool {
	switch {
	case mount.FSType == "zfs":
		return mount.Source == v.Dataset
	case v.Device == "":
		return false
	case mount.Source == v.Device || mount.Source == v.Link:
		return true
	}
	return v.IsDeviceBind(mount)
}

// Remains reports whether a mount at one of the volume's own paths (its
// staging or target path, which the CO names for this volume) is what is
// left of it: a mount that shows it, or, once its zvol has no device, a bind
// of a zvol device node that is gone (its zvol destroyed). Unmounting that
// loses nothing. Scans of the whole table use Shows: a vanished node names
// no volume.
func (v VolumeMounts) Remains(mount MountInfo) bool {
	return v.Shows(mount) || v.Device == "" && VanishedZvolDevice(mount)
}

// VanishedZvolDevice reports whether a mount binds a zvol's device node
// (zdN) that was unlinked since: its zvol destroyed.
func VanishedZvolDevice(mount MountInfo) bool {
	name, deleted, ok := BoundDevice(mount)
	return ok && deleted && strings.HasPrefix(name, "zd")
}

// IsDeviceBind reports whether a mount is the zvol's device node itself,
// bound from /dev. A bind whose node was unlinked since (the pool exported
// and imported, udev making the node anew) still shows the volume when the
// name matches: zvol nodes are named after their minor number, so the same
// name is the same device.
func (v VolumeMounts) IsDeviceBind(mount MountInfo) bool {
	name, _, ok := BoundDevice(mount)
	return ok && v.Device != "" && name == filepath.Base(v.Device)
}

// BoundDevice reports, for a device node bind-mounted from /dev (devtmpfs),
// the node's name ("zd0") and whether it is gone: the kernel appends
// "//deleted" to the mount's root once the node is unlinked (its zvol
// destroyed, say). ok is false for any other mount.
func BoundDevice(mount MountInfo) (name string, deleted, ok bool) {
	if mount.FSType != "devtmpfs" || mount.Root == "/" {
		return "", false, false
	}
	root, deleted := strings.CutSuffix(mount.Root, "//deleted")
	return strings.TrimPrefix(root, "/"), deleted, true
}

// whole reports whether a mount shows a whole volume rather than a
// directory in it: what staging and publishing make.
func whole(mount MountInfo) bool {
	_, _, device := BoundDevice(mount)
	return device || mount.Root == "/"
}
