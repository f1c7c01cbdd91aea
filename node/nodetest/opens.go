package nodetest

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/zfs-csi/zfs-csi/node"
)

// Opens of the fake's devices: the kernel's refusal of a zvol's first open
// while ZFS is busy, and the hold that spares the opens after it.

// BusyFirstOpens makes the kernel refuse the next n first opens of devices
// (opens of a device nobody holds open or has mounted) with ERESTARTSYS, as
// OpenZFS's zvol_open does while spa_namespace_lock is busy: mkfs, blkid and
// mount(2) then fail, unless the device is held (Hold).
func (f *FakeMounter) BusyFirstOpens(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busyFirstOpens = n
}

// open is the kernel's answer to opening device for op. Callers hold mu.
func (f *FakeMounter) open(op string, device *fakeDevice) error {
	if device.holders > 0 || f.mountedDevice(device) || f.busyFirstOpens == 0 {
		return nil
	}
	f.busyFirstOpens--
	return &os.PathError{Op: op, Path: device.node, Err: unix.Errno(512)}
}

// Hold implements Mounter: it opens again while the first open is refused.
func (f *FakeMounter) Hold(ctx context.Context, device string) (node.Held, error) {
	for {
		f.mu.Lock()
		found := f.device(device)
		if found == nil {
			f.mu.Unlock()
			return nil, &os.PathError{Op: "open", Path: device, Err: unix.ENOENT}
		}
		err := f.open("open", found)
		if err == nil {
			found.holders++
			f.mu.Unlock()
			return &fakeHeld{f: f, device: found}, nil
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// fakeHeld is a device Hold keeps open.
type fakeHeld struct {
	f        *FakeMounter
	device   *fakeDevice
	released bool
}

func (h *fakeHeld) Size() (uint64, error) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if h.released {
		return 0, &os.PathError{Op: "ioctl BLKGETSIZE64", Path: h.device.node, Err: unix.EBADF}
	}
	return h.device.size, nil
}

func (h *fakeHeld) Superblock(fsType string) (node.Superblock, error) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	switch {
	case h.released:
		return node.Superblock{}, &os.PathError{Op: "read", Path: h.device.node, Err: unix.EBADF}
	case h.device.fsType != fsType:
		return node.Superblock{}, fmt.Errorf("%s: no %s superblock", h.device.node, fsType)
	}
	return node.Superblock{Size: h.device.fsSize, Complete: !h.device.unfinished}, nil
}

// Release closes the device; a second close is the kernel's EBADF, a
// defect of the caller's, which the fake makes a panic.
func (h *fakeHeld) Release() {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if h.released {
		panic("nodetest: a held device was released twice")
	}
	h.released = true
	h.device.holders--
}

// Held reports how many holds of the device behind link are open.
func (f *FakeMounter) Held(link string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if device := f.device(link); device != nil {
		return device.holders
	}
	return 0
}
