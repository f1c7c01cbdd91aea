package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPercentilesAreNearestRank(t *testing.T) {
	var s samples
	for i := 1; i <= 20; i++ {
		s = append(s, time.Duration(21-i)*time.Millisecond) // unsorted on purpose
	}
	if got := s.p50(); got != 10*time.Millisecond {
		t.Errorf("p50 = %v, want 10ms", got)
	}
	if got := s.p95(); got != 19*time.Millisecond {
		t.Errorf("p95 = %v, want 19ms", got)
	}
	if got := (samples{time.Second}).p95(); got != time.Second {
		t.Errorf("p95 of one sample = %v", got)
	}
	if got := (samples{}).p50(); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
}

func TestCompareJudgesTheRatioOfTheMedians(t *testing.T) {
	r := compare("1", "x", samples{110 * time.Millisecond}, samples{100 * time.Millisecond}, 1.10)
	if r.verdict != "met" {
		t.Errorf("1.10× against ≤1.10×: %q", r.verdict)
	}
	r = compare("1", "x", samples{112 * time.Millisecond}, samples{100 * time.Millisecond}, 1.10)
	if r.verdict != "MISSED" || r.target != "≤1.10×" {
		t.Errorf("1.12× against ≤1.10×: %q %q", r.verdict, r.target)
	}
}

func TestTemplateReplacesOperandsAndNamedProperties(t *testing.T) {
	driverArgv := template{"create", "-o", "compression=lz4", "-o", "zfs.csi.dev:csi-name=count-fs", "-o", "zfs.csi.dev:managed=true",
		"tank/bench/count/count-fs"}
	got := driverArgv.with(map[string]string{"zfs.csi.dev:csi-name": "bare-fs-1"}, "tank/bench/bare/fs-1")
	want := []string{"create", "-o", "compression=lz4", "-o", "zfs.csi.dev:csi-name=bare-fs-1", "-o", "zfs.csi.dev:managed=true",
		"tank/bench/bare/fs-1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if driverArgv[4] != "zfs.csi.dev:csi-name=count-fs" {
		t.Error("with changed the template itself")
	}
	clone := template{"clone", "-o", "a:b=c", "tank/x@s", "tank/y"}
	if got := clone.with(nil, "tank/p@q", "tank/r"); !reflect.DeepEqual(got, []string{"clone", "-o", "a:b=c", "tank/p@q", "tank/r"}) {
		t.Errorf("clone: got %q", got)
	}
}

func TestCommandLogLinesParse(t *testing.T) {
	commands, err := parseCommandLog("1700000000.250000\tzfs\tlist\t-H\ttank\n1700000001.000000\tzpool\tlist\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(commands) != 2 || commands[0].name() != "list" || commands[1].name() != "zpool list" {
		t.Fatalf("got %+v", commands)
	}
	if !reflect.DeepEqual(commands[0].args, []string{"list", "-H", "tank"}) {
		t.Errorf("args %q", commands[0].args)
	}
	if got := commands[0].at.UnixMilli(); got != 1700000000250 {
		t.Errorf("time %d", got)
	}
	if got := summarize(commands); got != "2: list, zpool list" {
		t.Errorf("summarize: %q", got)
	}
	if got := countSummary(append(commands, commands[0])); got != "3: list×2, zpool list×1" {
		t.Errorf("countSummary: %q", got)
	}
	if _, err := parseCommandLog("garbage\n"); err == nil {
		t.Error("a line without fields parsed")
	}
}

func TestStatusGivesRSSAndPeak(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	os.WriteFile(path, []byte("Name:\tzfs-csi\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t7\n"), 0o644)
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	rss, peak, err := parseStatus(file)
	if err != nil || rss != 10<<20 || peak != 20<<20 {
		t.Errorf("rss %d peak %d err %v", rss, peak, err)
	}
}

