// Command results keeps the one table that says what is tested on what:
// docs/testing.md's results table, written by the e2e targets themselves,
// and out/results.json, the same rows for tools. e2e/run.sh runs it when a
// mode (e2e, systemd, k8s, k8s with K8S_CONFORMANCE=1, nomad) ends:
//
//	go run ./e2e/results -mode k8s -exit 0 -seconds 2133 -zfs 2.3 -kubernetes v1.34.4 \
//	    -summary out/e2e-k8s/share/results/summary.txt -summary out/e2e-k8s/share/results/b/summary.txt
//
// A row is one suite on one version (the suites table in suites.go), run in
// full or narrowed, and replaces the row of the same three; it says passed or failed
// and counts the run's steps, scenarios or specs from its summaries, names
// what failed, and gives the seconds, the date, the commit (git describe
// --always --dirty) and the command with the variables the reader set. A
// run narrowed by E2E_GO_TEST_RUN (or another filter) is "partial" and says
// by what. The upstream storage suite writes a row per test-driver YAML from
// its own summary, and a scenarios row when E2E_GO_TEST_RUN ran scenarios
// after it. Rows the tool does not write (make test's, the bench's) are kept.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	env := map[string]string{}
	for _, pair := range os.Environ() {
		name, value, _ := strings.Cut(pair, "=")
		env[name] = value
	}
	if err := run(os.Args[1:], env); err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
}

// run is one recording: the flags, the run's files, then the table and the
// JSON file updated under one lock.
func run(args []string, env map[string]string) error {
	flags := flag.NewFlagSet("results", flag.ContinueOnError)
	var summaries []string
	flags.Func("summary", "a guest's results/summary.txt (repeatable: node b's too)", func(path string) error {
		summaries = append(summaries, path)
		return nil
	})
	var (
		mode        = flags.String("mode", "", "e2e/run.sh's mode: e2e, systemd, k8s or nomad")
		conformance = flags.String("conformance", "", "the upstream suite's summary (make e2e-k8s-conformance)")
		exitStatus  = flags.Int("exit", 0, "run.sh's status for the run")
		seconds     = flags.Int("seconds", 0, "the run's total seconds")
		zfs         = flags.String("zfs", "", "ZFS_VERSION as the harness resolved it")
		kubernetes  = flags.String("kubernetes", "", "K8S_VERSION as the harness resolved it")
		nomad       = flags.String("nomad", "", "NOMAD_VERSION as the harness resolved it")
		doc         = flags.String("doc", "docs/testing.md", "the document holding the results table")
		jsonPath    = flags.String("json", "out/results.json", "the rows as JSON")
		date        = flags.String("date", time.Now().UTC().Format(time.DateOnly), "the run's date")
		commit      = flags.String("commit", "", "the commit run (default: git describe --always, -dirty for changes outside the results table)")
	)
	if err := flags.Parse(args); err != nil {
		return err
	}
	suiteKey, err := suiteMode(*mode, env)
	if err != nil {
		return err
	}
	in := runInputs{mode: suiteKey, env: env, exitStatus: *exitStatus, seconds: *seconds, date: *date, commit: *commit}
	in.versions = versions{zfs: *zfs, kubernetes: *kubernetes, nomad: *nomad}
	for i, path := range summaries {
		text, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && i == 0:
			in.noSummary = path
		case err != nil:
			return err
		}
		in.summary = append(in.summary, parseSummary(string(text))...)
	}
	if *conformance != "" {
		text, err := os.ReadFile(*conformance)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if in.conformance, err = parseConformance(string(text)); err != nil {
			return fmt.Errorf("%s: %w", *conformance, err)
		}
	}
	if in.commit == "" {
		in.commit = describe()
	}
	rows, err := buildRows(in)
	if err != nil {
		return err
	}
	unlock, err := lock(filepath.Join(filepath.Dir(*jsonPath), "results.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if err := writeTable(*doc, rows); err != nil {
		return err
	}
	if err := writeJSON(*jsonPath, rows); err != nil {
		return err
	}
	for _, row := range rows {
		fmt.Printf("%s: %s\n", *doc, row.markdown())
	}
	return nil
}

