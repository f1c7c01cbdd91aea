package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A k8s run's summary as the guests write it: node a's steps, then
// go_test_summary's line per test and subtest.
const k8sSummary = `PASS node-a-network                  4s  node-a 192.168.77.1 on ens4
PASS node-a-driver                  31s  0.0.0+git20261128-1, zfs-2.3.2-2~bpo12+2
PASS cluster                        12s  both kubelets' /healthz through the apiserver
FAIL scenarios                    2133s  
PASS TestCluster/Registration                   61.20s
FAIL TestCluster/Volumes/writer_pods             300.00s
FAIL TestCluster/Volumes                        301.50s
SKIP TestCluster/ChangedBlocks                    0.00s
PASS TestCluster/Chart                          140.00s
FAIL TestCluster                               2120.40s
`

// The upstream suite's summary (e2e/k8s/conformance.sh conf_ginkgo).
const conformanceSummary = `dataset  parallel   1593s  Ran 60 of 7233 Specs  60 Passed | 0 Failed | 0 Pending | 7173 Skipped
dataset  serial       93s  Ran 2 of 7233 Specs  1 Passed | 1 Failed | 0 Pending | 7231 Skipped
block    parallel    824s  Ran 23 of 7233 Specs  23 Passed | 0 Failed | 0 Pending | 7210 Skipped
block    serial       40s  Ran 0 of 7233 Specs  0 Passed | 0 Failed | 0 Pending | 7233 Skipped
xfs      parallel   5400s  no "Ran" line  ginkgo exit 1, see /x/xfs-parallel.log
`

const doc = `# Testing

Prose before.

` + beginMarker + `
` + tableHeader + `
|---|---|---|---|---|---|---|
| unit tests | Go | passed (by hand) | 210 | 2026-11-26 | 611bfa5 | ` + "`make test`" + ` |
| Kubernetes scenarios (two nodes) | Kubernetes v1.34.4 | passed, 18 of 18 scenarios | 2133 | 2026-11-27 | 9317488 | ` + "`make e2e-k8s`" + ` |
| benchmark | OpenZFS 2.3.2 | sections 1–8 | not recorded | 2026-11-27 | 1d6e0c8 | ` + "`make bench`" + ` |
` + endMarker + `

Prose after.
`

