//go:build e2e

package tests

import (
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// The table the Fake runs in `go test` (zfstest.TestRuleCasesOnTheFake), on
// real ZFS through the driver's Exec: the names, sizes, destroys and
// receives ZFS refuses, with the kinds Exec gives them. Each subtest logs
// what ZFS said.
func TestRuleCasesOnZFS(t *testing.T) {
	parent := testParent(t)
	pool := zfsPool{zfs.NewExec(zfs.ExecConfig{})}
	for i, c := range zfstest.RuleCases() {
		t.Run(c.Name, func(t *testing.T) {
			answer, problem, err := zfstest.RunRuleCase(ctx(t), pool, parent, i, c)
			t.Logf("ZFS answered: %s", answer)
			switch {
			case err != nil:
				t.Fatal(err)
			case problem != "":
				t.Error(problem)
			}
		})
	}
}
