package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
