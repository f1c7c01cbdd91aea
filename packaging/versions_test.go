// Package packaging holds the checks of the distribution packages: their
// versions sort as apt and dnf must see them (this file); make lint-packages
// runs lintian and rpmlint on them.
package packaging

import (
	"os/exec"
	"strings"
	"testing"
)

// pkgVersion asks the Makefile for the package version of a build.
func pkgVersion(t *testing.T, version, lastTag, commitTime, commit string) string {
	t.Helper()
	out, err := exec.Command("make", "-s", "-C", "..", "pkg-version", "VERSION="+version, "LAST_TAG="+lastTag,
		"COMMIT_TIME="+commitTime, "COMMIT="+commit).CombinedOutput()
	if err != nil {
		t.Fatalf("make pkg-version: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// Builds in commit order must get versions in the same order for dpkg and
// for rpm, whatever their hashes: apt and dnf must never see a later build as
// a downgrade.
func TestPackageVersionsSortByCommitTime(t *testing.T) {
	builds := []struct{ version, lastTag, time, commit string }{
		{"f0f0f0f", "", "20261101000000", "ffffffffffff"},
		{"0a0a0a0", "", "20261102000000", "000000000000"},
		{"v0.1.0", "0.1.0", "20261103000000", "999999999999"},
		{"v0.1.0-2-g1a1a1a1", "0.1.0", "20261104000000", "111111111111"},
		{"v0.1.0-3-g0b0b0b0-dirty", "0.1.0", "20261105000000", "0b0b0b0b0b0b"},
		{"v0.1.1", "0.1.1", "20261106000000", "555555555555"},
	}
	var versions []string
	for _, b := range builds {
		versions = append(versions, pkgVersion(t, b.version, b.lastTag, b.time, b.commit))
	}
	if versions[2] != "0.1.0" || versions[5] != "0.1.1" {
		t.Errorf("tagged builds got %q and %q", versions[2], versions[5])
	}
	for i := 1; i < len(versions); i++ {
		older, newer := versions[i-1], versions[i]
		if err := exec.Command("dpkg", "--compare-versions", older, "lt", newer).Run(); err != nil {
			t.Errorf("dpkg: %s is not older than %s", older, newer)
		}
		out, err := exec.Command("rpm", "--eval", `%{lua: print(rpm.vercmp("`+older+`", "`+newer+`"))}`).Output()
		if err != nil {
			t.Fatalf("rpm (installed by packaging/lint.sh and .ci/run): %v", err)
		}
		if strings.TrimSpace(string(out)) != "-1" {
			t.Errorf("rpm: %s is not older than %s (vercmp %s)", older, newer, out)
		}
	}
	t.Logf("versions: %v", versions)
}
