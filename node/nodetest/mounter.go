// Package nodetest holds the node service's test support: FakeMounter, an
// in-memory host (mount table, block devices, filesystems) that refuses what
// the kernel refuses, for the node, plugin and command tests.
package nodetest

import (
	"context"
	"fmt"
	"github.com/zfs-csi/zfs-csi/node"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// FakeMounter is an in-memory host for tests: a mount table, block devices
// with filesystems on them, and the kernel's refusals (a mount point that
// does not exist, an unknown device, a filesystem that is not on the device,
// options a filesystem does not know, unmounting what is not mounted). Mount
// points are real paths (tests use temporary directories): the fake checks
// they exist, as the kernel does, but mounts nothing on them. Tests assert
// on its end state: MountTable, Filesystem, DeviceReadOnly.
type FakeMounter struct {
	// Zvols, when set, makes zvol devices appear: it reports the size of the
	// zvol behind a /dev/zvol link, or false when there is none. Without it
	// only devices added with AddDevice exist.
	Zvols func(link string) (size uint64, ok bool)
	// Datasets, when set, says which ZFS datasets exist to be mounted;
	// without it any name mounts.
	Datasets func(name string) bool
	// DatasetSpace, when set, gives a mounted dataset's referenced and
	// available bytes (zfs list -p -o referenced,available), from which
	// Statfs answers as OpenZFS's statfs does; without it a mounted dataset
	// has DatasetBytes.
	DatasetSpace func(name string) (referenced, available uint64, ok bool)

	mu        sync.Mutex
	mounts    []node.MountInfo
	nextID    int
	links     map[string]string // /dev/zvol/… → /dev/zdN
	devices   map[string]*fakeDevice
	nextNode  int
	interrupt bool // the next Format is cut off
	// failRemount makes the next RemountBind fail, as the kernel does for
	// a flag a filesystem refuses.
	failRemount bool
	// busyFirstOpens is how many more first opens of a device the kernel
	// refuses with ERESTARTSYS (BusyFirstOpens).
	busyFirstOpens int
}

type fakeDevice struct {
	node   string
	size   uint64
	fsType string // what blkid sees
	fsSize uint64
	uuid   string
	// unfinished marks what a cut-off mkfs leaves: an XFS marked in
	// progress (fsType xfs), or blocks blkid does not recognise (fsType "":
	// mke2fs writes the primary superblock last, mkfs.btrfs its magic).
	unfinished bool
	readOnly   bool
	formats    int
	holders    int // opens held by Hold
}

// NewFakeMounter returns a host with nothing mounted and no devices.
func NewFakeMounter() *FakeMounter {
	return &FakeMounter{nextID: 100, links: map[string]string{}, devices: map[string]*fakeDevice{}}
}

// AddDevice makes a blank block device appear behind link and returns its node.
func (f *FakeMounter) AddDevice(link string, size uint64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addDevice(link, size).node
}

func (f *FakeMounter) addDevice(link string, size uint64) *fakeDevice {
	devNode := fmt.Sprintf("/dev/zd%d", f.nextNode*16)
	f.nextNode++
	device := &fakeDevice{node: devNode, size: size}
	f.links[link], f.devices[devNode] = devNode, device
	return device
}

// RemoveDevice makes a device and its link vanish, as udev does when a zvol
// is destroyed: binds of its node stay mounted, and the kernel shows their
// root as "/zdN//deleted".
func (f *FakeMounter) RemoveDevice(link string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if devNode, ok := f.links[link]; ok {
		f.removeDevice(link, devNode)
	}
}

// removeDevice drops a device and marks the binds of its node deleted.
// Callers hold mu.
func (f *FakeMounter) removeDevice(link, devNode string) {
	delete(f.links, link)
	delete(f.devices, devNode)
	for i := range f.mounts {
		if f.mounts[i].FSType == "devtmpfs" && f.mounts[i].Root == "/"+filepath.Base(devNode) {
			f.mounts[i].Root += "//deleted"
		}
	}
}

// SetDeviceSize changes a device's size, as a zvol's volsize does.
func (f *FakeMounter) SetDeviceSize(link string, size uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if device := f.device(link); device != nil {
		device.size = size
	}
}

// FormatDevice puts a filesystem on a device, as someone else's mkfs would.
func (f *FakeMounter) FormatDevice(link, fsType, uuid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if device := f.device(link); device != nil {
		device.fsType, device.fsSize, device.uuid = fsType, device.size, uuid
	}
}

// CopyFilesystem puts on a device the filesystem another holds, UUID and
// size included, as a clone or a restore does: its blocks are the origin's,
// whatever the size of the new device.
func (f *FakeMounter) CopyFilesystem(from, to string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	source, target := f.device(from), f.device(to)
	if source != nil && target != nil {
		target.fsType, target.fsSize, target.uuid, target.unfinished = source.fsType, source.fsSize, source.uuid, source.unfinished
	}
}

// InterruptNextFormat makes the next Format stop half way, as an mkfs the
// CO's deadline kills does.
func (f *FakeMounter) InterruptNextFormat() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.interrupt = true
}

