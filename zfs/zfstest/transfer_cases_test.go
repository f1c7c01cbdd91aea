package zfstest_test

import (
	"context"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// Fill implements zfstest.TransferPool.
func (p fakePool) Fill(_ context.Context, dataset string, size uint64) error {
	return p.Fake.Write(dataset, size)
}

// The table e2e/tests runs against real ZFS (TestTransferCasesOnZFS), here
// against the Fake.
func TestTransferCasesOnTheFake(t *testing.T) {
	for i, c := range zfstest.TransferCases() {
		t.Run(c.Name, func(t *testing.T) {
			fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40})
			if err := fake.Create(t.Context(), "tank/cases", zfs.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			problem, _, err := zfstest.RunGuardedCase(t.Context(), fakePool{fake}, "tank/cases", i, c)
			switch {
			case err != nil:
				t.Fatal(err)
			case problem != "":
				t.Error(problem)
			}
		})
	}
}
