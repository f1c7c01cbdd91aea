//go:build e2e

package tests

import (
	"context"
	"os/exec"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// zfsPool is real ZFS as a zfstest.Pool: the driver's Exec, and the zfs
// command for what only an operator does.
type zfsPool struct{ *zfs.Exec }

func (zfsPool) Hold(ctx context.Context, snapshot string) error {
	return exec.CommandContext(ctx, "zfs", "hold", "zfstest", snapshot).Run()
}

func (zfsPool) Release(ctx context.Context, snapshot string) error {
	return exec.CommandContext(ctx, "zfs", "release", "zfstest", snapshot).Run()
}

// The table the Fake runs in `go test` (zfstest.TestGuardedCasesOnTheFake), on
// real ZFS: the channel programs and the Fake follow the same rules. On a ZFS
// whose programs cannot set properties the snapshot cases are unsupported and
// say so.
func TestGuardedCasesOnZFS(t *testing.T) {
	parent := testParent(t)
	pool := zfsPool{zfs.NewExec(zfs.ExecConfig{})}
	for i, c := range zfstest.GuardedCases() {
		t.Run(c.Name, func(t *testing.T) {
			problem, skip, err := zfstest.RunGuardedCase(ctx(t), pool, parent, i, c)
			switch {
			case err != nil:
				t.Fatal(err)
			case skip:
				t.Skip("this ZFS cannot make it in one transaction (ErrUnsupported)")
			case problem != "":
				t.Error(problem)
			}
		})
	}
}
