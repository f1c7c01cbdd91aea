package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// hostMounter is the real Mounter: mount(2), umount(2), statfs(2) and ioctls
// through golang.org/x/sys/unix, filesystem tools run without a shell with
// LC_ALL=C and the caller's deadline. Everything happens in the mount
// namespace of the process, which must be the host's.
type hostMounter struct {
	log zerolog.Logger
	// pollInterval is how often WaitForDevice looks for the device link.
	pollInterval time.Duration
	// linkGrace is how long WaitForDevice waits for udev's link to a zvol
	// before it looks for the zvol's device node itself, and how often it
	// looks again.
	linkGrace time.Duration
	zvols     *zvolNodes
}

// NewMounter returns the Mounter that acts on this host.
func NewMounter(log zerolog.Logger) Mounter {
	return &hostMounter{log: log, pollInterval: 100 * time.Millisecond, linkGrace: time.Second, zvols: newZvolNodes()}
}

// mountFlagBits are the mount(2) bits of the per-mount flags.
var mountFlagBits = map[string]uintptr{
	"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
	"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME,
	"strictatime": unix.MS_STRICTATIME,
}

func flagBits(flags []string) (uintptr, error) {
	var bits uintptr
	for _, flag := range flags {
		bit, ok := mountFlagBits[flag]
		if !ok {
			return 0, fmt.Errorf("unknown per-mount flag %q", flag)
		}
		bits |= bit
	}
	return bits, nil
}

func (h *hostMounter) Mounts() ([]MountInfo, error) { return ReadMountInfo("/proc/self/mountinfo") }

func (h *hostMounter) Mount(source, target, fsType string, flags, data []string) error {
	bits, err := flagBits(flags)
	if err != nil {
		return err
	}
	h.log.Debug().Str("source", source).Str("target", target).Str("fstype", fsType).
		Strs("flags", flags).Strs("data", data).Msg("mount")
	err = pinned(target, func(target string) error {
		return unix.Mount(source, target, fsType, bits, strings.Join(data, ","))
	})
	if err != nil {
		return &os.PathError{Op: "mount " + fsType + " " + source + " on", Path: target, Err: err}
	}
	return nil
}

// pinned runs fn with path opened without following a symbolic link
// anywhere along it (openBeneath) and named as that open file: mount(2)
// then acts on what was checked, not on what the path names by then.
func pinned(path string, fn func(pinned string) error) error {
	fd, err := openBeneath(path, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(procPath(fd))
}

func (h *hostMounter) Bind(source, target string) error {
	h.log.Debug().Str("source", source).Str("target", target).Msg("bind mount")
	err := pinned(source, func(source string) error {
		return pinned(target, func(target string) error { return unix.Mount(source, target, "", unix.MS_BIND, "") })
	})
	if err != nil {
		return &os.PathError{Op: "bind mount " + source + " on", Path: target, Err: err}
	}
	return nil
}

func (h *hostMounter) RemountBind(target string, flags []string) error {
	bits, err := flagBits(flags)
	if err != nil {
		return err
	}
	h.log.Debug().Str("target", target).Strs("flags", flags).Msg("remount bind")
	err = pinned(target, func(target string) error { return unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|bits, "") })
	if err != nil {
		return &os.PathError{Op: "remount bind", Path: target, Err: err}
	}
	return nil
}

func (h *hostMounter) Unmount(target string) error {
	h.log.Debug().Str("target", target).Msg("unmount")
	// The mount point itself is not opened: an open file on it keeps the
	// mount busy. Its parent is, and the last component is looked up from
	// there without following a link.
	err := inParent(target, func(parent int, name string) error {
		return unix.Unmount(procPath(parent)+"/"+name, unix.UMOUNT_NOFOLLOW)
	})
	if err != nil {
		return &os.PathError{Op: "unmount", Path: target, Err: err}
	}
	return nil
}

// ResolveDevice resolves a device link; a zvol's link that udev has not
// made yet resolves to the node WaitForDevice found for it (zvolNodes).
func (h *hostMounter) ResolveDevice(path string) (string, error) {
	device, err := filepath.EvalSymlinks(path)
	dataset, isZvol := zvolOfLink(path)
	switch {
	case err == nil && isZvol:
		h.zvols.forget(dataset)
	case errors.Is(err, os.ErrNotExist):
		if isZvol {
			if node, ok := h.zvols.remembered(dataset); ok {
				return node, nil
			}
		}
		return "", fmt.Errorf("%s: %w", path, ErrNoDevice)
	}
	return device, err
}