func TestTableHasOneLinePerRow(t *testing.T) {
	rows := []row{
		compare("1", "CreateVolume", samples{500 * time.Millisecond}, samples{490 * time.Millisecond}, 1.10),
		memoryRow("5", "idle RSS", []uint64{12 << 20, 14 << 20}, 20<<20),
	}
	table := render([]string{"title"}, rows, []string{"note"})
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != 1+2+len(rows)+1+1 {
		t.Fatalf("%d lines:\n%s", len(lines), table)
	}
	if !strings.Contains(lines[3], "1.02×") || !strings.Contains(lines[3], "met") {
		t.Errorf("comparison row: %q", lines[3])
	}
	if !strings.Contains(lines[4], "14.0MiB") || !strings.Contains(lines[4], "≤20.0MiB") {
		t.Errorf("memory row: %q", lines[4])
	}
}

// A section that fails or overruns its budget is named with why, and the
// sections after it still run; those that replay section 6 are skipped when
// it did not finish.
func TestSectionsRunUnderTheirOwnBudgets(t *testing.T) {
	var ran []string
	sections := []section{
		{"6", "6 counting", func(ctx context.Context) error { ran = append(ran, "6"); return errors.New("the daemon died") }},
		{"1", "1 sequential", func(ctx context.Context) error { ran = append(ran, "1"); return nil }},
		{"5", "5 slow", func(ctx context.Context) error {
			ran = append(ran, "5")
			<-ctx.Done()
			return ctx.Err()
		}},
		{"7", "7 fine", func(ctx context.Context) error { ran = append(ran, "7"); return nil }},
	}
	var finished []string
	unfinished := runSections(context.Background(), sections, func(section) time.Duration { return 50 * time.Millisecond },
		func(s section, _ time.Duration) { finished = append(finished, s.number) })
	if !reflect.DeepEqual(ran, []string{"6", "5", "7"}) || !reflect.DeepEqual(finished, []string{"7"}) {
		t.Errorf("ran %v, finished %v", ran, finished)
	}
	want := []string{"section 6 counting failed", "section 1 sequential skipped", "section 5 slow did not finish within its budget"}
	if len(unfinished) != len(want) {
		t.Fatalf("unfinished %q", unfinished)
	}
	for i, prefix := range want {
		if !strings.HasPrefix(unfinished[i], prefix) {
			t.Errorf("unfinished[%d] = %q, want it to start with %q", i, unfinished[i], prefix)
		}
	}
}

func TestBudgetsGrowWithTheWorkAndTheHost(t *testing.T) {
	small, big := config{n: 4}, config{n: 50}
	if budgetFor("1", small, 100*time.Millisecond) >= budgetFor("1", big, 100*time.Millisecond) {
		t.Error("more rounds, no more time")
	}
	if budgetFor("1", big, 100*time.Millisecond) >= budgetFor("1", big, 300*time.Millisecond) {
		t.Error("a slower host, no more time")
	}
}

// Over a run's rounds each side goes first, and follows each other side,
// about as often as the others: no side is measured behind the same
// neighbour round after round.
func TestSidesTakeTurnsAndNeighbours(t *testing.T) {
	const sides, rounds = 5, 100
	first := make([]int, sides)
	follows := map[[2]int]int{}
	for i := range rounds {
		order := sideOrder(i, sides)
		if len(order) != sides {
			t.Fatalf("round %d: order %v", i, order)
		}
		seen := make([]bool, sides)
		for k, side := range order {
			if seen[side] {
				t.Fatalf("round %d: side %d twice in %v", i, side, order)
			}
			seen[side] = true
			if k > 0 {
				follows[[2]int{order[k-1], side}]++
			}
		}
		first[order[0]]++
	}
	for side, n := range first {
		if n < rounds/sides/2 {
			t.Errorf("side %d went first in %d of %d rounds", side, n, rounds)
		}
	}
	// Each side has a predecessor in 80 rounds of 100; spread over four
	// others that is 20 each, and no one of them may take most.
	for pair, n := range follows {
		if n > 40 {
			t.Errorf("side %d followed side %d in %d of %d rounds", pair[1], pair[0], n, rounds)
		}
	}
}
