//go:build e2e

package tests

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestProbeGroupProgramCost(t *testing.T) {
	parent := testParent(t)
	var names []string
	for i := range 16 {
		name := fmt.Sprintf("%s/v%d", parent, i)
		mustRun(t, "zfs", "create", "-o", "zfs.csi.dev:managed=true", name)
		names = append(names, name)
	}
	run := func(label, script string, args ...string) {
		start := time.Now()
		cmd := exec.Command("zfs", append([]string{"program", "-j", "--", pool(), "-"}, args...)...)
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		t.Logf("%s: %s %v %s", label, time.Since(start), err, firstN(string(out), 200))
	}
	snapOnly := `local argv = (...)["argv"]
for i = 2, #argv do local e = zfs.sync.snapshot(argv[i] .. "@" .. argv[1]); if e ~= 0 then return {e = e} end end
return {ok = 1}`
	withProps := `local argv = (...)["argv"]
for i = 2, #argv do local e = zfs.sync.snapshot(argv[i] .. "@" .. argv[1]); if e ~= 0 then return {e = e} end end
for i = 2, #argv do
  local s = argv[i] .. "@" .. argv[1]
  zfs.sync.set_prop(s, "zfs.csi.dev:group", "g"); zfs.sync.set_prop(s, "zfs.csi.dev:snapshot-name", "g/x"); zfs.sync.set_prop(s, "zfs.csi.dev:size", "1")
end
return {ok = 1}`
	reads := `local argv = (...)["argv"]
local n = 0
for i = 2, #argv do
  local d = argv[i]
  for _, p in ipairs({"type", "refquota", "zfs.csi.dev:managed", "zfs.csi.dev:deleted"}) do if zfs.get_prop(d, p) ~= nil then n = n + 1 end end
end
return {ok = n}`
	for round := range 2 {
		run(fmt.Sprintf("round %d: 16 zfs.sync.snapshot", round), snapOnly, append([]string{fmt.Sprintf("a%d", round)}, names...)...)
		run(fmt.Sprintf("round %d: 16 snapshots + 48 set_prop", round), withProps, append([]string{fmt.Sprintf("b%d", round)}, names...)...)
		run(fmt.Sprintf("round %d: 64 get_prop, no sync", round), reads, append([]string{"x"}, names...)...)
		start := time.Now()
		args := []string{"snapshot"}
		for _, n := range names {
			args = append(args, fmt.Sprintf("%s@c%d", n, round))
		}
		exec.Command("zfs", args...).Run()
		t.Logf("round %d: zfs snapshot of 16: %s", round, time.Since(start))
	}
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