// FailNextRemount makes the next RemountBind fail with EPERM.
func (f *FakeMounter) FailNextRemount() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failRemount = true
}

// Filesystem reports the filesystem on a device, its size, and how many
// times it was formatted.
func (f *FakeMounter) Filesystem(link string) (fsType string, size uint64, formats int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if device := f.device(link); device != nil {
		return device.fsType, device.fsSize, device.formats
	}
	return "", 0, 0
}

// MountTable is the mount table, oldest first.
func (f *FakeMounter) MountTable() []node.MountInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	for link := range f.links {
		f.device(link) // a zvol gone since (Zvols) takes its device with it
	}
	return append([]node.MountInfo(nil), f.mounts...)
}

// Reboot forgets every mount and the devices' read-only flags; filesystems
// stay on their devices, and device nodes are numbered anew.
func (f *FakeMounter) Reboot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mounts = nil
	links := f.links
	f.links = map[string]string{}
	devices := f.devices
	f.devices = map[string]*fakeDevice{}
	f.nextNode += 7 // new numbers, as after a pool import
	var names []string
	for link := range links {
		names = append(names, link)
	}
	sort.Strings(names)
	for _, link := range names {
		old := devices[links[link]]
		device := f.addDevice(link, old.size)
		device.fsType, device.fsSize, device.uuid, device.formats, device.unfinished = old.fsType, old.fsSize, old.uuid, old.formats, old.unfinished
	}
}

// device finds a device by link or node. With Zvols set, a zvol's device
// appears, follows its zvol's size, and goes with it. Callers hold mu.
func (f *FakeMounter) device(path string) *fakeDevice {
	link, devNode := path, path
	if linked, ok := f.links[path]; ok {
		devNode = linked
	} else if _, ok := f.devices[path]; ok {
		link = f.linkOf(path)
	}
	device := f.devices[devNode]
	if f.Zvols == nil || !strings.HasPrefix(link, node.ZvolDeviceDir+"/") {
		return device
	}
	size, exists := f.Zvols(link)
	switch {
	case !exists && device != nil:
		f.removeDevice(link, devNode)
		return nil
	case !exists:
		return nil
	case device == nil:
		return f.addDevice(link, size)
	}
	device.size = size
	return device
}

// linkOf is the link to a device node, or "". Callers hold mu.
func (f *FakeMounter) linkOf(devNode string) string {
	for link, linked := range f.links {
		if linked == devNode {
			return link
		}
	}
	return ""
}

// Mounts implements Mounter.
func (f *FakeMounter) Mounts() ([]node.MountInfo, error) { return f.MountTable(), nil }

