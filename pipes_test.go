package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// earlyPipeReader matches a pipe into a reader that may stop before its
// writer is done: head, grep -q or -m, an awk program that exits. The
// writer's next write then kills it with SIGPIPE, and under pipefail the
// pipeline fails with 141 whenever the writer happened to write after the
// reader stopped: a step passes or fails on timing. sed -n 1p, grep with its
// output sent to /dev/null and awk's END read to the end.
var earlyPipeReader = regexp.MustCompile(`(^|[^|])\|\s*(head\b|grep\s+(-\S+\s+)*-[A-Za-z]*[qm]|awk\b.*\bexit\b)`)

// earlyPipeReaders lists the lines of a shell script that pipe into a reader
// that may stop early; comment lines are skipped.
func earlyPipeReaders(text string) []string {
	var found []string
	for i, line := range strings.Split(text, "\n") {
		code := strings.TrimSpace(line)
		if strings.HasPrefix(code, "#") {
			continue
		}
		if earlyPipeReader.MatchString(code) {
			found = append(found, strconv.Itoa(i+1)+": "+code)
		}
	}
	return found
}

func TestNoScriptStopsReadingAPipe(t *testing.T) {
	check := func(path string, text []byte) {
		if !isShellScript(path, text) {
			return
		}
		for _, line := range earlyPipeReaders(string(text)) {
			t.Errorf("%s:%s: a reader that may stop before its writer (SIGPIPE, 141 under pipefail); read to the end: sed -n 1p, grep >/dev/null, awk's END", path, line)
		}
	}
	walkSources(t, check)
	// walkSources leaves hidden directories out; CI's script is one.
	text, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	check(".ci/run", text)
}

func TestEarlyPipeReadersAreFound(t *testing.T) {
	for _, test := range []struct {
		line  string
		found bool
	}{
		{`v="$(runc --version | head -1)"`, true},
		{`x | head -n 20`, true},
		{`ctr version | grep -q "^Server"`, true},
		{`rpm -qc zfs-csi | grep -qx /etc/x`, true},
		{`find . | grep -F -q x`, true},
		{`journalctl | grep -m1 ready`, true},
		{`ctr version | awk '/^Server:/ {print $2; exit}'`, true},
		{`runc --version | sed -n 1p`, false},
		{`ls x 2>/dev/null | grep . >/dev/null`, false},
		{`ctr version | awk '$1 == "Version:" && v == "" {v = $2} END {print v}'`, false},
		{`grep -q x file`, false},
		{`awk '{print; exit}' file`, false},
		{`grep -q x <<<"$text"`, false},
		{`grep -q x a || grep -qi y b`, false},
		{`[[ -f a ]]||head -1 b`, false},
		{`# a comment: x | head -1`, false},
	} {
		got := len(earlyPipeReaders(test.line)) > 0
		if got != test.found {
			t.Errorf("%s: found %v, want %v", test.line, got, test.found)
		}
	}
	if !isShellScript("e2e/image/bootstrap-init", []byte("#!/bin/bash\nset -e\n")) || isShellScript("README.md", []byte("# zfs-csi\n")) {
		t.Error("isShellScript: a #!/bin/bash file is a script, README.md is not")
	}
}
