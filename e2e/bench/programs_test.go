package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// The counting run's wrapper logs a zfs program like any command and keeps
// the script it reads from stdin, which still reaches the real tool.
func TestTheWrapperKeepsAProgramsScript(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real-zfs")
	// The "real" zfs echoes its stdin, so the test sees what reached it.
	if err := os.WriteFile(real, []byte("#!/bin/sh\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	log, err := newCommandLog(filepath.Join(dir, "wrappers"), tools{zfs: real, zpool: real})
	if err != nil {
		t.Fatal(err)
	}
	script := "return {outcome = \"done\"}\n-- a second line\n"
	for _, args := range [][]string{{"program", "-j", "--", "tank", "-", "tank/a"}, {"list", "-H"}} {
		cmd := exec.Command(filepath.Join(log.dir, "zfs"), args...)
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.Output()
		if err != nil || string(out) != script {
			t.Fatalf("%v: the tool got %q on stdin (%v), want the script", args, out, err)
		}
	}
	commands, err := log.read()
	if err != nil || len(commands) != 2 {
		t.Fatalf("logged %+v, %v", commands, err)
	}
	b := &bench{programs: map[string]programTemplate{}}
	c := &counter{b: b, log: log}
	if err := c.captureProgram("p", commands, map[string]string{"dataset": "tank/a"}); err != nil {
		t.Fatal(err)
	}
	got := b.programs["p"]
	if got.script != script || !reflect.DeepEqual(got.argv, []string{"program", "-j", "--", "tank", "-", "tank/a"}) {
		t.Errorf("captured %+v", got)
	}
	if kept, _ := filepath.Glob(filepath.Join(log.dir, "stdin-*")); len(kept) != 1 {
		t.Errorf("scripts kept: %v, want the program's only", kept)
	}
}

// A program's arguments are renamed by role: a dataset, its snapshots, a
// CSI name; the pool and the other arguments stay.
func TestAProgramTemplateTakesTheBareSidesNames(t *testing.T) {
	template := programTemplate{
		argv:   []string{"program", "-j", "--", "tank", "-", "tank/c/v@snap-1", "tank/c/v", "m:managed", "", "m:name", "tank/c/v@other", "--", "m:name", "count-snap"},
		script: "s",
		roles:  map[string]string{"snapshot": "tank/c/v@snap-1", "dataset": "tank/c/v", "name": "count-snap"},
	}
	got := template.as(map[string]string{"snapshot": "tank/b/fs-3@prog", "dataset": "tank/b/fs-3", "name": "bare-3"})
	want := []string{"program", "-j", "--", "tank", "-", "tank/b/fs-3@prog", "tank/b/fs-3", "m:managed", "", "m:name", "tank/b/fs-3@other", "--", "m:name", "bare-3"}
	if !reflect.DeepEqual(got.argv, want) || got.script != "s" {
		t.Errorf("got %q, want %q", got.argv, want)
	}
	if !reflect.DeepEqual(template.argv[5], "tank/c/v@snap-1") {
		t.Error("the template itself changed")
	}
}

// A bare program counts only when it did the work: a guard that refused
// did other, cheaper work.
func TestABareProgramMustHaveDoneTheWork(t *testing.T) {
	if err := programDone([]byte(`{"return": {"outcome": "done", "type": "filesystem"}}`), nil); err != nil {
		t.Error(err)
	}
	for _, out := range []string{`{"return": {"outcome": "not-owned"}}`, `{"return": {}}`, `not json`} {
		if err := programDone([]byte(out), []string{"program"}); err == nil {
			t.Errorf("%s: accepted", out)
		}
	}
	b := &bench{tools: tools{zfs: "/bin/true"}}
	if _, err := b.runProgram(context.Background(), programTemplate{}); err == nil {
		t.Error("an empty template ran")
	}
}

// The prototype keeps the snapshot and the property pairs of the driver's
// program, and its script is Lua.
func TestTheMinimalSnapshotProgramTakesTheSnapshotAndItsProperties(t *testing.T) {
	template := programTemplate{argv: []string{"program", "-j", "--", "tank", "-", "tank/v@s", "tank/v", "m:managed", "", "m:name",
		"", "m:size", "", "m:pending", "tank/w@s", "--", "m:name", "n", "m:size", "1073741824"}}
	got := template.minimal()
	want := []string{"program", "-j", "--", "tank", "-", "tank/v@s", "m:name", "n", "m:size", "1073741824"}
	if !reflect.DeepEqual(got.argv, want) || got.script != minimalSnapshotProgram {
		t.Errorf("got %q, want %q", got.argv, want)
	}
	chunk, err := parse.Parse(strings.NewReader(minimalSnapshotProgram), "minimal_snapshot.lua")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lua.Compile(chunk, "minimal_snapshot.lua"); err != nil {
		t.Error(err)
	}
}

// The group program keeps its nine fixed arguments but the snapshot and
// the group name, and takes the bare datasets and their one parent.
func TestTheGroupProgramTakesTheBareDatasets(t *testing.T) {
	template := programTemplate{argv: []string{"program", "-j", "--", "tank", "-", "group_g-1", "m:managed", "m:deleted", "m:group", "g",
		"m:name", "m:size", "m:pending", "m:count", "tank/c/a", "tank/c/b", "--", "tank/c", "--", "tank/c/x@group_g-1"}, script: "s"}
	got, err := template.groupProgram("prog-1", "bare-1", "tank/b", []string{"tank/b/v-0", "tank/b/v-1", "tank/b/v-2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"program", "-j", "--", "tank", "-", "prog-1", "m:managed", "m:deleted", "m:group", "bare-1",
		"m:name", "m:size", "m:pending", "m:count", "tank/b/v-0", "tank/b/v-1", "tank/b/v-2", "--", "tank/b", "--"}
	if !reflect.DeepEqual(got.argv, want) || got.script != "s" {
		t.Errorf("got %q, want %q", got.argv, want)
	}
	if _, err := (programTemplate{argv: []string{"program"}}).groupProgram("a", "b", "c", nil); err == nil {
		t.Error("a template without the fixed arguments was taken")
	}
}