// fakeDataOptions are the filesystem options the fake's kernel knows.
var fakeDataOptions = map[string][]string{
	"zfs":   nil, // OpenZFS ignores what it does not know
	"ext4":  {"discard", "nodiscard", "data=", "commit=", "errors=", "barrier", "nobarrier", "user_xattr", "acl", "noacl", "lazytime", "sync", "dirsync"},
	"xfs":   {"nouuid", "discard", "nodiscard", "inode64", "inode32", "largeio", "nolargeio", "wsync", "logbufs=", "logbsize=", "lazytime", "sync"},
	"btrfs": {"compress", "compress=", "compress-force=", "discard", "discard=", "nodiscard", "ssd", "nossd", "autodefrag", "noautodefrag", "commit=", "lazytime"},
}

// Mount implements Mounter.
func (f *FakeMounter) Mount(source, target, fsType string, flags, data []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := withoutLinks("mount", target); err != nil {
		return err
	}
	if err := checkDir(target); err != nil {
		return err
	}
	known, ok := fakeDataOptions[fsType]
	if !ok {
		return &os.PathError{Op: "mount " + fsType, Path: target, Err: unix.ENODEV}
	}
	mount := node.MountInfo{Root: "/", MountPoint: target, Options: renderFlags(flags), FSType: fsType, Source: source,
		SuperOptions: append([]string{"rw"}, data...)}
	if fsType == "zfs" {
		if strings.HasPrefix(source, "/") || (f.Datasets != nil && !f.Datasets(source)) {
			return &os.PathError{Op: "mount zfs " + source, Path: target, Err: unix.ENOENT}
		}
		f.add(mount)
		return nil
	}
	device := f.device(source)
	if device == nil {
		return &os.PathError{Op: "mount " + source, Path: target, Err: unix.ENOENT}
	}
	if err := f.open("mount "+source, device); err != nil {
		return err
	}
	switch {
	case device.fsType != fsType:
		return &os.PathError{Op: "mount " + source, Path: target, Err: unix.EINVAL}
	case device.unfinished:
		return &os.PathError{Op: "mount " + source, Path: target, Err: unix.EUCLEAN}
	}
	for _, option := range data {
		if !knownOption(known, option) {
			return &os.PathError{Op: "mount " + source + " -o " + option, Path: target, Err: unix.EINVAL}
		}
	}
	if twin := f.mountedTwin(device); twin != "" && (fsType == "btrfs" || fsType == "xfs" && !slices.Contains(data, "nouuid")) {
		// XFS refuses a second filesystem with a mounted one's UUID (EINVAL)
		// unless told nouuid; btrfs takes it for another device of the
		// mounted filesystem (EEXIST).
		errno := unix.EINVAL
		if fsType == "btrfs" {
			errno = unix.EEXIST
		}
		return &os.PathError{Op: "mount " + source + " (same UUID as " + twin + ")", Path: target, Err: errno}
	}
	mount.Source = device.node
	f.add(mount)
	return nil
}

// mountedTwin is another device with the same filesystem UUID that is
// mounted, or "". Callers hold mu.
func (f *FakeMounter) mountedTwin(device *fakeDevice) string {
	if device.uuid == "" {
		return ""
	}
	for _, mount := range f.mounts {
		if other, ok := f.devices[mount.Source]; ok && other != device && other.uuid == device.uuid {
			return other.node
		}
	}
	return ""
}

func knownOption(known []string, option string) bool {
	for _, k := range known {
		if option == k || strings.HasSuffix(k, "=") && strings.HasPrefix(option, k) {
			return true
		}
	}
	return false
}

// renderFlags writes per-mount flags as mountinfo shows them, with the
// kernel's relatime default.
func renderFlags(flags []string) []string {
	options := []string{"rw"}
	atime := false
	for _, flag := range flags {
		switch flag {
		case "ro":
			options[0] = "ro"
		case "strictatime":
			atime = true
		case "noatime", "relatime":
			atime = true
			options = append(options, flag)
		default:
			options = append(options, flag)
		}
	}
	if !atime {
		options = append(options, "relatime")
	}
	return options
}

