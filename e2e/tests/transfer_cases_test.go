//go:build e2e

package tests

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// Fill implements zfstest.TransferPool: random bytes (incompressible) in a
// file of the filesystem, where zfs mounted it.
func (zfsPool) Fill(ctx context.Context, dataset string, size uint64) error {
	out, err := exec.CommandContext(ctx, "zfs", "get", "-H", "-o", "value", "mountpoint", dataset).Output()
	if err != nil {
		return err
	}
	data := make([]byte, size)
	_, _ = rand.Read(data)
	file, err := os.CreateTemp(strings.TrimSpace(string(out)), "fill-*")
	if err != nil {
		return err
	}
	defer file.Close()
	if _, err := file.Write(data); err != nil {
		return err
	}
	if err := file.Sync(); err != nil {
		return err
	}
	return exec.CommandContext(ctx, "sync", "-f", filepath.Dir(file.Name())).Run()
}

// The table the Fake runs in `go test` (zfstest.TestTransferCasesOnTheFake),
// on real ZFS: send, receive -s, resume tokens and raw streams as the Fake
// plays them.
func TestTransferCasesOnZFS(t *testing.T) {
	parent := testParent(t)
	pool := zfsPool{zfs.NewExec(zfs.ExecConfig{})}
	for i, c := range zfstest.TransferCases() {
		t.Run(c.Name, func(t *testing.T) {
			problem, _, err := zfstest.RunGuardedCase(ctx(t), pool, parent, 100+i, c)
			switch {
			case err != nil:
				t.Fatal(err)
			case problem != "":
				t.Error(problem)
			}
		})
	}
}
