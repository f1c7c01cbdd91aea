package main

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// The CSI livenessprobe sidecar listens on 9808 by convention: the metrics
// port the documentation and the packaged defaults suggest must be another.
func TestMetricsExamplesStayOffTheLivenessProbesPort(t *testing.T) {
	for _, path := range []string{"README.md", "docs/monitoring.md", "packaging/default/zfs-csi"} {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(text), "9808") {
			t.Errorf("%s suggests port 9808, the livenessprobe's", path)
		}
		if !strings.Contains(string(text), "9820") {
			t.Errorf("%s no longer names the metrics port 9820", path)
		}
	}
}

// readmeBlock is the indented command block after the line heading in
// README.md, one command a line (as e2e/guest/systemd/readme.sh reads it).
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	text, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	found := false
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case line == heading:
			found = true
		case found && strings.HasPrefix(line, "    "):
			block = append(block, strings.TrimPrefix(line, "    "))
		case found && len(block) > 0:
			return block
		}
	}
	if len(block) == 0 {
		t.Fatalf("README.md has no command block after %q", heading)
	}
	return block
}

// TestTheInstallCommandsPickOnePackage: make deb and make rpm build every
// architecture's package into dist/, so the README's install line must
// name this host's alone (apt and dnf refuse two architectures of one
// package in one transaction).
func TestTheInstallCommandsPickOnePackage(t *testing.T) {
	dist := filepath.Join(t.TempDir(), "dist")
	if err := os.Mkdir(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"zfs-csi_1.2.3-1_amd64.deb", "zfs-csi_1.2.3-1_arm64.deb", "zfs-csi-1.2.3-1.x86_64.rpm", "zfs-csi-1.2.3-1.aarch64.rpm"} {
		if err := os.WriteFile(filepath.Join(dist, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for heading, tool := range map[string]string{"**Debian, Ubuntu:**": "apt-get install", "**RPM-based (Fedora, RHEL and derivatives, with the OpenZFS repository):**": "dnf install"} {
		for _, line := range readmeBlock(t, heading) {
			_, after, ok := strings.Cut(line, tool+" ")
			if !ok {
				continue
			}
			if tool == "apt-get install" {
				if _, err := exec.LookPath("dpkg"); err != nil {
					t.Skip("skipped: no dpkg to tell this host's architecture")
				}
			}
			cmd := exec.Command("bash", "-c", "printf '%s\\n' "+after)
			cmd.Dir = filepath.Dir(dist)
			out, err := cmd.Output()
			packages := strings.Fields(string(out))
			if err != nil || len(packages) != 1 || strings.Contains(packages[0], "*") {
				t.Errorf("%q names %q in a dist/ of two architectures (%v), want exactly one existing package", line, packages, err)
			}
		}
	}
}

// TestTheDocumentsLinkToWhatExists: README.md and docs/ link to each other
// by relative paths and heading anchors; a section moved or renamed must not
// leave a link to nowhere.
func TestTheDocumentsLinkToWhatExists(t *testing.T) {
	documents, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	documents = append(documents, "README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, document := range documents {
		text, err := os.ReadFile(document)
		if err != nil {
			t.Fatal(err)
		}
		for _, match := range link.FindAllStringSubmatch(outsideCodeFences(string(text)), -1) {
			target := match[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := document
			if file != "" {
				path = filepath.Join(filepath.Dir(document), file)
			}
			linked, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s links to %s: %v", document, target, err)
				continue
			}
			if anchor != "" && !slices.Contains(headingAnchors(string(linked)), anchor) {
				t.Errorf("%s links to %s: %s has no heading whose anchor is #%s", document, target, path, anchor)
			}
		}
	}
}

// outsideCodeFences is markdown without its fenced code blocks.
func outsideCodeFences(markdown string) string {
	var kept []string
	fenced := false
	for _, line := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

// headingAnchors lists the anchors GitHub makes for a Markdown file's
// headings: lower case, spaces as hyphens, other punctuation dropped.
func headingAnchors(markdown string) []string {
	var anchors []string
	for _, line := range strings.Split(outsideCodeFences(markdown), "\n") {
		heading := strings.TrimLeft(line, "#")
		if heading == line || !strings.HasPrefix(heading, " ") {
			continue
		}
		var anchor strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				anchor.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				anchor.WriteRune(r)
			}
		}
		anchors = append(anchors, anchor.String())
	}
	return anchors
}

// TestNomadVolumeSpecsTakeTheirNodeFromTheReader: the shipped volume specs
// name their client @NODE@, and docs/nomad.md's step fills it in with the
// same sed for each (nomad volume create takes no variables); after the
// sed no placeholder is left.
func TestNomadVolumeSpecsTakeTheirNodeFromTheReader(t *testing.T) {
	readme, err := os.ReadFile("docs/nomad.md")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := filepath.Glob("packaging/nomad/volume-*.hcl")
	if err != nil || len(specs) == 0 {
		t.Fatalf("no volume specs: %v", err)
	}
	for _, spec := range specs {
		command := `sed "s/@NODE@/$NODE/" ` + filepath.Base(spec) + ` | nomad volume create -`
		if !strings.Contains(string(readme), command) {
			t.Errorf("docs/nomad.md does not create %s with %q", filepath.Base(spec), command)
		}
		cmd := exec.Command("bash", "-c", strings.TrimSuffix(command, " | nomad volume create -"))
		cmd.Dir, cmd.Env = filepath.Dir(spec), append(os.Environ(), "NODE=host-1")
		out, err := cmd.Output()
		if err != nil || strings.Contains(string(out), "@NODE@") || !strings.Contains(string(out), `"zfs.csi.dev/node" = "host-1"`) {
			t.Errorf("%s after docs/nomad.md's sed (%v): placeholder left or node missing:\n%s", spec, err, out)
		}
	}
}

// docDir is where the packages install the documentation.
const docDir = "/usr/share/doc/zfs-csi"

// installedDocs is what packaging/nfpm.yaml installs below docDir for one
// packager: installed path → the repository's file (globs expanded, a dst
// ending in / taking the file's name), and the directories it makes.
func installedDocs(t *testing.T, packager string) (files map[string]string, dirs []string) {
	t.Helper()
	raw, err := os.ReadFile("packaging/nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Contents []struct {
			Src, Dst, Type, Packager string
		}
	}
	if err := yaml.Unmarshal(raw, &config); err != nil {
		t.Fatal(err)
	}
	files = map[string]string{}
	for _, entry := range config.Contents {
		if entry.Packager != "" && entry.Packager != packager || !strings.HasPrefix(entry.Dst, docDir) {
			continue
		}
		if entry.Type == "dir" {
			dirs = append(dirs, entry.Dst)
			continue
		}
		sources, err := filepath.Glob(entry.Src)
		if err != nil || len(sources) == 0 {
			t.Fatalf("packaging/nfpm.yaml installs %s, which matches no file (%v)", entry.Src, err)
		}
		for _, source := range sources {
			dst := entry.Dst
			if strings.HasSuffix(dst, "/") {
				dst = path.Join(dst, filepath.Base(source))
			}
			files[dst] = source
		}
	}
	return files, dirs
}

// TestInstalledDocsLinkOnlyToInstalledFiles: the README and docs/ are read
// in /usr/share/doc/zfs-csi as much as in the repository, so a relative
// link of an installed document must reach a file the same package
// installs (ARCHITECTURE.md, e2e/ and packaging/ are not among them).
func TestInstalledDocsLinkOnlyToInstalledFiles(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, packager := range []string{"deb", "rpm"} {
		files, dirs := installedDocs(t, packager)
		if files[docDir+"/README.md"] != "README.md" {
			t.Fatalf("the %s installs no README.md in %s: %v", packager, docDir, files)
		}
		for installed, source := range files {
			if !strings.HasSuffix(source, ".md") {
				continue
			}
			text, err := os.ReadFile(source)
			if err != nil {
				t.Fatal(err)
			}
			for _, match := range link.FindAllStringSubmatch(outsideCodeFences(string(text)), -1) {
				target, _, _ := strings.Cut(match[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				resolved := path.Join(path.Dir(installed), target)
				if _, ok := files[resolved]; !ok && !slices.Contains(dirs, resolved) {
					t.Errorf("%s links to %s, which the %s does not install (%s)", source, match[1], packager, resolved)
				}
			}
		}
	}
}

// The README is the front door: what the driver is, the support matrix,
// the install, a first step on each orchestrator, and links. Everything
// else has its page in docs/, and a README that grows past a few screens
// has taken in what belongs there.
func TestTheReadmeFitsOnAFewScreens(t *testing.T) {
	text, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(text), "\n"); lines > 150 {
		t.Errorf("README.md has %d lines, want at most 150: move what a reader needs later to docs/ and link it", lines)
	}
}

// The README's "as CI runs them" is what .ci/run runs, command for command.
func TestTheReadmesTestCommandsAreCIs(t *testing.T) {
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var run []string
	for _, line := range strings.Split(string(ci), "\n") {
		if strings.HasPrefix(line, "make ") {
			run = append(run, line)
		}
	}
	if shown := readmeBlock(t, "fakes, then real ZFS in the guest ([docs/testing.md](docs/testing.md)):"); !slices.Equal(shown, run) || len(run) == 0 {
		t.Errorf("README.md shows %q as CI's tests, .ci/run runs %q", shown, run)
	}
}

// CONTRIBUTING.md's commands before sending a change are CI's, command for
// command, each with the comment that says what it runs.
func TestTheContributorsCommandsAreCIs(t *testing.T) {
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(guide), "## Before you send a change\n")
	var run, shown []string
	for _, line := range strings.Split(string(ci), "\n") {
		if strings.HasPrefix(line, "make ") {
			run = append(run, line)
		}
	}
	for _, line := range strings.Split(section, "\n") {
		if command, _, ok := strings.Cut(strings.TrimPrefix(line, "    "), "#"); ok && strings.HasPrefix(line, "    make ") {
			shown = append(shown, strings.TrimSpace(command))
		}
	}
	if !slices.Equal(shown, run) || len(run) == 0 {
		t.Errorf("CONTRIBUTING.md shows %q before a change, .ci/run runs %q", shown, run)
	}
}

// TestTheReadmesKubernetesCommandsRunAsWritten runs README's Kubernetes
// block line by line as an administrator pastes it, with sudo, sudoedit,
// systemctl and kubectl standing in: the edit its comment names lands in
// the packaged configuration file, and what kubectl applies is what the
// package installs under examples/ (packaging/kubernetes here).
func TestTheReadmesKubernetesCommandsRunAsWritten(t *testing.T) {
	examples, err := filepath.Abs("packaging/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "zfs-csi")
	packaged, err := os.ReadFile("packaging/default/zfs-csi")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, packaged, 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "log")
	stubs := map[string]string{
		"sudo":      `exec "$@"`,
		"sudoedit":  `[[ $1 == /etc/default/zfs-csi ]] || exit 1; printf '%s\n' "$README_EDIT" >>"$CONFIG"`,
		"systemctl": `echo "systemctl $*" >>"$LOG"`,
		"kubectl": `echo "kubectl $*" >>"$LOG"
case "$*" in
"apply -f /usr/share/doc/zfs-csi/examples/kubernetes/"*) ls "$EXAMPLES${3#/usr/share/doc/zfs-csi/examples/kubernetes}"/*.yaml >/dev/null ;;
"-n zfs-csi get csistoragecapacity") ;;
*) exit 1 ;;
esac`,
	}
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/bash\nset -euo pipefail\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range readmeBlock(t, "## Kubernetes") {
		_, edit, _ := strings.Cut(line, "# ")
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", line)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "CONFIG="+config, "LOG="+log, "EXAMPLES="+examples, "README_EDIT="+edit)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README.md's %q: %v\n%s", line, err, out)
		}
	}
	edited, _ := os.ReadFile(config)
	if !strings.Contains(string(edited), "\nZFS_CSI_KUBERNETES=true\n") {
		t.Errorf("README.md's Kubernetes block does not turn on Kubernetes mode in the configuration file:\n%s", edited)
	}
	ran, _ := os.ReadFile(log)
	if want := "systemctl restart zfs-csi\n"; !strings.Contains(string(ran), want) {
		t.Errorf("README.md's Kubernetes block ran\n%s\nwant the daemon restarted after the edit", ran)
	}
}
