package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The bare side runs zfs and mount directly. The counting run (section 6)
// puts wrappers for zfs and zpool first on the daemon's PATH that log each
// command's argv before exec'ing the real binary; the argv the driver ran
// there become the templates of the bare commands (the same options, the
// same properties, other dataset names), so "the same work" is the driver's
// own command line, not a copy of it that could drift. The same goes for
// its channel programs (programs.go).

// tools are the real binaries, resolved once.
type tools struct {
	zfs, zpool, mount string
}

func findTools() (tools, error) {
	var t tools
	for name, target := range map[string]*string{"zfs": &t.zfs, "zpool": &t.zpool, "mount": &t.mount} {
		path, err := exec.LookPath(name)
		if err != nil {
			return t, err
		}
		*target = path
	}
	return t, nil
}

// run runs a command to completion and returns how long it took; stdout is
// read into memory as the driver reads zfs list output.
func run(ctx context.Context, argv ...string) (time.Duration, []byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return took, nil, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.Join(strings.Fields(stderr.String()), " "))
	}
	return took, stdout.Bytes(), nil
}

// wrapperScript logs "<time>\t<tool>\t<args…>" in one write, then becomes
// the real tool. Bash's $EPOCHREALTIME costs no extra process. A channel
// program's script (zfs program reads it from stdin) is kept beside the
// log as stdin-<time>, so that the bare side can run the same program.
const wrapperScript = `#!/bin/bash
now="$EPOCHREALTIME"
line="$now"$'\t'%s
for arg in "$@"; do line+=$'\t'"$arg"; done
printf '%%s\n' "$line" >>%s
if [[ ${1:-} == program ]]; then
	stdin=%s/stdin-"$now"
	cat >"$stdin"
	exec %s "$@" <"$stdin"
fi
exec %s "$@"
`

// commandLog is the counting run's log of the commands the daemon ran.
type commandLog struct {
	dir, path string
}

// newCommandLog writes the wrappers into dir; PATH for the daemon is
// dir:$PATH.
func newCommandLog(dir string, t tools) (*commandLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l := &commandLog{dir: dir, path: filepath.Join(dir, "commands.log")}
	for name, real := range map[string]string{"zfs": t.zfs, "zpool": t.zpool} {
		script := fmt.Sprintf(wrapperScript, name, strconv.Quote(l.path), strconv.Quote(dir), strconv.Quote(real), strconv.Quote(real))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			return nil, err
		}
	}
	return l, os.WriteFile(l.path, nil, 0o644)
}

func (l *commandLog) pathEnv() string { return l.dir + ":" + os.Getenv("PATH") }

// loggedCommand is one line of the log.
type loggedCommand struct {
	at    time.Time
	stamp string // the time as logged, which names a program's script
	tool  string
	args  []string
}

// name is "create", "list", … for zfs, "zpool list" for zpool, as the
// daemon's metrics name them.
func (c loggedCommand) name() string {
	sub := ""
	if len(c.args) > 0 {
		sub = c.args[0]
	}
	if c.tool == "zpool" {
		return "zpool " + sub
	}
	return sub
}

func (l *commandLog) read() ([]loggedCommand, error) {
	data, err := os.ReadFile(l.path)
	if err != nil {
		return nil, err
	}
	return parseCommandLog(string(data))
}

func parseCommandLog(text string) ([]loggedCommand, error) {
	var commands []loggedCommand
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line == "" {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) < 2 {
			return nil, fmt.Errorf("command log line %q", line)
		}
		at, err := parseEpoch(fields[0])
		if err != nil {
			return nil, fmt.Errorf("command log line %q: %w", line, err)
		}
		commands = append(commands, loggedCommand{at: at, stamp: fields[0], tool: fields[1], args: fields[2:]})
	}
	return commands, nil
}

// parseEpoch reads bash's $EPOCHREALTIME, "seconds.microseconds".
func parseEpoch(text string) (time.Time, error) {
	whole, fraction, _ := strings.Cut(text, ".")
	seconds, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	micros := int64(0)
	if fraction != "" {
		if micros, err = strconv.ParseInt((fraction + "000000")[:6], 10, 64); err != nil {
			return time.Time{}, err
		}
	}
	return time.Unix(seconds, micros*1000), nil
}

// summarize renders commands as "2: list, create", in the order they ran.
func summarize(commands []loggedCommand) string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name()
	}
	if len(names) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d: %s", len(names), strings.Join(names, ", "))
}

// countSummary renders how often each command ran, for larger counts.
func countSummary(commands []loggedCommand) string {
	byName := map[string]int{}
	for _, c := range commands {
		byName[c.name()]++
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s×%d", name, byName[name])
	}
	return fmt.Sprintf("%d: %s", len(commands), strings.Join(parts, ", "))
}

// template is an argv the driver ran (without the tool), to be replayed
// with other operands and other values of some properties.
type template []string

// with returns the argv for the bare side: the last len(operands) arguments
// replaced by operands, and "-o key=value" options whose key is in values
// given the new value.
func (t template) with(values map[string]string, operands ...string) []string {
	if len(operands) > len(t) {
		panic(fmt.Sprintf("template %q has fewer than %d operands", t, len(operands)))
	}
	argv := append([]string(nil), t...)
	for i := 0; i+1 < len(argv)-len(operands); i++ {
		if argv[i] != "-o" {
			continue
		}
		key, _, _ := strings.Cut(argv[i+1], "=")
		if value, ok := values[key]; ok {
			argv[i+1] = key + "=" + value
		}
	}
	copy(argv[len(argv)-len(operands):], operands)
	return argv
}
