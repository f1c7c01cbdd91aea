package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Where the driver changes ZFS with a channel program (DeleteVolume,
// DeleteSnapshot, CreateSnapshot on a ZFS whose programs set properties),
// the cheapest bare equivalent of its work is not obvious: the plain
// command does less (no guard, no properties read back), the program does
// exactly the same. So those rows are printed twice: against the plain
// command, and against the same program with the same arguments on the
// bare side's datasets, run by zfs program as the driver runs it. The
// counting run (section 6) keeps the script each program read from stdin.

// minimalSnapshotProgram is a prototype of the least a snapshot program can be: a snapshot
// program that does only the snapshot and its properties.
//
//go:embed minimal_snapshot.lua
var minimalSnapshotProgram string

// minimal returns the prototype program with the snapshot and the
// properties of a snapshot program template (the pairs after its "--").
func (t programTemplate) minimal() programTemplate {
	argv := append([]string(nil), t.argv[:5]...) // program -j -- <pool> -
	argv = append(argv, t.argv[5])               // the snapshot
	for i := 6; i < len(t.argv); i++ {
		if t.argv[i] == "--" { // the first: snapshot names before it, property pairs after
			argv = append(argv, t.argv[i+1:]...)
			break
		}
	}
	return programTemplate{argv: argv, script: minimalSnapshotProgram, roles: t.roles}
}

// programTemplate is a channel program the driver ran: its argv (without
// the tool) and its script.
type programTemplate struct {
	argv   []string
	script string
	// roles names what the arguments mention ("dataset", "snapshot",
	// "name" for a CSI name), as the counting run's objects.
	roles map[string]string
}

// captureProgram keeps the first zfs program among commands as the template
// name, with the roles its arguments play. Without one (a ZFS whose programs
// cannot set properties snapshots with zfs snapshot) it keeps nothing and
// the rows go without the program side.
func (c *counter) captureProgram(name string, commands []loggedCommand, roles map[string]string) error {
	for _, command := range commands {
		if command.name() != "program" {
			continue
		}
		script, err := os.ReadFile(filepath.Join(c.log.dir, "stdin-"+command.stamp))
		if err != nil {
			return fmt.Errorf("the script of %v: %w", command.args, err)
		}
		c.b.programs[name] = programTemplate{argv: command.args, script: string(script), roles: roles}
		return nil
	}
	c.b.notes = append(c.b.notes, fmt.Sprintf("section 6: no zfs program in %s: its rows have no program side", name))
	return nil
}

// as returns the template for other objects: values by role.
func (t programTemplate) as(values map[string]string) programTemplate {
	names := map[string]string{}
	for role, value := range values {
		if old, ok := t.roles[role]; ok {
			names[old] = value
		}
	}
	return t.with(names)
}

// with returns the template with every argument that is one of the keys of
// names, or starts with one followed by "@", renamed: the driver's datasets,
// snapshots and CSI names become the bare side's.
func (t programTemplate) with(names map[string]string) programTemplate {
	keys := make([]string, 0, len(names))
	for key := range names {
		keys = append(keys, key)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) }) // a snapshot before its dataset
	argv := append([]string(nil), t.argv...)
	for i, arg := range argv {
		for _, key := range keys {
			if arg == key {
				argv[i] = names[key]
				break
			}
			if rest, found := strings.CutPrefix(arg, key+"@"); found {
				argv[i] = names[key] + "@" + rest
				break
			}
		}
	}
	return programTemplate{argv: argv, script: t.script, roles: t.roles}
}

// runProgram runs a program template bare and checks that it did the work
// (outcome "done"): a guard that refused would be a cheaper, other work.
func (b *bench) runProgram(ctx context.Context, t programTemplate) (time.Duration, error) {
	if len(t.argv) == 0 {
		return 0, fmt.Errorf("no program captured")
	}
	cmd := exec.CommandContext(ctx, b.tools.zfs, t.argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(t.script), &stdout, &stderr
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return took, fmt.Errorf("zfs %s: %w: %s", strings.Join(t.argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return took, programDone(stdout.Bytes(), t.argv)
}

// programDone checks zfs program -j's output for the outcome "done".
func programDone(out []byte, argv []string) error {
	var result struct {
		Return struct {
			Outcome string `json:"outcome"`
		} `json:"return"`
	}
	if err := json.Unmarshal(out, &result); err != nil {
		return fmt.Errorf("zfs %s: output %q: %w", strings.Join(argv, " "), out, err)
	}
	if result.Return.Outcome != "done" {
		return fmt.Errorf("zfs %s: outcome %q, want done: %s", strings.Join(argv, " "), result.Return.Outcome, out)
	}
	return nil
}

// groupProgram returns the group snapshot program the driver ran, for other
// datasets under one parent, a snapshot component and a group name: its
// arguments are nine fixed ones (snapshot, owned, excluded, group, name,
// named, size, pending, count property), the datasets, "--", the parents,
// "--", snapshots named elsewhere (none here).
func (t programTemplate) groupProgram(snapshot, name, parent string, datasets []string) (programTemplate, error) {
	const prefix, fixed = 5, 9 // program -j -- <pool> -
	if len(t.argv) < prefix+fixed {
		return programTemplate{}, fmt.Errorf("group snapshot program %q: fewer than %d arguments", t.argv, fixed)
	}
	argv := append([]string(nil), t.argv[:prefix+fixed]...)
	argv[prefix], argv[prefix+4] = snapshot, name
	argv = append(append(append(argv, datasets...), "--", parent), "--")
	return programTemplate{argv: argv, script: t.script}, nil
}
