package zfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// The channel programs are Lua files (programs/*.lua) embedded in the
// binary: each must parse and compile as Lua, and every file must be one of
// them, so that a program cannot fail only when ZFS first loads it (the
// kernel reports a syntax error as a failed command at run time). gopher-lua
// speaks Lua 5.1 and ZFS runs 5.2; the programs use the language both share.
func TestChannelProgramsAreLua(t *testing.T) {
	programs := map[string]string{
		"destroy.lua":          destroyProgram,
		"snapshot.lua":         snapshotProgram,
		"destroy_snapshot.lua": destroySnapshotProgram,
		"group_snapshot.lua":   groupSnapshotProgram,
		"probe.lua":            probeProgram,
		"inherit.lua":          inheritProgram,
	}
	files, err := filepath.Glob("programs/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, file := range files {
		names = append(names, filepath.Base(file))
	}
	for name := range programs {
		if !slices.Contains(names, name) {
			t.Errorf("%s is not in programs/", name)
		}
	}
	for _, name := range names {
		script, embedded := programs[name]
		if !embedded {
			t.Errorf("programs/%s is embedded in no program", name)
			continue
		}
		if on, err := os.ReadFile(filepath.Join("programs", name)); err != nil || string(on) != script {
			t.Errorf("programs/%s differs from what is embedded (%v)", name, err)
		}
		chunk, err := parse.Parse(strings.NewReader(script), name)
		if err != nil {
			t.Errorf("%s does not parse: %v", name, err)
			continue
		}
		if _, err := lua.Compile(chunk, name); err != nil {
			t.Errorf("%s does not compile: %v", name, err)
		}
	}
}

// A syntax error is what the test above must catch.
func TestChannelProgramCheckCatchesASyntaxError(t *testing.T) {
	if _, err := parse.Parse(strings.NewReader(snapshotProgram+"\nif then end\n"), "broken.lua"); err == nil {
		t.Error("a broken program parsed")
	}
}
