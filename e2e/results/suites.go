package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// suite is one kind of row: what a mode of e2e/run.sh runs, on what, and how
// its summary is counted.
type suite struct {
	name   string // the table's first column; with the version, the row's key
	target string // the make target that runs it
	unit   string // what the counts count: steps, scenarios or specs
	// version is the table's second column, from the versions the run used.
	version func(versions) (string, error)
}

// versions are what run.sh knows of the run's software: ZFS_VERSION,
// K8S_VERSION and NOMAD_VERSION as the harness resolved them, and the exact
// OpenZFS release the guest reported in its summary (zfs version), if any.
type versions struct {
	zfs, exactZFS, kubernetes, nomad string
}

// suites are e2e/run.sh's modes that write a row; K8S_CONFORMANCE=1 turns
// mode k8s into the upstream suite (make e2e-k8s-conformance), which writes a
// row per test-driver YAML under the name conformanceSuiteName gives.
var suites = map[string]suite{
	"e2e": {
		name: "real ZFS: smoke, csi-sanity, e2e Go tests", target: "e2e", unit: "steps",
		version: func(v versions) (string, error) { return openZFS(v) },
	},
	"systemd": {
		name: "the package on a systemd-booted guest", target: "e2e-systemd", unit: "steps",
		version: func(v versions) (string, error) {
			zfs, err := openZFS(v)
			return "Debian 12, " + zfs, err
		},
	},
	"k8s": {
		name: "Kubernetes scenarios (two nodes)", target: "e2e-k8s", unit: "scenarios",
		version: func(v versions) (string, error) { return named("Kubernetes", "-kubernetes", v.kubernetes) },
	},
	"k8s-conformance": {
		name: "Kubernetes External Storage", target: "e2e-k8s-conformance", unit: "specs",
		version: func(v versions) (string, error) { return named("e2e.test", "-kubernetes", v.kubernetes) },
	},
	"nomad": {
		name: "Nomad scenarios (two clients, ACLs)", target: "e2e-nomad", unit: "scenarios",
		version: func(v versions) (string, error) { return named("Nomad", "-nomad", v.nomad) },
	},
}

// conformanceSuiteName names the row of one test-driver YAML of the upstream
// suite (e2e/k8s/conformance/DRIVER.yaml).
func conformanceSuiteName(driver string) string {
	return suites["k8s-conformance"].name + ", " + driver + " YAML"
}

// suiteMode is the key of suites for run.sh's mode and the environment.
func suiteMode(mode string, env map[string]string) (string, error) {
	if mode == "k8s" && env["K8S_CONFORMANCE"] == "1" {
		mode = "k8s-conformance"
	}
	if _, ok := suites[mode]; !ok {
		return "", fmt.Errorf("mode %q writes no row (e2e, systemd, k8s or nomad)", mode)
	}
	return mode, nil
}

func named(product, flag, version string) (string, error) {
	if version == "" {
		return "", fmt.Errorf("%s is needed for this mode's version column", flag)
	}
	return product + " " + version, nil
}

// openZFS is the OpenZFS release the guest ran: the exact one its summary
// names when it is of the ZFS_VERSION line, else the line itself.
func openZFS(v versions) (string, error) {
	if v.zfs == "" {
		return "", fmt.Errorf("-zfs is needed for this mode's version column")
	}
	if strings.HasPrefix(v.exactZFS, v.zfs+".") {
		return "OpenZFS " + v.exactZFS, nil
	}
	return "OpenZFS " + v.zfs, nil
}

// zfsRelease finds the release in `zfs version`'s first line
// (zfs-2.3.2-2~bpo12+2), which the guests put in their summaries.
var zfsRelease = regexp.MustCompile(`\bzfs-(\d+\.\d+\.\d+)`)

// exactZFS is the first OpenZFS release the summaries' notes name, or "".
func exactZFS(lines []summaryLine) string {
	for _, line := range lines {
		if m := zfsRelease.FindStringSubmatch(line.note); m != nil {
			return m[1]
		}
	}
	return ""
}

