package nodetest

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
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
func (f *FakeMounter) Hold(ctx context.Context, device string) (func(), error) {
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
			return func() {
				f.mu.Lock()
				defer f.mu.Unlock()
				found.holders--
			}, nil
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
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
