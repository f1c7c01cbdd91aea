package node

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refusingOpens stands in open(2) for a zvol whose first opens the kernel
// refuses while ZFS's namespace lock is busy (ERESTARTSYS), then opens it.
func refusingOpens(t *testing.T, refusals int, errno error) *int {
	t.Helper()
	tries := 0
	kernel := openFile
	t.Cleanup(func() { openFile = kernel })
	openFile = func(path string, mode int, perm uint32) (int, error) {
		tries++
		if tries <= refusals {
			return -1, errno
		}
		return kernel(path, mode, perm)
	}
	return &tries
}

func TestOpenDeviceOpensAgainWhileZFSIsBusy(t *testing.T) {
	device := filepath.Join(t.TempDir(), "zd0")
	if err := os.WriteFile(device, []byte("blocks"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("ERESTARTSYS and EINTR are opened again", func(t *testing.T) {
		for _, errno := range []error{errRestartSys, unix.EINTR} {
			tries := refusingOpens(t, 3, errno)
			fd, err := openDevice(context.Background(), device)
			if err != nil {
				t.Fatalf("%v: %v", errno, err)
			}
			unix.Close(fd)
			if *tries != 4 {
				t.Errorf("%v: opened %d times, want 4", errno, *tries)
			}
		}
	})
	t.Run("another error is the answer at once", func(t *testing.T) {
		tries := refusingOpens(t, 1, unix.ENXIO)
		_, err := openDevice(context.Background(), device)
		if !errors.Is(err, unix.ENXIO) || *tries != 1 {
			t.Errorf("got %v after %d opens, want ENXIO after 1", err, *tries)
		}
	})
	t.Run("the deadline ends the wait", func(t *testing.T) {
		refusingOpens(t, 1<<30, errRestartSys)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := openDevice(ctx, device)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want the deadline", err)
		}
	})
}

// TestHeldDeviceReadsThroughItsDescriptor formats a 64 MiB image with the
// real mkfs.ext4 and holds it as stage holds a zvol: its superblock and,
// on a loop device, its size come through the descriptor held, not the
// path, which is gone by then; a second read sees what the first did.
func TestHeldDeviceReadsThroughItsDescriptor(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("skipped: mkfs.ext4 is not installed")
	}
	image := ext4Image(t, 64<<20, 64<<20)
	want := Superblock{Size: 64 << 20, Complete: true}
	hold := func(path string) Held {
		held, err := (&hostMounter{}).Hold(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return held
	}

	held := hold(image)
	if err := os.Remove(image); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := held.Superblock("ext4"); err != nil || got != want {
			t.Errorf("the superblock through the held descriptor: %+v, %v; want %+v", got, err, want)
		}
	}
	if _, err := held.Superblock("xfs"); err == nil {
		t.Error("an ext4 read as XFS gave no error")
	}
	if _, err := held.Size(); !errors.Is(err, unix.ENOTTY) {
		t.Errorf("BLKGETSIZE64 of a regular file: %v, want ENOTTY", err)
	}
	held.Release()
	if _, err := held.Superblock("ext4"); !errors.Is(err, unix.EBADF) {
		t.Errorf("a read after Release: %v, want EBADF", err)
	}

	// A block device answers BLKGETSIZE64: a loop device over an image of
	// 96 MiB holding the 64 MiB filesystem (a zvol grown under it).
	image = ext4Image(t, 64<<20, 96<<20)
	out, err := exec.Command("losetup", "--find", "--show", image).CombinedOutput()
	if err != nil {
		t.Skipf("skipped the block device half: no loop device here (losetup: %v: %s)", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", loop).Run() })
	held = hold(loop)
	defer held.Release()
	if size, err := held.Size(); err != nil || size != 96<<20 {
		t.Errorf("the loop device's size through the held descriptor: %d, %v; want %d", size, err, 96<<20)
	}
	if got, err := held.Superblock("ext4"); err != nil || got != want {
		t.Errorf("the loop device's superblock: %+v, %v; want %+v", got, err, want)
	}
}

// ext4Image makes an image file holding an ext4 of fsSize bytes (the real
// mkfs.ext4), grown to size afterwards.
func ext4Image(t *testing.T, fsSize, size int64) string {
	t.Helper()
	image := filepath.Join(t.TempDir(), "device")
	if err := os.WriteFile(image, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(image, fsSize); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", image).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := os.Truncate(image, size); err != nil {
		t.Fatal(err)
	}
	return image
}