// add appends a mount on top of what is at its mount point. Callers hold mu.
func (f *FakeMounter) add(mount node.MountInfo) {
	f.nextID++
	mount.ID, mount.ParentID = f.nextID, 1
	if below := node.MountAt(f.mounts, mount.MountPoint); below != nil {
		mount.ParentID = below.ID
	}
	f.mounts = append(f.mounts, mount)
}

// Bind implements Mounter.
func (f *FakeMounter) Bind(source, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := withoutLinks("bind mount", target); err != nil {
		return err
	}
	if _, err := os.Stat(target); err != nil {
		return err
	}
	if device := f.device(source); device != nil {
		f.add(node.MountInfo{Root: "/" + filepath.Base(device.node), MountPoint: target, Options: []string{"rw", "nosuid", "relatime"},
			FSType: "devtmpfs", Source: "udev", SuperOptions: []string{"rw"}})
		return nil
	}
	if err := withoutLinks("bind mount", source); err != nil {
		return err
	}
	if mounted := node.MountAt(f.mounts, source); mounted != nil {
		bound := *mounted
		bound.MountPoint = target
		bound.Options = append([]string(nil), mounted.Options...)
		f.add(bound)
		return nil
	}
	if _, err := os.Stat(source); err != nil {
		return err
	}
	f.add(node.MountInfo{Root: source, MountPoint: target, Options: []string{"rw", "relatime"}, FSType: "ext4", Source: "/dev/root"})
	return nil
}

// RemountBind implements Mounter.
func (f *FakeMounter) RemountBind(target string, flags []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := withoutLinks("remount bind", target); err != nil {
		return err
	}
	if f.failRemount {
		f.failRemount = false
		return &os.PathError{Op: "remount bind", Path: target, Err: unix.EPERM}
	}
	mount := node.MountAt(f.mounts, target)
	if mount == nil {
		return &os.PathError{Op: "remount bind", Path: target, Err: unix.EINVAL}
	}
	mount.Options = renderFlags(flags)
	return nil
}

// Unmount implements Mounter, as umount2(UMOUNT_NOFOLLOW) from the parent
// opened without following links does: a symbolic link along the way is
// refused, and one at target itself is not followed (not a mount point).
func (f *FakeMounter) Unmount(target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := withoutLinks("unmount", filepath.Dir(target)); err != nil {
		return err
	}
	mount := node.MountAt(f.mounts, filepath.Clean(target))
	if mount == nil {
		return &os.PathError{Op: "unmount", Path: target, Err: unix.EINVAL}
	}
	for i := range f.mounts {
		if f.mounts[i].ID == mount.ID {
			f.mounts = append(f.mounts[:i], f.mounts[i+1:]...)
			break
		}
	}
	return nil
}

