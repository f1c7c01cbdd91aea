package zfstest_test

import (
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// The table e2e/tests runs against real ZFS (TestRuleCasesOnZFS), here
// against the Fake.
func TestRuleCasesOnTheFake(t *testing.T) {
	for i, c := range zfstest.RuleCases() {
		t.Run(c.Name, func(t *testing.T) {
			fake := zfstest.NewFake(map[string]uint64{"tank": 1 << 40})
			if err := fake.Create(t.Context(), "tank/cases", zfs.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			answer, problem, err := zfstest.RunRuleCase(t.Context(), fakePool{fake}, "tank/cases", i, c)
			t.Logf("the Fake answered: %s", answer)
			switch {
			case err != nil:
				t.Fatal(err)
			case problem != "":
				t.Error(problem)
			}
		})
	}
}
