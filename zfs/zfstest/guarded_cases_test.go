package zfstest_test

import (
	"context"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// fakePool is the Fake as a zfstest.Pool.
type fakePool struct{ *zfstest.Fake }

func (p fakePool) Hold(_ context.Context, snapshot string) error    { return p.Fake.Hold(snapshot) }
func (p fakePool) Release(_ context.Context, snapshot string) error { return p.Fake.Release(snapshot) }

// The table e2e/tests runs against real ZFS (TestGuardedCasesOnZFS), here
// against the Fake.
func TestGuardedCasesOnTheFake(t *testing.T) {
	for i, c := range zfstest.GuardedCases() {
		t.Run(c.Name, func(t *testing.T) {
			fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40})
			if err := fake.Create(t.Context(), "tank/cases", zfs.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			problem, skip, err := zfstest.RunGuardedCase(t.Context(), fakePool{fake}, "tank/cases", i, c)
			switch {
			case err != nil:
				t.Fatal(err)
			case skip:
				t.Fatal("the Fake plays ZFS 2.2 or later: no case may be unsupported")
			case problem != "":
				t.Error(problem)
			}
		})
	}
}
