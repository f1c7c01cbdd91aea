package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Section 7 is no measurement of the driver: it measures what the calls
// that must read before they write (DeleteVolume, CreateSnapshot: the
// ownership guard) could cost if the check and the change ran as one ZFS
// channel program (`zfs program`), one command and one transaction group,
// against the bare command. The scripts do the checks the driver's handlers
// do; they are not used by the driver.

// deleteProgram destroys a volume only if it carries the managed mark, is
// not marked deleted, and none of its snapshots is a CSI snapshot or has
// clones; then its snapshots and itself, in one transaction group.
const deleteProgram = `
local args = ...
local dataset, prefix = args["argv"][1], args["argv"][2]
local function prop(name, property)
	if not zfs.exists(name) then return nil end
	return zfs.get_prop(name, property)
end
if prop(dataset, prefix .. "managed") ~= "true" then error("not a volume of the driver") end
if prop(dataset, prefix .. "deleted") == "true" then error("marked deleted") end
local snapshots = {}
for snapshot in zfs.list.snapshots(dataset) do
	if prop(snapshot, prefix .. "snapshot-name") ~= nil then error("held by a CSI snapshot") end
	for clone in zfs.list.clones(snapshot) do error("held by a clone") end
	snapshots[#snapshots + 1] = snapshot
end
for _, snapshot in ipairs(snapshots) do
	local err = zfs.sync.destroy(snapshot)
	if err ~= 0 then error("destroying " .. snapshot .. ": " .. err) end
end
local err = zfs.sync.destroy(dataset)
if err ~= 0 then error("destroying " .. dataset .. ": " .. err) end
return 0
`

// snapshotProgram snapshots a volume only if it carries the managed mark
// and no snapshot of any volume under the parent has the CSI name, then
// names the snapshot, in one transaction group.
const snapshotProgram = `
local args = ...
local parent, dataset, snapshot, name, prefix = args["argv"][1], args["argv"][2], args["argv"][3], args["argv"][4], args["argv"][5]
local function prop(name, property)
	if not zfs.exists(name) then return nil end
	return zfs.get_prop(name, property)
end
if prop(dataset, prefix .. "managed") ~= "true" then error("not a volume of the driver") end
for child in zfs.list.children(parent) do
	for existing in zfs.list.snapshots(child) do
		if prop(existing, prefix .. "snapshot-name") == name then error("the name is taken by " .. existing) end
	end
end
local err = zfs.sync.snapshot(snapshot)
if err ~= 0 then error("snapshot: " .. err) end
err = zfs.sync.set_prop(snapshot, prefix .. "snapshot-name", name)
if err ~= 0 then error("set_prop: " .. err) end
return 0
`

// nameCheckProgram is the read of CreateSnapshot alone, as a read-only
// program (zfs program -n): which snapshot under the parent, if any, has
// the CSI name.
const nameCheckProgram = `
local args = ...
local parent, name, prefix = args["argv"][1], args["argv"][2], args["argv"][3]
for child in zfs.list.children(parent) do
	for snapshot in zfs.list.snapshots(child) do
		if zfs.get_prop(snapshot, prefix .. "snapshot-name") == name then return snapshot end
	end
end
return ""
`

