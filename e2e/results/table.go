package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Row is one suite's last run on one version: a line of docs/testing.md's
// results table and an entry of out/results.json.
type Row struct {
	Suite   string `json:"suite"`
	Version string `json:"version"`
	Verdict string `json:"verdict"`          // passed or failed
	Filter  string `json:"filter,omitempty"` // what narrowed a partial run
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped,omitempty"`
	Unit    string `json:"unit"` // what Passed, Failed and Skipped count
	// Failures name what failed, each with its summary note; Details say
	// what else the run's parts did (a conformance phase's count and time).
	Failures []string `json:"failures,omitempty"`
	Details  []string `json:"details,omitempty"`
	Seconds  int      `json:"seconds"`
	Date     string   `json:"date"`   // UTC, YYYY-MM-DD
	Commit   string   `json:"commit"` // git describe --always --dirty
	Command  string   `json:"command"`
}

// rowKey is what a row replaces: the same suite on the same version, run
// in full or narrowed. A narrowed run replacing a full one would leave the
// table without the last run of every scenario, so each keeps its own row.
type rowKey struct{ suite, version, scope string }

func (r Row) key() rowKey { return rowKey{r.Suite, r.Version, scope(r.Filter != "")} }

// scope names a row's run: narrowed by a filter, or whole.
func scope(narrowed bool) string {
	if narrowed {
		return "partial"
	}
	return "full"
}

// partialPrefix starts the result cell of a narrowed run's row.
const partialPrefix = "partial: "

// lineKey is the key of a table line the tool wrote, read from its cells.
func lineKey(c []string) rowKey {
	return rowKey{c[0], c[1], scope(strings.HasPrefix(c[2], partialPrefix))}
}

// newRow makes a row of a tally; exitStatus is run.sh's verdict on the whole
// run (a hang, a kernel panic, a missing exit code show in no summary line),
// -1 where the row has its own (a conformance YAML's).
func newRow(suiteName, version string, counted tally, exitStatus int) Row {
	row := Row{
		Suite: suiteName, Version: version, Verdict: "passed",
		Passed: counted.passed, Failed: counted.failed, Skipped: counted.skipped, Unit: counted.unit,
		Failures: counted.failures, Details: counted.details,
	}
	if exitStatus > 0 && len(row.Failures) == 0 {
		row.Failures = []string{fmt.Sprintf("run.sh exit status %d with no failed step in the summary (a hang, a panic or no exit code: the console log says)", exitStatus)}
	}
	if len(row.Failures) > 0 || row.Failed > 0 {
		row.Verdict = "failed"
	}
	return row
}

// tableHeader is the results table's header, as the tool writes it and
// expects to find it.
const tableHeader = "| suite | version | result | seconds | date | commit | command |"

// Between these markers docs/testing.md's table is the tool's: a row it
// does not write (make test's, the bench's) is kept as it is.
const (
	beginMarker = "<!-- results table: written by e2e/results when e2e/run.sh ends; one row per suite, version and scope (full or partial) -->"
	endMarker   = "<!-- end of results table -->"
)

// maxFailures is how many failures a table row names; out/results.json
// keeps them all.
const maxFailures = 6