func rowsOf(t *testing.T, in runInputs) []Row {
	t.Helper()
	if in.date == "" {
		in.date, in.commit = "2026-11-29", "2ec3afe-dirty"
	}
	rows, err := buildRows(in)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestAScenarioRunCountsItsScenariosAndNamesWhatFailed(t *testing.T) {
	rows := rowsOf(t, runInputs{
		mode: "k8s", env: map[string]string{"ZFS_VERSION": "2.3"}, summary: parseSummary(k8sSummary),
		exitStatus: 1, seconds: 2500, versions: versions{zfs: "2.3", kubernetes: "v1.34.4"},
	})
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	row := rows[0]
	if row.Passed != 2 || row.Failed != 1 || row.Skipped != 1 || row.Unit != "scenarios" || row.Verdict != "failed" {
		t.Errorf("row %+v: want 2 passed, 1 failed, 1 skipped scenarios, failed", row)
	}
	// The failed step and the failed scenario are named; the subtest below
	// the scenario and the top-level test are not counted or named.
	if want := []string{"scenarios", "TestCluster/Volumes"}; !slices.Equal(row.Failures, want) {
		t.Errorf("failures %q, want %q", row.Failures, want)
	}
	want := "| Kubernetes scenarios (two nodes) | Kubernetes v1.34.4 | failed, 2 of 3 scenarios, 1 skipped (failed: scenarios; TestCluster/Volumes) | 2500 | 2026-11-29 | 2ec3afe-dirty | `make e2e-k8s` |"
	if got := row.markdown(); got != want {
		t.Errorf("markdown\n got %s\nwant %s", got, want)
	}
}

func TestAFilteredRunIsPartialAndSaysByWhat(t *testing.T) {
	env := map[string]string{
		"ZFS_VERSION": "2.3", "K8S_VERSION": "v1.37.2", "E2E_GO_TEST_RUN": "^TestCluster/(Registration|Chart)$",
		"E2E_SANITY": "0", // make e2e's knob: not shown for a k8s run
	}
	summary := parseSummary(strings.ReplaceAll(k8sSummary, "FAIL", "PASS"))
	row := rowsOf(t, runInputs{mode: "k8s", env: env, summary: summary, seconds: 900, versions: versions{zfs: "2.3", kubernetes: "v1.37.2"}})[0]
	if row.Filter != env["E2E_GO_TEST_RUN"] || row.Verdict != "passed" {
		t.Errorf("filter %q, verdict %s: want the E2E_GO_TEST_RUN pattern, passed", row.Filter, row.Verdict)
	}
	if want := `K8S_VERSION=v1.37.2 E2E_GO_TEST_RUN='^TestCluster/(Registration|Chart)$' make e2e-k8s`; row.Command != want {
		t.Errorf("command %s, want %s", row.Command, want)
	}
	want := "| Kubernetes scenarios (two nodes) | Kubernetes v1.37.2 | partial: `^TestCluster/(Registration\\|Chart)$`; passed, 3 of 3 scenarios, 1 skipped | 900 | 2026-11-29 | 2ec3afe-dirty | `K8S_VERSION=v1.37.2 E2E_GO_TEST_RUN='^TestCluster/(Registration\\|Chart)$' make e2e-k8s` |"
	if got := row.markdown(); got != want {
		t.Errorf("markdown\n got %s\nwant %s", got, want)
	}
	if len(cells(row.markdown())) != len(cells(tableHeader)) {
		t.Errorf("the pipes of the pattern split the row: %q", cells(row.markdown()))
	}
}

func TestTheBenchmarkScenariosShowInTheCommandAndNarrowNothing(t *testing.T) {
	summary := parseSummary(strings.ReplaceAll(k8sSummary, "FAIL", "PASS"))
	for value, want := range map[string]string{
		"1": "K8S_BENCH=1 make e2e-k8s",
		"0": "make e2e-k8s",
		"":  "make e2e-k8s",
	} {
		env := map[string]string{"ZFS_VERSION": "2.3", "K8S_BENCH": value}
		row := rowsOf(t, runInputs{mode: "k8s", env: env, summary: summary, seconds: 900, versions: versions{zfs: "2.3", kubernetes: "v1.34.4"}})[0]
		if row.Command != want || row.Filter != "" {
			t.Errorf("K8S_BENCH=%q: command %q, filter %q; want %q, none", value, row.Command, row.Filter, want)
		}
	}
}

func TestTheZFSVersionIsTheOneTheGuestRan(t *testing.T) {
	for _, c := range []struct {
		mode, zfs, summary, want string
	}{
		{"e2e", "2.3", "PASS smoke   5s  zfs-2.3.2-2~bpo12+2, zvol link ok\n", "OpenZFS 2.3.2"},
		{"e2e", "2.1", "PASS smoke   9s  zfs-2.1.11-1, zvol link ok\n", "OpenZFS 2.1.11"},
		{"e2e", "2.3", "FAIL smoke   5s\n", "OpenZFS 2.3"},
		{"systemd", "2.3", "PASS boot   30s  zfs-2.3.2-2~bpo12+2, pool tank on /dev/vdb\n", "Debian 12, OpenZFS 2.3.2"},
	} {
		row := rowsOf(t, runInputs{mode: c.mode, env: map[string]string{}, summary: parseSummary(c.summary), versions: versions{zfs: c.zfs}})[0]
		if row.Version != c.want || row.Unit != "steps" {
			t.Errorf("%s on ZFS_VERSION=%s: version %q in %s, want %q in steps", c.mode, c.zfs, row.Version, row.Unit, c.want)
		}
	}
}

func TestAFailedRunWithNoFailedLineFailsItsRow(t *testing.T) {
	row := rowsOf(t, runInputs{
		mode: "nomad", env: map[string]string{}, summary: parseSummary("PASS node-a-network 6s\n"),
		exitStatus: 1, versions: versions{zfs: "2.3", nomad: "v1.6.3"},
	})[0]
	if row.Verdict != "failed" || len(row.Failures) != 1 || !strings.Contains(row.Failures[0], "exit status 1") {
		t.Errorf("row %+v: want failed, naming run.sh's exit status", row)
	}
	row = rowsOf(t, runInputs{mode: "e2e", env: map[string]string{}, noSummary: "out/e2e/share/results/summary.txt", versions: versions{zfs: "2.3"}})[0]
	if row.Verdict != "failed" {
		t.Errorf("a run without a summary: %+v, want failed", row)
	}
}

func TestTheUpstreamSuiteWritesARowPerYAMLAndOneForTheScenariosAfterIt(t *testing.T) {
	phases, err := parseConformance(conformanceSummary)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"K8S_CONFORMANCE": "1", "K8S_CONFORMANCE_DRIVERS": "dataset block xfs", "E2E_GO_TEST_RUN": "^TestCluster/Chart$"}
	rows := rowsOf(t, runInputs{
		mode: "k8s-conformance", env: env, conformance: phases, exitStatus: 1, seconds: 9000,
		summary:  parseSummary("PASS cluster 12s\nPASS TestCluster/Chart 140.00s\nPASS TestCluster 141.00s\n"),
		versions: versions{zfs: "2.3", kubernetes: "v1.34.4"},
	})
	command := "K8S_CONFORMANCE_DRIVERS='dataset block xfs' E2E_GO_TEST_RUN='^TestCluster/Chart$' make e2e-k8s-conformance"
	want := []string{
		"| Kubernetes External Storage, dataset YAML | e2e.test v1.34.4 | failed, 61 of 62 specs (parallel 60 of 60, 1593 s; serial 1 of 2, 93 s; failed: serial: 1 specs, named in failures.txt beside the summary) | 1686 | 2026-11-29 | 2ec3afe-dirty | `" + command + "` |",
		"| Kubernetes External Storage, block YAML | e2e.test v1.34.4 | passed, 23 of 23 specs (parallel 23 of 23, 824 s; serial: no spec ran, 40 s) | 864 | 2026-11-29 | 2ec3afe-dirty | `" + command + "` |",
		"| Kubernetes External Storage, xfs YAML | e2e.test v1.34.4 | failed, 0 of 0 specs (failed: parallel: no \"Ran\" line ginkgo exit 1, see /x/xfs-parallel.log) | 5400 | 2026-11-29 | 2ec3afe-dirty | `" + command + "` |",
		"| Kubernetes scenarios (two nodes) | Kubernetes v1.34.4 | partial: `^TestCluster/Chart$`; passed, 1 of 1 scenarios | 141 | 2026-11-29 | 2ec3afe-dirty | `" + command + "` |",
	}
	var got []string
	for _, row := range rows {
		got = append(got, row.markdown())
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

// withRows is doc with the rows written into its table one after another,
// its lines, and the index of the table's first row and of its end marker.
func withRows(t *testing.T, rows ...Row) (updated []byte, lines []string, first, end int) {
	t.Helper()
	updated = []byte(doc)
	for _, r := range rows {
		var err error
		if updated, err = updateTable(updated, r); err != nil {
			t.Fatal(err)
		}
	}
	lines = strings.Split(string(updated), "\n")
	first, end, err := tableRows(lines)
	if err != nil {
		t.Fatal(err)
	}
	return updated, lines, first, end
}

func TestARowReplacesTheOneOfItsSuiteAndVersionAndKeepsTheOthers(t *testing.T) {
	row := func(suite, version, commit string) Row {
		return Row{Suite: suite, Version: version, Verdict: "passed", Passed: 1, Unit: "scenarios", Seconds: 60, Date: "2026-11-29", Commit: commit, Command: "make x"}
	}
	updated, lines, first, end := withRows(t,
		row("Kubernetes scenarios (two nodes)", "Kubernetes v1.34.4", "aaa"),
		row("Kubernetes scenarios (two nodes)", "Kubernetes v1.37.2", "bbb"),
		row("Nomad scenarios (two clients, ACLs)", "Nomad v1.6.3", "ccc"),
		row("Kubernetes scenarios (two nodes)", "Kubernetes v1.37.2", "ddd"),
	)
	var keys []string
	for _, line := range lines[first:end] {
		c := cells(line)
		keys = append(keys, c[1]+" "+c[5])
	}
	want := []string{"Go 611bfa5", "Kubernetes v1.34.4 aaa", "Kubernetes v1.37.2 ddd", "OpenZFS 2.3.2 1d6e0c8", "Nomad v1.6.3 ccc"}
	if !slices.Equal(keys, want) {
		t.Errorf("rows (version, commit) %q, want %q", keys, want)
	}
	// Everything outside the replaced and added rows is as it was.
	for _, line := range strings.Split(doc, "\n") {
		if !strings.Contains(line, "Kubernetes v1.34.4") && !slices.Contains(lines, line) {
			t.Errorf("line lost: %q", line)
		}
	}
	if err := checkTable(updated); err != nil {
		t.Error(err)
	}
}

func TestANarrowedRunKeepsTheFullRunsRowAndTheNextFullRunReplacesIt(t *testing.T) {
	const suite, version = "Kubernetes scenarios (two nodes)", "Kubernetes v1.34.4"
	full := Row{Suite: suite, Version: version, Verdict: "passed", Passed: 23, Unit: "scenarios", Seconds: 9000, Date: "2026-11-30", Commit: "eee", Command: "make e2e-k8s"}
	narrowed := full
	narrowed.Filter, narrowed.Passed, narrowed.Commit, narrowed.Command = "^TestCluster/Chart$", 1, "fff", "E2E_GO_TEST_RUN='^TestCluster/Chart$' make e2e-k8s"
	updated, lines, first, end := withRows(t, narrowed, full)
	if err := checkTable(updated); err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, line := range lines[first:end] {
		if c := cells(line); c[1] == version {
			ours = append(ours, c[5]+" "+strings.SplitN(c[2], ",", 2)[0])
		}
	}
	// The doc's own full row (9317488) gave way to the later full run; the
	// narrowed run sits beside it.
	want := []string{"eee passed", "fff partial: `^TestCluster/Chart$`; passed"}
	if !slices.Equal(ours, want) {
		t.Errorf("rows of %s (commit, result) %q, want %q", version, ours, want)
	}
	twice := append(lines[:end:end], lines[first+1])
	if err := checkTable([]byte(strings.Join(append(twice, lines[end:]...), "\n"))); err == nil {
		t.Error("a table with the same full row twice passed the check")
	}
}

func TestATableTheToolDidNotWriteIsRefused(t *testing.T) {
	for name, text := range map[string]string{
		"no markers":        strings.ReplaceAll(doc, beginMarker, ""),
		"another header":    strings.ReplaceAll(doc, tableHeader, "| suite | version | last result | date | command |"),
		"a row cut short":   strings.ReplaceAll(doc, "| 210 | 2026-11-26 | 611bfa5 ", ""),
		"a row given twice": strings.ReplaceAll(doc, "| benchmark | OpenZFS 2.3.2 |", "| unit tests | Go |"),
	} {
		if err := checkTable([]byte(text)); err == nil {
			t.Errorf("%s: checkTable accepted it", name)
		}
	}
}

// The table in docs/testing.md is the one every e2e target writes into: a
// hand edit that breaks it fails here, not at the end of an hour-long run.
func TestTheDocsResultsTableIsOneTheToolUpdates(t *testing.T) {
	text, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkTable(text); err != nil {
		t.Fatal(err)
	}
	for mode, s := range suites {
		if mode == "k8s-conformance" {
			continue // its rows are named per YAML
		}
		if !strings.Contains(string(text), "| "+s.name+" | ") {
			t.Errorf("docs/testing.md has no row of %q (mode %s): a renamed suite leaves its old rows behind", s.name, mode)
		}
	}
}

func TestRunWritesTheTableAndTheJSONFile(t *testing.T) {
	dir := t.TempDir()
	docPath, jsonPath, summaryPath := filepath.Join(dir, "testing.md"), filepath.Join(dir, "out", "results.json"), filepath.Join(dir, "summary.txt")
	for path, text := range map[string]string{docPath: doc, summaryPath: k8sSummary} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"-exit", "1", "-seconds", "2500", "-zfs", "2.3", "-summary", summaryPath, "-doc", docPath, "-json", jsonPath, "-date", "2026-11-29", "-commit", "2ec3afe"}
	for _, version := range []string{"v1.34.4", "v1.37.2", "v1.34.4"} {
		if err := run(append([]string{"-mode", "k8s", "-kubernetes", version}, common...), map[string]string{}); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkTable(text); err != nil {
		t.Error(err)
	}
	if !strings.Contains(string(text), "| Kubernetes scenarios (two nodes) | Kubernetes v1.37.2 | failed, 2 of 3 scenarios") {
		t.Errorf("no v1.37.2 row in\n%s", text)
	}
	var file resultsFile
	if text, err = os.ReadFile(jsonPath); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Rows) != 2 || file.Rows[0].Version != "Kubernetes v1.34.4" || file.Rows[1].Failed != 1 {
		t.Errorf("out/results.json rows %+v: want v1.34.4 and v1.37.2, each with its failure", file.Rows)
	}
	if err := run([]string{"-mode", "bench"}, map[string]string{}); err == nil {
		t.Error("mode bench: no error, want one (the bench's row is written by hand)")
	}
}