// experiment is section 7.
func (b *bench) experiment(ctx context.Context) error {
	dir := filepath.Join(b.cfg.work, "programs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	deleteScript, snapshotScript := filepath.Join(dir, "delete.lua"), filepath.Join(dir, "snapshot.lua")
	if err := os.WriteFile(deleteScript, []byte(deleteProgram), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(snapshotScript, []byte(snapshotProgram), 0o644); err != nil {
		return err
	}
	checkScript := filepath.Join(dir, "check.lua")
	if err := os.WriteFile(checkScript, []byte(nameCheckProgram), 0o644); err != nil {
		return err
	}
	parent := b.dataset("exp")
	if err := b.zfs(ctx, []string{"create", parent}); err != nil {
		return err
	}
	prefix := driverName + ":"
	n := b.cfg.n
	name := func(side string, i int) string { return fmt.Sprintf("%s/%s-%d", parent, side, i) }
	// Volumes of the driver's, made by its command line: n for each side
	// of each item.
	sides := []string{"snap-program", "snap-bare", "delete-program", "delete-bare"}
	_, _, err := parallel(b.cfg.clients, 0, n*len(sides), func(k int) error {
		side, i := sides[k%len(sides)], k/len(sides)
		csiName := fmt.Sprintf("exp-%s-%d", side, i)
		return b.zfs(ctx, b.templates["create-fs"].with(map[string]string{b.props.CSIName: csiName}, name(side, i)))
	})
	if err != nil {
		return err
	}
	program := func(script string, args ...string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			return timed(ctx, func(ctx context.Context) error {
				return b.zfs(ctx, append([]string{"program", b.cfg.pool, script}, args...))
			})
		}
	}
	bare := func(args func(i int) []string, i int) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			return timed(ctx, func(ctx context.Context) error { return b.zfs(ctx, args(i)) })
		}
	}
	items := []struct {
		what    string
		program func(i int) func() (time.Duration, error)
		bare    func(i int) []string
	}{
		{"zfs program: check + snapshot + name it vs zfs snapshot -o",
			func(i int) func() (time.Duration, error) {
				return program(snapshotScript, parent, name("snap-program", i), name("snap-program", i)+"@snap", fmt.Sprintf("exp-snap-%d", i), prefix)
			},
			func(i int) []string {
				return b.templates["snapshot"].with(map[string]string{b.props.SnapshotName: fmt.Sprintf("exp-bare-snap-%d", i)},
					name("snap-bare", i)+"@snap")
			}},
		{"zfs program: check + destroy vs zfs destroy",
			func(i int) func() (time.Duration, error) {
				return program(deleteScript, name("delete-program", i), prefix)
			},
			func(i int) []string { return []string{"destroy", name("delete-bare", i)} }},
	}
	for _, it := range items {
		var programSide, bareSide samples
		for i := range n {
			err := interleave(i, nil, it.program(i), bare(it.bare, i), &programSide, &bareSide)
			if err != nil {
				r := row{section: "7", what: it.what, verdict: "failed: " + err.Error()}
				b.rows["7"] = append(b.rows["7"], r)
				fmt.Printf("=== bench: %s: %v\n", it.what, err)
				break
			}
		}
		if len(bareSide) == n {
			b.rows["7"] = append(b.rows["7"], compare("7", it.what, programSide, bareSide, 1.10))
		}
	}
	// Left: the snapshot item's volumes, each with one snapshot.
	return b.compareReads(ctx, parent, checkScript, prefix, 2*n)
}

// compareReads times the read CreateSnapshot makes (the driver's zfs list
// of everything under the parent) against the same question asked by a
// read-only channel program, and against a zfs list of snapshot names only,
// over the experiment's tree as the items leave it: volumes with one
// snapshot each.
func (b *bench) compareReads(ctx context.Context, parent, checkScript, prefix string, volumes int) error {
	if b.templates["snapshot-list"] == nil {
		return nil // CreateSnapshot made no zfs list to compare (a guarded snapshot)
	}
	reads := map[string][]string{
		"list":    append([]string{b.tools.zfs}, b.templates["snapshot-list"].with(nil, parent)...),
		"names":   {b.tools.zfs, "list", "-H", "-p", "-o", "name," + b.props.SnapshotName, "-t", "snapshot", "-d", "2", parent},
		"program": {b.tools.zfs, "program", "-n", b.cfg.pool, checkScript, parent, "no-such-snapshot", prefix},
	}
	times := map[string]samples{}
	order := []string{"list", "names", "program"}
	for round := range 10 {
		for k := range order {
			name := order[(round+k)%len(order)]
			took, _, err := run(ctx, reads[name]...)
			if err != nil {
				return err
			}
			times[name] = append(times[name], took)
		}
	}
	what := fmt.Sprintf("CreateSnapshot's read over %d volumes: ", volumes)
	b.rows["7"] = append(b.rows["7"],
		compare("7", what+"zfs program -n vs its zfs list", times["program"], times["list"], 0),
		compare("7", what+"zfs list -t snapshot -o name,<snapshot-name> vs its zfs list", times["names"], times["list"], 0))
	return nil
}
