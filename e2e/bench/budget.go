package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Every section runs under a budget of its own, computed from the work it
// will do (in zfs commands and guest boots) and from what one zfs command
// costs on this host, measured at the start. A section that fails or runs out
// of its budget keeps the rows it made, is named in the table's notes with
// why, and the next section runs: a loaded host loses a section, not the run.

// commandCost measures what a zfs command that changes state costs here: the
// median of a few create/destroy pairs under root.
func (b *bench) commandCost(ctx context.Context, root string) time.Duration {
	var took samples
	for i := range 5 {
		name := fmt.Sprintf("%s/calibrate-%d", root, i)
		start := time.Now()
		if err := exec.CommandContext(ctx, b.tools.zfs, "create", name).Run(); err != nil {
			return time.Second // unknown: a generous guess
		}
		_ = exec.CommandContext(ctx, b.tools.zfs, "destroy", name).Run()
		took = append(took, time.Since(start)/2)
	}
	return took.p50()
}

// sectionWork is how many zfs-command equivalents a section does, from the
// configuration; a daemon start counts as 10.
func sectionWork(number string, cfg config) int {
	switch number {
	case "6":
		return 200
	case "5":
		return cfg.starts * 2 * 10
	case "1":
		return cfg.n*8*3*2 + 2*snapshotDepth // eight items, driver and one or two bare sides, a command or two each; the deep volume's snapshots
	case "4":
		return cfg.nodeN * 4 * 4 // three sides and the ownership read's three
	case "2":
		return cfg.concurrent * 2 * 4
	case "3":
		return cfg.listed*2 + cfg.listRepeats*40
	case "7":
		return 16*2 + 16*2 + 2*max(cfg.n/5, 3)*(16+3)*2 // volumes, stages, idle and in-use rounds
	case "8":
		return 3500 // 1 GiB written twice, then two deltas: each read three times and sent three (the second sends the base too)
	case "9":
		// The volumes; per level 2-4 daemon starts, their reaper sweeps
		// and passes, the calls, and the listings twice each (the driver
		// and the replay), at about a command per 20 rows.
		work := cfg.scale[len(cfg.scale)-1]
		for _, level := range cfg.scale {
			rounds := listingRounds(level)
			work += rounds*(10+4*level/20) + 3*scaleRounds + rounds*3*2*level/20
		}
		return work
	}
	return 500
}

// budgetFor gives a section four times its expected work, and a minute more.
func budgetFor(number string, cfg config, cost time.Duration) time.Duration {
	return time.Duration(sectionWork(number, cfg))*cost*4 + time.Minute
}

// section is one part of the bench.
type section struct {
	number, name string
	run          func(context.Context) error
}

// runSections runs the sections in order, each under its budget. It returns
// the names of those that did not finish, each with why.
func runSections(ctx context.Context, sections []section, budget func(section) time.Duration, done func(section, time.Duration)) []string {
	var unfinished []string
	captured := true // sections 1-3 replay what 6 captures
	for _, s := range sections {
		if strings.Contains("123", s.number) && !captured {
			unfinished = append(unfinished, fmt.Sprintf("section %s skipped: section 6 did not finish", s.name))
			continue
		}
		limit := budget(s)
		sectionCtx, cancel := context.WithTimeout(ctx, limit)
		start := time.Now()
		fmt.Printf("=== bench: section %s (budget %s)\n", s.name, limit.Round(time.Second))
		err := s.run(sectionCtx)
		cancel()
		took := time.Since(start)
		switch {
		case err == nil:
			done(s, took)
			continue
		case errors.Is(err, context.DeadlineExceeded) || took >= limit:
			unfinished = append(unfinished, fmt.Sprintf("section %s did not finish within its budget of %s: %v", s.name, limit.Round(time.Second), err))
		default:
			unfinished = append(unfinished, fmt.Sprintf("section %s failed after %s: %v", s.name, took.Round(time.Second), err))
		}
		if s.number == "6" {
			captured = false
		}
		fmt.Printf("=== bench: %s\n", unfinished[len(unfinished)-1])
	}
	return unfinished
}