// WaitForDevice implements Mounter.
func (f *FakeMounter) WaitForDevice(ctx context.Context, path string) (string, error) {
	for {
		devNode, err := f.ResolveDevice(path)
		if err == nil {
			return devNode, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// ResolveDevice implements Mounter.
func (f *FakeMounter) ResolveDevice(path string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if device := f.device(path); device != nil {
		return device.node, nil
	}
	return "", fmt.Errorf("%s: %w", path, node.ErrNoDevice)
}

// Probe implements Mounter.
func (f *FakeMounter) Probe(ctx context.Context, device string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	found := f.device(device)
	if found == nil {
		return "", &os.PathError{Op: "open", Path: device, Err: unix.ENOENT}
	}
	if err := f.open("open", found); err != nil {
		return "", err
	}
	return found.fsType, nil
}

// Format implements Mounter. Unlike mkfs.ext4 it refuses a device that has
// a filesystem, and unlike mkfs -f it overwrites only an unfinished one of
// the same type, so that a test catches a driver that would reformat data.
func (f *FakeMounter) Format(ctx context.Context, device, fsType string, overwrite bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	found := f.device(device)
	switch {
	case found == nil:
		return &os.PathError{Op: "mkfs." + fsType, Path: device, Err: unix.ENOENT}
	case found.fsType != "" && !overwrite:
		return fmt.Errorf("mkfs.%s %s: the device already holds %s", fsType, device, found.fsType)
	case overwrite && (found.fsType != fsType || !found.unfinished):
		return fmt.Errorf("mkfs.%s -f %s: the fake overwrites only an unfinished %s, the device holds %q", fsType, device, fsType, found.fsType)
	case f.mountedDevice(found):
		return &os.PathError{Op: "mkfs." + fsType, Path: device, Err: unix.EBUSY}
	}
	if err := f.open("mkfs."+fsType, found); err != nil {
		return err
	}
	found.formats++
	found.fsSize, found.uuid = found.size, fmt.Sprintf("%s-%d", found.node, found.formats)
	if f.interrupt {
		f.interrupt, found.unfinished, found.fsType = false, true, ""
		if fsType == "xfs" {
			found.fsType = "xfs"
		}
		return fmt.Errorf("mkfs.%s %s: %w", fsType, device, context.DeadlineExceeded)
	}
	found.fsType, found.unfinished = fsType, false
	return nil
}

// mountedDevice reports whether a device is mounted or bound anywhere. Callers hold mu.
func (f *FakeMounter) mountedDevice(device *fakeDevice) bool {
	for _, mount := range f.mounts {
		if mount.Source == device.node || mount.Root == "/"+filepath.Base(device.node) {
			return true
		}
	}
	return false
}

// NewUUID implements Mounter.
func (f *FakeMounter) NewUUID(ctx context.Context, fsType, device string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	found := f.device(device)
	switch {
	case found == nil || found.fsType != fsType:
		return fmt.Errorf("btrfstune %s: no %s filesystem", device, fsType)
	case f.mountedDevice(found):
		return fmt.Errorf("btrfstune %s: mounted", device)
	}
	found.uuid = found.node + "-new"
	return nil
}

// Resize implements Mounter: the filesystem grows to its device's size.
func (f *FakeMounter) Resize(ctx context.Context, fsType, device, mountPath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	found := f.device(device)
	mount := node.MountAt(f.mounts, kernelPath(mountPath, true))
	switch {
	case found == nil || found.fsType != fsType:
		return fmt.Errorf("resizing %s on %s: no such filesystem", fsType, device)
	case mount == nil || mount.Source != found.node:
		return fmt.Errorf("resizing %s: not mounted at %s", device, mountPath)
	}
	found.fsSize = found.size
	return nil
}

// DeviceSize implements Mounter: path is a device (link or node) or a mount
// point where one is bound.
func (f *FakeMounter) DeviceSize(path string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	device, err := f.boundDevice(path)
	if err != nil {
		return 0, err
	}
	return device.size, nil
}

// boundDevice finds a device by its path or by where it is bound. Callers hold mu.
func (f *FakeMounter) boundDevice(path string) (*fakeDevice, error) {
	if device := f.device(path); device != nil {
		return device, nil
	}
	if mount := node.MountAt(f.mounts, kernelPath(path, true)); mount != nil && mount.FSType == "devtmpfs" {
		if device := f.device("/dev" + mount.Root); device != nil {
			return device, nil
		}
	}
	return nil, &os.PathError{Op: "ioctl BLKGETSIZE64", Path: path, Err: unix.ENOTTY}
}

// SetDeviceReadOnly implements Mounter.
func (f *FakeMounter) SetDeviceReadOnly(device string, readOnly bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	found, err := f.boundDevice(device)
	if err != nil {
		return err
	}
	found.readOnly = readOnly
	return nil
}

// DeviceReadOnly implements Mounter.
func (f *FakeMounter) DeviceReadOnly(device string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	found, err := f.boundDevice(device)
	if err != nil {
		return false, err
	}
	return found.readOnly, nil
}

var _ node.Mounter = (*FakeMounter)(nil)