// WaitForDevice waits for the device link at path. For a zvol's link, after
// linkGrace without it, it asks the zvol device nodes themselves, once every
// linkGrace, as udev's zvol_id does (zvolNodes).
func (h *hostMounter) WaitForDevice(ctx context.Context, path string) (string, error) {
	dataset, isZvol := zvolOfLink(path)
	ticker := time.NewTicker(h.pollInterval)
	defer ticker.Stop()
	nextScan := time.Now().Add(h.linkGrace)
	for {
		device, err := h.ResolveDevice(path)
		if !errors.Is(err, ErrNoDevice) {
			return device, err
		}
		if isZvol && !time.Now().Before(nextScan) {
			if node, ok := h.zvols.find(dataset); ok {
				h.log.Info().Str("dataset", dataset).Str("device", node).
					Msg("udev has not linked the zvol yet: its device node answered with its name")
				return node, nil
			}
			nextScan = time.Now().Add(h.linkGrace)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-ticker.C:
		}
	}
}

func (h *hostMounter) Probe(ctx context.Context, device string) (string, error) {
	// blkid also answers "nothing found" (exit 2) for a device it cannot
	// open: make sure it can be read before believing a blank answer.
	file, err := os.Open(device)
	if err != nil {
		return "", err
	}
	file.Close()
	out, err := h.run(ctx, "blkid", "-p", "-o", "value", "-s", "TYPE", device)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	fsType := strings.TrimSpace(out)
	if fsType == "" {
		return "", fmt.Errorf("blkid found a signature on %s but no filesystem type", device)
	}
	return fsType, nil
}

func (h *hostMounter) Format(ctx context.Context, device, fsType string, overwrite bool) error {
	argv, err := formatArgs(fsType, device, overwrite)
	if err != nil {
		return err
	}
	_, err = h.run(ctx, argv[0], argv[1:]...)
	h.settle(ctx)
	return err
}

// Hold keeps device open until it is released: see Mounter.Hold.
func (h *hostMounter) Hold(ctx context.Context, device string) (Held, error) {
	fd, err := openDevice(ctx, device)
	if err != nil {
		return nil, err
	}
	return heldDevice{fd: fd, name: device}, nil
}

// heldDevice is a block device open read-only (Hold).
type heldDevice struct {
	fd   int
	name string
}

func (d heldDevice) Size() (uint64, error) { return blockDeviceSize(d.fd, d.name) }

func (d heldDevice) Superblock(fsType string) (Superblock, error) {
	return readSuperblockFrom(d, d.name, fsType)
}

// ReadAt is pread(2) on the held descriptor, as io.ReaderAt.
func (d heldDevice) ReadAt(p []byte, off int64) (int, error) {
	read := 0
	for read < len(p) {
		n, err := unix.Pread(d.fd, p[read:], off+int64(read))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return read, &os.PathError{Op: "read", Path: d.name, Err: err}
		case n == 0:
			return read, io.EOF
		}
		read += n
	}
	return read, nil
}

func (d heldDevice) Release() { unix.Close(d.fd) }

// errRestartSys is ERESTARTSYS (512). OpenZFS's zvol_open answers it when a
// zvol's first open cannot take spa_namespace_lock in time (zvol_first_open
// gives up after zvol_open_timeout_ms, 1 s), as happens while other zfs
// commands run; Linux 6.1 passes it to user space as it is. mkfs then fails
// with "Unknown code B 0" (com_err's name for 512), blkid finds nothing.
const errRestartSys = unix.Errno(512)

// deviceSizeOpenTimeout bounds DeviceSize's wait for a busy zvol to open.
const deviceSizeOpenTimeout = 10 * time.Second

// openFile is open(2); tests stand in the kernel's refusals.
var openFile = unix.Open

