package node

import (
	"context"
	"errors"
)

// Mounter is everything the Node service does to the host besides ZFS:
// mounts in the host mount namespace, filesystems on zvols, sizes. The real
// implementation (NewMounter) makes the system calls and runs the filesystem
// tools; nodetest.FakeMounter is an in-memory host for tests.
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
	// Hold opens device and keeps it open until the Held is released. A
	// zvol's first open (nobody has it open) needs ZFS's namespace lock,
	// and while other zfs commands hold it the kernel refuses that open for
	// a moment (ERESTARTSYS); Hold opens again until it succeeds or ctx
	// ends. While it is held, the opens of mkfs, blkid and mount(2) are not
	// first opens and are not refused, and the device's size and superblock
	// are read through the descriptor held, without opening it again.
	Hold(ctx context.Context, device string) (Held, error)
	// Probe reports the filesystem on a device, "" when it is blank.
	Probe(ctx context.Context, device string) (string, error)
	// Format makes a filesystem of fsType on a blank device, or, with
	// overwrite, over an unfinished one of that type an interrupted mkfs
	// left (formatArgs).
	Format(ctx context.Context, device, fsType string, overwrite bool) error
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

// Held is a device Mounter.Hold keeps open.
type Held interface {
	// Size reports the size of the device in bytes.
	Size() (uint64, error)
	// Superblock reads the superblock of the filesystem of fsType on the
	// device.
	Superblock(fsType string) (Superblock, error)
	// Release closes the device.
	Release()
}

// ErrNoDevice means a device link does not exist (yet).
var ErrNoDevice = errors.New("device does not exist")

// FSStats is what statfs(2) says of a filesystem, in bytes and inodes.
type FSStats struct {
	TotalBytes, AvailableBytes, UsedBytes uint64
	TotalInodes, FreeInodes, UsedInodes   uint64
}
