package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Mounter is everything the Node service does to the host besides ZFS:
// mounts in the host mount namespace, filesystems on zvols, sizes. The real
// implementation (NewMounter) makes the system calls and runs the filesystem
// tools; FakeMounter is an in-memory host for tests.
type Mounter interface {
	// Mounts lists the mount table of the host (/proc/self/mountinfo).
	Mounts() ([]MountInfo, error)
	// Mount mounts a filesystem: a ZFS dataset (fsType "zfs", source the
	// dataset name) or a formatted device. flags are per-mount flags (see
	// mountFlagBits), data the filesystem's own options.
	Mount(source, target, fsType string, flags, data []string) error
	// Bind bind-mounts source (a directory or a device node) onto target.
	Bind(source, target string) error
	// RemountBind sets the per-mount flags of the bind mount at target, e.g.
	// "ro" for a read-only view that refuses writes.
	RemountBind(target string, flags []string) error
	// Unmount unmounts the topmost mount at target.
	Unmount(target string) error

	// WaitForDevice waits until the device link at path exists and returns
	// the device node it resolves to (/dev/zvol/pool/vol → /dev/zd0).
	WaitForDevice(ctx context.Context, path string) (string, error)
	// ResolveDevice returns the device node a link resolves to now, or
	// ErrNoDevice.
	ResolveDevice(path string) (string, error)
	// Probe reports the filesystem on a device, "" when it is blank.
	Probe(ctx context.Context, device string) (string, error)
	// Format makes a filesystem of fsType on a blank device.
	Format(ctx context.Context, device, fsType string) error
	// NewUUID gives the filesystem on an unmounted device a new identity,
	// for clones of btrfs, which refuses to mount two devices with one UUID.
	NewUUID(ctx context.Context, fsType, device string) error
	// Resize grows the mounted filesystem on device to the device's size.
	Resize(ctx context.Context, fsType, device, mountPath string) error
	// SetDeviceReadOnly sets the kernel's read-only flag of a block device
	// (BLKROSET): the one way to refuse writes through a device node, which a
	// read-only mount does not do.
	SetDeviceReadOnly(device string, readOnly bool) error
	// DeviceReadOnly reports the kernel's read-only flag of a block device.
	DeviceReadOnly(device string) (bool, error)
	// DeviceSize reports the size in bytes of a block device (or of the one
	// bind-mounted at path).
	DeviceSize(path string) (uint64, error)
	// Statfs reports the space and inodes of the filesystem holding path.
	Statfs(path string) (FSStats, error)
}

// ErrNoDevice means a device link does not exist (yet).
var ErrNoDevice = errors.New("device does not exist")

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

// FSStats is what statfs(2) says of a filesystem, in bytes and inodes.
type FSStats struct {
	TotalBytes, AvailableBytes, UsedBytes uint64
	TotalInodes, FreeInodes, UsedInodes   uint64
}

// ParseMountInfo parses the format of /proc/<pid>/mountinfo (proc(5)).
func ParseMountInfo(r io.Reader) ([]MountInfo, error) {
	var mounts []MountInfo
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64<<10), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" {
			continue
		}
		mount, err := parseMountInfoLine(line)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, mount)
	}
	return mounts, scanner.Err()
}

func parseMountInfoLine(line string) (MountInfo, error) {
	fields := strings.Fields(line)
	separator := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			separator = i
			break
		}
	}
	if len(fields) < 10 || separator < 0 || len(fields) < separator+4 {
		return MountInfo{}, fmt.Errorf("mountinfo line %q: unexpected format", line)
	}
	id, err1 := strconv.Atoi(fields[0])
	parent, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil {
		return MountInfo{}, fmt.Errorf("mountinfo line %q: bad mount IDs", line)
	}
	return MountInfo{
		ID: id, ParentID: parent, MajorMinor: fields[2],
		Root:         unescapeMountPath(fields[3]),
		MountPoint:   unescapeMountPath(fields[4]),
		Options:      strings.Split(fields[5], ","),
		FSType:       fields[separator+1],
		Source:       unescapeMountPath(fields[separator+2]),
		SuperOptions: strings.Split(fields[separator+3], ","),
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

// mountAt is the topmost mount at path (the one a lookup of path sees), or
// nil: of the mounts at path, the one no other mount there is stacked on.
func mountAt(mounts []MountInfo, path string) *MountInfo {
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
