package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// samples are the latencies of one side of a comparison.
type samples []time.Duration

// percentile is the nearest-rank percentile (q in 0..1); 0 for no samples.
func (s samples) percentile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	sorted := append(samples(nil), s...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func (s samples) p50() time.Duration { return s.percentile(0.50) }
func (s samples) p95() time.Duration { return s.percentile(0.95) }

// sum is the time all the samples took together.
func (s samples) sum() time.Duration {
	var total time.Duration
	for _, d := range s {
		total += d
	}
	return total
}

// row is one line of the table. A comparison has driver and bare samples;
// a throughput, RSS or count row fills the text columns itself.
type row struct {
	section   string
	what      string
	driver    samples
	bare      samples
	ratio     float64 // driver/bare in time; 0 when there is no comparison
	limit     float64 // the target for ratio (or for value, see unit); 0 for none
	text      [4]string
	target    string
	verdict   string
	commands  string // zfs/zpool commands per call, from the counting run
	hideRatio bool
}

// compare builds a comparison row: the ratio is of the p50s.
func compare(section, what string, driver, bare samples, limit float64) row {
	r := row{section: section, what: what, driver: driver, bare: bare, limit: limit}
	r.text = [4]string{ms(driver.p50()), ms(driver.p95()), ms(bare.p50()), ms(bare.p95())}
	if bare.p50() > 0 {
		r.ratio = float64(driver.p50()) / float64(bare.p50())
	}
	r.target, r.verdict = ratioVerdict(r.ratio, limit)
	return r
}

// ratioVerdict says whether a time ratio meets its limit.
func ratioVerdict(ratio, limit float64) (target, verdict string) {
	if limit == 0 {
		return "", ""
	}
	target = fmt.Sprintf("≤%.2f×", limit)
	switch {
	case ratio == 0:
		verdict = "n/a"
	case ratio <= limit:
		verdict = "met"
	default:
		verdict = "MISSED"
	}
	return target, verdict
}

// ms renders a duration in milliseconds, with a decimal below 100 ms.
func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	v := float64(d) / float64(time.Millisecond)
	if v < 100 {
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}

// mib renders a byte count in MiB.
func mib(bytes uint64) string { return fmt.Sprintf("%.1fMiB", float64(bytes)/(1<<20)) }

// render lays the rows out as one fixed-width table.
func render(title []string, rows []row, notes []string) string {
	header := []string{"#", "operation", "driver p50", "p95", "bare p50", "p95", "ratio", "target", "result", "zfs cmds/call"}
	cells := [][]string{header}
	for _, r := range rows {
		ratio := ""
		if r.ratio != 0 && !r.hideRatio {
			ratio = fmt.Sprintf("%.2f×", r.ratio)
		}
		cells = append(cells, []string{r.section, r.what, r.text[0], r.text[1], r.text[2], r.text[3], ratio, r.target, r.verdict, r.commands})
	}
	widths := make([]int, len(header))
	for _, line := range cells {
		for i, cell := range line {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	var b strings.Builder
	for _, line := range title {
		b.WriteString(line + "\n")
	}
	separator := ""
	for i, line := range cells {
		var parts []string
		for j, cell := range line {
			pad := widths[j] - len([]rune(cell))
			if j >= 2 && j <= 6 { // numbers right-aligned
				parts = append(parts, strings.Repeat(" ", pad)+cell)
			} else {
				parts = append(parts, cell+strings.Repeat(" ", pad))
			}
		}
		text := strings.TrimRight(strings.Join(parts, "  "), " ")
		b.WriteString(text + "\n")
		if i == 0 {
			separator = strings.Repeat("-", len([]rune(text)))
			b.WriteString(separator + "\n")
		}
	}
	b.WriteString(separator + "\n")
	for _, note := range notes {
		b.WriteString(note + "\n")
	}
	return b.String()
}
