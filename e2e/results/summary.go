package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// summaryLine is one line of a guest's results/summary.txt: a step
// (e2e/guest/lib.sh step: "PASS smoke   5s  zfs-2.3.2-2~bpo12+2, zvol link ok"),
// a Go test (go_test_summary: "FAIL TestCluster/Volumes   301.2s") or a part
// left out ("SKIP csi-sanity (E2E_SANITY=0)").
type summaryLine struct {
	verdict string // PASS, FAIL or SKIP
	name    string
	seconds float64
	note    string
}

// describe is the line's name, with its note if it has one.
func (l summaryLine) describe() string {
	if l.note == "" {
		return l.name
	}
	return l.name + ": " + l.note
}

// goTest says whether the line is a Go test's rather than a step's.
func (l summaryLine) goTest() bool { return strings.HasPrefix(l.name, "Test") }

// depth is how deep a Go test is nested: 0 for TestCluster, 1 for
// TestCluster/Volumes.
func (l summaryLine) depth() int { return strings.Count(l.name, "/") }

// summaryForm is a summary line: verdict, name, the time if any, the note.
var summaryForm = regexp.MustCompile(`^(PASS|FAIL|SKIP)\s+(\S+)(?:\s+([0-9.]+s))?(?:\s+(.*?))?\s*$`)

// parseSummary reads summary.txt; lines of another form are not the
// summary's and are left out.
func parseSummary(text string) []summaryLine {
	var lines []summaryLine
	for _, raw := range strings.Split(text, "\n") {
		if m := summaryForm.FindStringSubmatch(raw); m != nil {
			seconds, _ := strconv.ParseFloat(strings.TrimSuffix(m[3], "s"), 64)
			lines = append(lines, summaryLine{verdict: m[1], name: m[2], seconds: seconds, note: m[4]})
		}
	}
	return lines
}

// tally is what a row counts, what failed (by name, with its note) and
// what else the row says of its parts.
type tally struct {
	passed, failed, skipped int
	unit                    string
	failures, details       []string
	goSeconds               float64 // the top-level Go tests' time
}

// countSummary counts a run's summaries: its scenarios (the Go tests one
// below the top, TestCluster/Volumes) when it ran Go tests, else its steps.
// A failed step fails the row whatever it counts, and is named among the
// failures with the scenarios that failed.
func countSummary(lines []summaryLine, unit string) tally {
	depth := -1 // the Go tests' level that is counted; -1: steps are
	for _, line := range lines {
		if line.goTest() && line.depth() <= 1 {
			depth = max(depth, line.depth())
		}
	}
	counted := tally{unit: unit}
	if depth < 0 {
		counted.unit = "steps"
	}
	for _, line := range lines {
		if line.goTest() && line.depth() == 0 {
			counted.goSeconds += line.seconds
		}
		counts := line.goTest() && line.depth() == depth || depth < 0 && !line.goTest()
		if line.verdict == "FAIL" && (counts || !line.goTest()) {
			counted.failures = append(counted.failures, line.describe())
		}
		if !counts {
			continue
		}
		switch line.verdict {
		case "PASS":
			counted.passed++
		case "FAIL":
			counted.failed++
		case "SKIP":
			counted.skipped++
			if !line.goTest() {
				counted.details = append(counted.details, "skipped "+line.describe())
			}
		}
	}
	return counted
}

// conformancePhase is one line of out/e2e-k8s/conformance/summary.txt
// (e2e/k8s/conformance.sh conf_ginkgo): a test-driver YAML's phase, its
// seconds, and ginkgo's verdict.
type conformancePhase struct {
	driver, phase   string
	seconds         int
	passed, failed  int
	verdict         string // ginkgo's own words when it gave no counts
	counted, ranAny bool
}

var (
	phaseLine   = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\d+)s\s+(.*)$`)
	phaseCounts = regexp.MustCompile(`(\d+) Passed \| (\d+) Failed`)
	phaseRan    = regexp.MustCompile(`Ran (\d+) of \d+ Specs`)
)

func parseConformance(text string) ([]conformancePhase, error) {
	var phases []conformancePhase
	for _, raw := range strings.Split(text, "\n") {
		if strings.TrimSpace(raw) == "" {
			continue
		}
		m := phaseLine.FindStringSubmatch(raw)
		if m == nil {
			return nil, fmt.Errorf("not a conformance summary line: %q", raw)
		}
		phase := conformancePhase{driver: m[1], phase: m[2], verdict: strings.TrimSpace(m[4])}
		phase.seconds, _ = strconv.Atoi(m[3])
		if counts := phaseCounts.FindStringSubmatch(m[4]); counts != nil {
			phase.passed, _ = strconv.Atoi(counts[1])
			phase.failed, _ = strconv.Atoi(counts[2])
			phase.counted = true
		}
		if ran := phaseRan.FindStringSubmatch(m[4]); ran != nil && ran[1] != "0" {
			phase.ranAny = true
		}
		phases = append(phases, phase)
	}
	return phases, nil
}

// countConformance sums one YAML's phases: specs passed and failed, and each
// phase as "parallel 60 of 60, 1593 s". A phase without ginkgo's counts (it
// did not finish) fails the row; one that ran no spec (the suite skips every
// [Serial] test of a YAML without the capabilities they need) does not.
func countConformance(phases []conformancePhase) (tally, int) {
	counted := tally{unit: "specs"}
	seconds := 0
	for _, phase := range phases {
		seconds += phase.seconds
		counted.passed += phase.passed
		counted.failed += phase.failed
		switch {
		case !phase.counted:
			counted.failures = append(counted.failures, fmt.Sprintf("%s: %s", phase.phase, phase.verdict))
		case !phase.ranAny:
			counted.details = append(counted.details, fmt.Sprintf("%s: no spec ran, %d s", phase.phase, phase.seconds))
		default:
			counted.details = append(counted.details, fmt.Sprintf("%s %d of %d, %d s", phase.phase, phase.passed, phase.passed+phase.failed, phase.seconds))
		}
		if phase.failed > 0 {
			counted.failures = append(counted.failures, fmt.Sprintf("%s: %d specs, named in failures.txt beside the summary", phase.phase, phase.failed))
		}
	}
	return counted, seconds
}