// commandEnv are the variables that change what a run does, in the order
// the command shows them, with the suites whose command shows them (nil: all)
// and the rows they make partial. A value the harness would take by itself is
// left out (the Makefile exports ZFS_VERSION=2.3 always).
var commandEnv = []struct {
	name      string
	shownIn   []string
	filters   []string
	isDefault func(string) bool
	note      func(string) string // how a partial row names the filter
}{
	{name: "ZFS_VERSION", isDefault: func(v string) bool { return v == "2.3" }},
	{name: "K8S_VERSION", shownIn: []string{"k8s", "k8s-conformance"}},
	{name: "NOMAD_VERSION", shownIn: []string{"nomad"}},
	{name: "K8S_BENCH", shownIn: []string{"k8s"}, isDefault: func(v string) bool { return v != "1" }},
	{name: "K8S_CONFORMANCE_DRIVERS", shownIn: []string{"k8s-conformance"}},
	{name: "K8S_CONFORMANCE_PROCS", shownIn: []string{"k8s-conformance"}},
	{
		name: "K8S_CONFORMANCE_PHASES", shownIn: []string{"k8s-conformance"}, filters: []string{"k8s-conformance"},
		note: func(v string) string { return "phases " + v },
	},
	{
		name: "K8S_CONFORMANCE_FOCUS", shownIn: []string{"k8s-conformance"}, filters: []string{"k8s-conformance"},
		note: func(v string) string { return "focus " + v },
	},
	{
		name: "E2E_SMOKE_ONLY", shownIn: []string{"e2e"}, filters: []string{"e2e"},
		isDefault: func(v string) bool { return v != "1" }, note: func(string) string { return "smoke only" },
	},
	{
		name: "E2E_SANITY", shownIn: []string{"e2e"}, filters: []string{"e2e"},
		isDefault: func(v string) bool { return v != "0" }, note: func(string) string { return "csi-sanity left out" },
	},
	{name: "E2E_QEMU_CPU"},
	{
		// After the upstream suite, guest a runs the scenarios it names:
		// a partial scenarios row, not a partial conformance one.
		name: "E2E_GO_TEST_RUN", shownIn: []string{"e2e", "k8s", "nomad", "k8s-conformance"}, filters: []string{"e2e", "k8s", "nomad"},
		note: func(v string) string { return v },
	},
}

// command is the command line that ran suite mode, with the variables the
// reader set.
func command(mode string, env map[string]string) string {
	var words []string
	for _, variable := range commandEnv {
		if value, ok := setting(env, variable.name, variable.isDefault); ok && (variable.shownIn == nil || slices.Contains(variable.shownIn, mode)) {
			words = append(words, variable.name+"="+shellQuote(value))
		}
	}
	return strings.Join(append(words, "make", suites[mode].target), " ")
}

// filter says what narrowed the run of a row of suite mode: "" for a full
// run.
func filter(mode string, env map[string]string) string {
	var notes []string
	for _, variable := range commandEnv {
		if value, ok := setting(env, variable.name, variable.isDefault); ok && slices.Contains(variable.filters, mode) {
			notes = append(notes, variable.note(value))
		}
	}
	return strings.Join(notes, ", ")
}

// setting is a variable the reader set to other than what the harness takes
// by itself.
func setting(env map[string]string, name string, isDefault func(string) bool) (string, bool) {
	value := env[name]
	if value == "" || isDefault != nil && isDefault(value) {
		return "", false
	}
	return value, true
}

// shellWord is a value the shell takes as one word, unquoted.
var shellWord = regexp.MustCompile(`^[A-Za-z0-9_.,:/=+-]+$`)

// shellQuote quotes a value the shell would otherwise split or expand.
func shellQuote(value string) string {
	if shellWord.MatchString(value) {
		return value
	}
	return "'" + strings.ReplaceAll(value, "'", `'\''`) + "'"
}
