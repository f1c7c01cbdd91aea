package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// idleSettle is how long a started daemon sits idle, after its start-up
// commands (the reaper's sweep) ended, before its RSS is read.
const idleSettle = 2 * time.Second

// startup is section 5: the daemon started again and again on an empty
// parent, timed to READY=1 on a NOTIFY_SOCKET the bench provides and to
// Probe answering ready=true; its RSS once idle. A third as many starts
// more with --metrics-address show what the metrics listener adds.
//
// The bare side of start-up is the check the daemon makes before READY=1,
// by hand: zfs list of the parent and zpool list of its pool. The row
// below it is the Go program's own start (zfs-csi --help), doing no work.
func (b *bench) startup(ctx context.Context) error {
	var notified, ready, bare, processStart samples
	var idle, idleMetrics []uint64
	metricsStarts := max(1, b.cfg.starts/3)
	for i := range b.cfg.starts + metricsStarts {
		cfg := b.daemonConfig("start")
		cfg.notify = true
		withMetrics := i >= b.cfg.starts
		if withMetrics {
			cfg.extra = append(cfg.extra, "--metrics-address", "127.0.0.1:0")
		}
		d, err := startDaemon(ctx, cfg)
		if err != nil {
			return err
		}
		d.quiesce()
		time.Sleep(idleSettle)
		rss, _, err := d.memory()
		d.stop()
		if err != nil {
			return err
		}
		if withMetrics {
			idleMetrics = append(idleMetrics, rss)
			continue
		}
		notified, ready = append(notified, d.notified), append(ready, d.ready)
		idle = append(idle, rss)
		took, err := timed(ctx, func(ctx context.Context) error {
			if err := b.zfs(ctx, []string{"list", "-H", "-p", b.dataset("start")}); err != nil {
				return err
			}
			_, _, err := run(ctx, b.tools.zpool, "list", "-H", "-p", b.cfg.pool)
			return err
		})
		if err != nil {
			return err
		}
		bare = append(bare, took)
		took, err = timed(ctx, func(ctx context.Context) error {
			_, _, err := run(ctx, b.cfg.binary, "--help")
			return err
		})
		if err != nil {
			return err
		}
		processStart = append(processStart, took)
	}
	b.rows["5"] = []row{
		compare("5", "daemon start → READY=1 (sd_notify) vs zfs list + zpool list", notified, bare, 0),
		durationRow("5", "  of which: zfs-csi --help (process start, no work)", processStart),
		durationRow("5", "daemon start → Probe ready=true", ready),
		memoryRow("5", fmt.Sprintf("idle RSS (VmRSS %s after start-up)", idleSettle), idle, 20<<20),
		memoryRow("5", "idle RSS with --metrics-address", idleMetrics, 0),
	}
	return nil
}

// durationRow shows driver timings with nothing to compare them with.
func durationRow(section, what string, s samples) row {
	return row{section: section, what: what, driver: s, text: [4]string{ms(s.p50()), ms(s.p95()), "", ""}}
}

// memoryRow shows byte counts (p50 and p95) against a limit on the p95.
func memoryRow(section, what string, values []uint64, limit uint64) row {
	sorted := append([]uint64(nil), values...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	pick := func(q float64) uint64 {
		if len(sorted) == 0 {
			return 0
		}
		index := int(float64(len(sorted))*q+0.999999) - 1
		return sorted[min(max(index, 0), len(sorted)-1)]
	}
	r := row{section: section, what: what, text: [4]string{mib(pick(0.5)), mib(pick(0.95)), "", ""}}
	if limit > 0 {
		r.target = "≤" + mib(limit)
		r.verdict = "met"
		if pick(0.95) > limit {
			r.verdict = "MISSED"
		}
	}
	return r
}

// backgroundRow shows the work a call left running after it returned (the
// daemon's zfs commands the bench waited for before the next side): how
// long, in the rounds that had any.
func backgroundRow(section, what string, background samples, rounds int) row {
	call, _, _ := strings.Cut(what, " vs ")
	return durationRow(section, fmt.Sprintf("%s: background work after it returned (%d of %d rounds)", call, len(background), rounds), background)
}