// openDevice opens a block device read-only, opening again while the kernel
// answers that ZFS is busy (errRestartSys, EINTR), until ctx ends.
func openDevice(ctx context.Context, device string) (int, error) {
	delay := 10 * time.Millisecond
	for tries := 1; ; tries++ {
		fd, err := openFile(device, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			return fd, nil
		}
		if err != errRestartSys && err != unix.EINTR {
			return -1, &os.PathError{Op: "open", Path: device, Err: err}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("opening %s: refused %d times while ZFS was busy (errno %d): %w", device, tries, err, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// settle waits, within ctx and a few seconds, until udev has handled the
// events a tool caused by closing a device it wrote to: udev then probes
// the device (blkid, zvol_id), and while it does, the zvol is open and
// zfs destroy says "dataset is busy". Best effort: a host without udev
// has nothing to wait for.
func (h *hostMounter) settle(ctx context.Context) {
	if _, err := exec.LookPath("udevadm"); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, udevSettleTimeout)
	defer cancel()
	if _, err := h.run(ctx, "udevadm", "settle", fmt.Sprintf("--timeout=%d", int(udevSettleTimeout/time.Second))); err != nil {
		h.log.Debug().Err(err).Msg("udevadm settle")
	}
}

// udevSettleTimeout bounds the wait for udev after writing to a device.
const udevSettleTimeout = 10 * time.Second

func (h *hostMounter) NewUUID(ctx context.Context, fsType, device string) error {
	if fsType != "btrfs" {
		return fmt.Errorf("cannot give %s on %s a new UUID", fsType, device)
	}
	// -m changes only the UUID the kernel sees (metadata_uuid): no rewrite
	// of every block, so it takes a moment whatever the size.
	_, err := h.run(ctx, "btrfstune", "-f", "-m", device)
	h.settle(ctx)
	return err
}

func (h *hostMounter) Resize(ctx context.Context, fsType, device, mountPath string) error {
	var err error
	switch fsType {
	case "ext4":
		_, err = h.run(ctx, "resize2fs", device)
		h.settle(ctx) // resize2fs writes through the device node
	case "xfs":
		_, err = h.run(ctx, "xfs_growfs", mountPath)
	case "btrfs":
		_, err = h.run(ctx, "btrfs", "filesystem", "resize", "max", mountPath)
	default:
		err = fmt.Errorf("cannot resize %s: unsupported filesystem %q", device, fsType)
	}
	return err
}

func (h *hostMounter) DeviceSize(path string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deviceSizeOpenTimeout)
	defer cancel()
	fd, err := openDevice(ctx, path)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return blockDeviceSize(fd, path)
}

// blockDeviceSize is BLKGETSIZE64 on an open block device.
func blockDeviceSize(fd int, name string) (uint64, error) {
	var size uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); errno != 0 {
		return 0, &os.PathError{Op: "ioctl BLKGETSIZE64", Path: name, Err: errno}
	}
	return size, nil
}

func (h *hostMounter) SetDeviceReadOnly(device string, readOnly bool) error {
	file, err := os.Open(device)
	if err != nil {
		return err
	}
	defer file.Close()
	value := 0
	if readOnly {
		value = 1
	}
	if err := unix.IoctlSetPointerInt(int(file.Fd()), unix.BLKROSET, value); err != nil {
		return &os.PathError{Op: "ioctl BLKROSET", Path: device, Err: err}
	}
	return nil
}

func (h *hostMounter) DeviceReadOnly(device string) (bool, error) {
	file, err := os.Open(device)
	if err != nil {
		return false, err
	}
	defer file.Close()
	value, err := unix.IoctlGetInt(int(file.Fd()), unix.BLKROGET)
	if err != nil {
		return false, &os.PathError{Op: "ioctl BLKROGET", Path: device, Err: err}
	}
	return value != 0, nil
}

func (h *hostMounter) Statfs(path string) (FSStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FSStats{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	size := uint64(st.Frsize)
	if size == 0 {
		size = uint64(st.Bsize)
	}
	return FSStats{
		TotalBytes: st.Blocks * size, AvailableBytes: st.Bavail * size, UsedBytes: (st.Blocks - st.Bfree) * size,
		TotalInodes: st.Files, FreeInodes: st.Ffree, UsedInodes: st.Files - st.Ffree,
	}, nil
}

// run executes a tool without a shell, with LC_ALL=C (its messages are
// parsed and logged) and the caller's deadline, and returns its stdout. A
// failure carries the exit status and stderr.
func (h *hostMounter) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = zfs.CLocaleEnv(os.Environ())
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	h.log.Debug().Strs("argv", cmd.Args).Dur("duration", time.Since(start)).Err(err).Msg("exec")
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), ctx.Err())
	}
	if err != nil {
		return stdout.String(), &ToolError{Argv: cmd.Args, Err: err, Stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.String(), nil
}

// ToolError is a filesystem tool that failed.
type ToolError struct {
	Argv   []string
	Err    error
	Stderr string
}

func (e *ToolError) Error() string {
	return fmt.Sprintf("%s: %v: %s", strings.Join(e.Argv, " "), e.Err, e.Stderr)
}

func (e *ToolError) Unwrap() error { return e.Err }

var _ Mounter = (*hostMounter)(nil)