// runInputs is what one run left: its summaries, read, and what run.sh
// knows of it.
type runInputs struct {
	mode        string // a key of suites
	env         map[string]string
	summary     []summaryLine
	noSummary   string // the path of node a's summary, when the guest wrote none
	conformance []conformancePhase
	exitStatus  int
	seconds     int
	versions    versions
	date        string
	commit      string
}

// buildRows makes the run's rows: one for its suite, or for the upstream
// suite one per test-driver YAML and one for the scenarios run after it.
func buildRows(in runInputs) ([]Row, error) {
	in.versions.exactZFS = exactZFS(in.summary)
	version, err := suites[in.mode].version(in.versions)
	if err != nil {
		return nil, err
	}
	finish := func(row Row, suiteKey string, seconds int) Row {
		row.Filter = filter(suiteKey, in.env)
		row.Seconds, row.Date, row.Commit, row.Command = seconds, in.date, in.commit, command(in.mode, in.env)
		return row
	}
	if in.mode != "k8s-conformance" {
		counted := countSummary(in.summary, suites[in.mode].unit)
		if in.noSummary != "" {
			counted.failures = append(counted.failures, "no summary: the guest wrote no "+in.noSummary)
		}
		return []Row{finish(newRow(suites[in.mode].name, version, counted, in.exitStatus), in.mode, in.seconds)}, nil
	}
	var rows []Row
	var drivers []string
	byDriver := map[string][]conformancePhase{}
	for _, phase := range in.conformance {
		if byDriver[phase.driver] == nil {
			drivers = append(drivers, phase.driver)
		}
		byDriver[phase.driver] = append(byDriver[phase.driver], phase)
	}
	for _, driver := range drivers {
		counted, seconds := countConformance(byDriver[driver])
		rows = append(rows, finish(newRow(conformanceSuiteName(driver), version, counted, -1), in.mode, seconds))
	}
	if scenarios := countSummary(in.summary, suites["k8s"].unit); scenarios.unit == suites["k8s"].unit {
		// Scenarios ran after the suite: their row, judged by its own
		// lines and timed by its tests (run.sh's status and total also
		// carry the suite's).
		scenarioVersion, err := suites["k8s"].version(in.versions)
		if err != nil {
			return nil, err
		}
		row := newRow(suites["k8s"].name, scenarioVersion, scenarios, -1)
		rows = append(rows, finish(row, "k8s", int(scenarios.goSeconds+0.5)))
	}
	if len(rows) == 0 {
		return nil, errors.New("the upstream suite left no summary line (the cluster never got ready?) and no scenario ran: no row to write")
	}
	return rows, nil
}

// describe is `git describe --always` of the working tree run, with
// -dirty when it differs from that commit anywhere but in the results
// table: a row an earlier target wrote there (make e2e's, before its
// systemd part) changes nothing that ran.
func describe() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "describe", "--always").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	if err := exec.CommandContext(ctx, "git", "diff", "--quiet", "HEAD", "--", ".", ":(exclude)docs/testing.md").Run(); err != nil {
		commit += "-dirty"
	}
	return commit
}

// lock takes an exclusive lock on path, so that two runs ending together
// (make e2e-k8s beside make e2e-nomad) do not write over each other's row.
func lock(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { file.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			file.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func writeTable(path string, rows []Row) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, row := range rows {
		if doc, err = updateTable(doc, row); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return writeAtomically(path, doc)
}

// resultsFile is out/results.json.
type resultsFile struct {
	Rows []Row `json:"rows"`
}

func writeJSON(path string, rows []Row) error {
	var file resultsFile
	text, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(text, &file); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	for _, row := range rows {
		file.Rows = upsertRows(file.Rows, row)
	}
	text, err = json.MarshalIndent(file, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomically(path, append(text, '\n'))
}

// writeAtomically replaces path with text, so that a reader (or a run
// killed halfway) never sees half a file.
func writeAtomically(path string, text []byte) error {
	temp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(temp.Name())
	if _, err := temp.Write(text); err != nil {
		temp.Close()
		return err
	}
	if err := temp.Chmod(0o644); err != nil {
		temp.Close()
		return err
	}
	if err := temp.Close(); err != nil {
		return err
	}
	return os.Rename(temp.Name(), path)
}
