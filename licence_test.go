package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Nomad is open source (MPL-2.0) up to its 1.6 line; from v1.7.0 on it is
// under the BUSL, which this project uses nowhere: not in the product, not in
// the harness, not downloaded by any target. The api module
// (github.com/hashicorp/nomad/api) stays MPL-2.0 and is not concerned.

// nomadModuleVersion finds the main module with a version after it: a go.mod
// or go.sum line (`github.com/hashicorp/nomad v1.6.3`), a download or install
// (`github.com/hashicorp/nomad@v1.6.3`, or a query such as @latest). The
// character after "nomad" is a space or @, so the api module (`nomad/api`)
// never matches; after a space only a version counts (prose in a comment does
// not), after @ anything but a variable, which is judged where it is set.
var nomadModuleVersion = regexp.MustCompile(`github\.com/hashicorp/nomad(?:[ \t]+(v\d[^\s"'/)}]*)|@([^\s"'/)}$]+))`)

// nomadVersionSetting finds a value given to NOMAD_VERSION (a variable is
// judged where it is set, so `NOMAD_VERSION="$1"` is not read): a default
// (`${NOMAD_VERSION:-v1.6.3}`, `${NOMAD_VERSION:=…}`), a shell or make
// assignment (`NOMAD_VERSION=…`, `NOMAD_VERSION ?= …`, `NOMAD_VERSION := …`).
var nomadVersionSetting = regexp.MustCompile(`NOMAD_VERSION[ \t]*(?::-|:=|\?=|\+=|=)[ \t]*["']?([^\s"'})$][^\s"'})]*)?`)

// nomadRelease is a version the rule can judge: vX.Y.Z, a pre-release
// allowed, the v optional in a NOMAD_VERSION setting.
var nomadRelease = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$`)

// busl says why Nomad at version is not allowed, or "" when it is. A release
// before v1.7.0 is allowed; v1.7.0 and later are not, nor is a 1.7
// pre-release (v1.7.0-beta.1 was BUSL already), nor anything that is not a
// release: a pseudo-version or a query like latest may be any commit.
func busl(version string) string {
	m := nomadRelease.FindStringSubmatch(version)
	if m == nil || strings.HasPrefix(m[4], "0.") {
		return "not a release (a query or a pseudo-version may resolve to BUSL Nomad, v1.7.0 or later)"
	}
	var v [3]int
	for i := range v {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return "not a release: " + err.Error()
		}
		v[i] = n
	}
	if compareVersions(v, [3]int{1, 7, 0}) >= 0 || v[0] == 1 && v[1] == 7 {
		return "v1.7.0 or later: BUSL, not open source"
	}
	return ""
}

func compareVersions(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			return a[i] - b[i]
		}
	}
	return 0
}

// licenceFindings lists the lines of text that name BUSL Nomad, as
// "path:line: …".
func licenceFindings(path string, text []byte) []string {
	var findings []string
	scanner := bufio.NewScanner(bytes.NewReader(text))
	scanner.Buffer(nil, 1<<20)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		var versions []string
		for _, m := range nomadModuleVersion.FindAllStringSubmatch(line, -1) {
			versions = append(versions, m[1]+m[2])
		}
		for _, m := range nomadVersionSetting.FindAllStringSubmatch(line, -1) {
			if m[1] != "" {
				versions = append(versions, m[1])
			}
		}
		for _, version := range versions {
			if why := busl(version); why != "" {
				findings = append(findings, fmt.Sprintf("%s:%d: github.com/hashicorp/nomad %s: %s\n\t%s", path, n, version, why, strings.TrimSpace(line)))
			}
		}
	}
	return findings
}

// buildFile says whether the rule reads the file: a shell script, a
// Makefile, a *.mk, a go.mod or a go.sum.
func buildFile(path string) (bool, error) {
	name := filepath.Base(path)
	switch {
	case name == "Makefile" || name == "GNUmakefile" || name == "makefile" || name == "go.mod" || name == "go.sum":
		return true, nil
	case strings.HasSuffix(name, ".mk"):
		return true, nil
	case filepath.Ext(name) != "":
		return isShellScript(name, nil), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, 128)
	n, _ := f.Read(head)
	return isShellScript(name, head[:n]), nil
}

// shellShebang is the #! line of a script run by a POSIX-style shell.
var shellShebang = regexp.MustCompile(`^#!.*\b(ba|da|k|z)?sh\b`)

// isShellScript tells a shell script by its .sh or .bash name or, without
// an extension, by the #! line that text (the file's start) opens with.
func isShellScript(path string, text []byte) bool {
	switch filepath.Ext(path) {
	case ".sh", ".bash":
		return true
	case "":
		first, _, _ := bytes.Cut(text, []byte("\n"))
		return shellShebang.Match(first)
	}
	return false
}

func TestNoBUSLNomad(t *testing.T) {
	read := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "out" || d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		ok, err := buildFile(path)
		if err != nil || !ok {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		read++
		for _, finding := range licenceFindings(path, text) {
			t.Error(finding)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk must have found the harness's Nomad files, or it looked in the
	// wrong place.
	for _, path := range []string{"Makefile", "go.mod", "e2e/go.mod", "e2e/nomad/config.sh", "e2e/nomad/build-nomad.sh"} {
		if ok, err := buildFile(path); err != nil || !ok {
			t.Errorf("%s is not read by the rule (%v)", path, err)
		}
	}
	if read < 10 {
		t.Errorf("only %d files read: the walk missed the repository's scripts", read)
	}
}

func TestBUSLNomadFindings(t *testing.T) {
	for _, c := range []struct {
		line  string
		found bool
	}{
		{`NOMAD_VERSION="${NOMAD_VERSION:-v1.6.3}"`, false},
		{`NOMAD_VERSION="${NOMAD_VERSION:-v1.11.3}"`, true},
		{`NOMAD_VERSION="${NOMAD_VERSION:=1.7.0}"`, true},
		{`NOMAD_VERSION ?= v1.8.2`, true},
		{`NOMAD_VERSION := v1.6.2`, false},
		{`export NOMAD_VERSION=v2.0.0`, true},
		{`NOMAD_VERSION=v1.7.0-beta.1 make e2e-nomad`, true},
		{`NOMAD_VERSION="$1"`, false},
		{`	github.com/hashicorp/nomad v1.6.3`, false},
		{`	github.com/hashicorp/nomad v1.11.3 // indirect`, true},
		{`github.com/hashicorp/nomad v1.7.0/go.mod h1:abc=`, true},
		{`github.com/hashicorp/nomad v1.6.4-0.20231101000000-abcdefabcdef h1:abc=`, true},
		{`go install github.com/hashicorp/nomad@latest`, true},
		{`go mod download github.com/hashicorp/nomad@v1.10.0`, true},
		{`go mod download -json "github.com/hashicorp/nomad@$NOMAD_VERSION"`, false},
		{`# the module github.com/hashicorp/nomad (NOMAD_VERSION, v1.6.3) is built`, false},
		{`	github.com/hashicorp/nomad/api v0.0.0-20261016150620-df630b26e78a`, false},
		{`go mod download github.com/hashicorp/nomad/api@v1.11.3`, false},
		{`# built from the Go module github.com/hashicorp/nomad. Only its MPL-2.0 line`, false},
	} {
		got := licenceFindings("x.sh", []byte(c.line))
		if (len(got) > 0) != c.found {
			t.Errorf("%q: findings %q, want found=%v", c.line, got, c.found)
		}
	}
}