// markdown renders the row as a line of the table.
func (r Row) markdown() string {
	var result strings.Builder
	if r.Filter != "" {
		result.WriteString(partialPrefix + code(r.Filter) + "; ")
	}
	fmt.Fprintf(&result, "%s, %d of %d %s", r.Verdict, r.Passed, r.Passed+r.Failed, r.Unit)
	if r.Skipped > 0 {
		fmt.Fprintf(&result, ", %d skipped", r.Skipped)
	}
	notes := r.Details
	if len(r.Failures) > 0 {
		failures := r.Failures[:min(len(r.Failures), maxFailures)]
		if more := len(r.Failures) - len(failures); more > 0 {
			failures = append(failures, fmt.Sprintf("%d more in out/results.json", more))
		}
		notes = append(notes[:len(notes):len(notes)], "failed: "+strings.Join(failures, "; "))
	}
	if len(notes) > 0 {
		result.WriteString(" (" + strings.Join(notes, "; ") + ")")
	}
	cells := []string{r.Suite, r.Version, result.String(), strconv.Itoa(r.Seconds), r.Date, r.Commit, code(r.Command)}
	for i, cell := range cells {
		cells[i] = strings.ReplaceAll(strings.Join(strings.Fields(cell), " "), "|", `\|`)
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

// code is text as a Markdown code span.
func code(text string) string {
	if strings.Contains(text, "`") {
		return "`` " + text + " ``"
	}
	return "`" + text + "`"
}

// cells splits a table line at its unescaped pipes, each cell trimmed.
func cells(line string) []string {
	var out []string
	var cell strings.Builder
	line = strings.TrimSpace(line)
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteString(`\|`)
			i++
		case line[i] == '|':
			out = append(out, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return append(out, strings.TrimSpace(cell.String()))
}

// tableRows finds the table between the markers: the index of its first
// row's line and of the end marker's, after checking the header.
func tableRows(lines []string) (first, end int, err error) {
	begin, end := -1, -1
	for i, line := range lines {
		switch strings.TrimSpace(line) {
		case beginMarker:
			begin = i
		case endMarker:
			end = i
		}
	}
	switch {
	case begin < 0 || end < 0:
		return 0, 0, fmt.Errorf("no results table: the markers %q and %q are not both there", beginMarker, endMarker)
	case end < begin+3:
		return 0, 0, fmt.Errorf("the results table has no header and separator between its markers")
	case strings.TrimSpace(lines[begin+1]) != tableHeader:
		return 0, 0, fmt.Errorf("the results table's header is %q; e2e/results writes %q", strings.TrimSpace(lines[begin+1]), tableHeader)
	}
	for i := begin + 3; i < end; i++ {
		if got, want := len(cells(lines[i])), len(cells(tableHeader)); !strings.HasPrefix(strings.TrimSpace(lines[i]), "|") || got != want {
			return 0, 0, fmt.Errorf("results table line %d has %d cells, want %d: %s", i+1, got, want, lines[i])
		}
	}
	return begin + 3, end, nil
}

// updateTable returns doc with the row in its table: in place of the row of
// the same key, else after the last row of the same suite, else last.
func updateTable(doc []byte, row Row) ([]byte, error) {
	lines := strings.Split(string(doc), "\n")
	first, end, err := tableRows(lines)
	if err != nil {
		return nil, err
	}
	line := row.markdown()
	key := lineKey(cells(line))
	at, replace := end, false
	for i := first; i < end; i++ {
		existing := lineKey(cells(lines[i]))
		if existing == key {
			at, replace = i, true
			break
		}
		if existing.suite == key.suite {
			at = i + 1
		}
	}
	if replace {
		lines[at] = line
	} else {
		lines = append(lines[:at], append([]string{line}, lines[at:]...)...)
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// upsertRows returns rows with row in place of the one of the same key, or
// added last.
func upsertRows(rows []Row, row Row) []Row {
	for i := range rows {
		if rows[i].key() == row.key() {
			rows[i] = row
			return rows
		}
	}
	return append(rows, row)
}

// checkTable says whether doc's results table is one the tool can update:
// the markers, its header, and one row per key.
func checkTable(doc []byte) error {
	lines := strings.Split(string(bytes.ReplaceAll(doc, []byte("\r\n"), []byte("\n"))), "\n")
	first, end, err := tableRows(lines)
	if err != nil {
		return err
	}
	seen := map[rowKey]int{}
	for i := first; i < end; i++ {
		key := lineKey(cells(lines[i]))
		if earlier, ok := seen[key]; ok {
			return fmt.Errorf("results table lines %d and %d are both the %s %s on %s", earlier+1, i+1, key.scope, key.suite, key.version)
		}
		seen[key] = i
	}
	return nil
}
