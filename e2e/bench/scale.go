package main

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// parallel runs work(i) for i in [from, to) on the given number of workers
// and returns the wall time and each call's latency.
func parallel(workers, from, to int, work func(i int) error) (time.Duration, samples, error) {
	var next atomic.Int64
	next.Store(int64(from))
	var mu sync.Mutex
	var latencies samples
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				callStart := time.Now()
				err := work(i)
				mu.Lock()
				latencies = append(latencies, time.Since(callStart))
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), latencies, firstErr
}

// concurrency is section 2: clients creating thin 1 GiB datasets at once
// through the listing daemon (parent <pool>/bench/list), against as many
// parallel bare zfs create of the same command line. Driver and bare go
// in halves, driver-bare-bare-driver, to cancel drift. Both sides' volumes
// stay: they are part of the set section 3 lists.
func (b *bench) concurrency(ctx context.Context) error {
	d, err := startDaemon(ctx, b.daemonConfig("list"))
	if err != nil {
		return err
	}
	defer d.stop()
	d.quiesce()
	half := b.cfg.concurrent / 2
	driverCreate := func(i int) error {
		_, err := timed(ctx, func(ctx context.Context) error {
			_, err := d.controller.CreateVolume(ctx, volumeRequest(fmt.Sprintf("conc-%d", i), mountCapability(""), true))
			return err
		})
		return err
	}
	bareCreate := func(i int) error {
		name := fmt.Sprintf("bare-conc-%d", i)
		return b.zfs(ctx, b.templates["create-thin"].with(map[string]string{b.props.CSIName: name}, b.dataset("list")+"/"+name))
	}
	var driverWall, bareWall time.Duration
	var driverLatency, bareLatency samples
	for _, round := range []struct {
		driver   bool
		from, to int
	}{{true, 0, half}, {false, 0, half}, {false, half, b.cfg.concurrent}, {true, half, b.cfg.concurrent}} {
		work, wall, latency := bareCreate, &bareWall, &bareLatency
		if round.driver {
			work, wall, latency = driverCreate, &driverWall, &driverLatency
		}
		took, latencies, err := parallel(b.cfg.clients, round.from, round.to, work)
		if err != nil {
			return err
		}
		*wall += took
		*latency = append(*latency, latencies...)
		d.quiesce()
	}
	driverRate := float64(b.cfg.concurrent) / driverWall.Seconds()
	bareRate := float64(b.cfg.concurrent) / bareWall.Seconds()
	r := row{section: "2", what: fmt.Sprintf("%d clients × %d CreateVolume vs %d parallel zfs create: ops/s", b.cfg.clients, b.cfg.concurrent, b.cfg.clients),
		text: [4]string{fmt.Sprintf("%.2f/s", driverRate), "", fmt.Sprintf("%.2f/s", bareRate), ""}, ratio: bareRate / driverRate,
		commands: b.counts["CreateVolume dataset, thin"]}
	r.target, r.verdict = ratioVerdict(r.ratio, 1.10)
	latencies := compare("2", "  latency of one create under that load", driverLatency, bareLatency, 0)
	b.rows["2"] = []row{r, latencies}
	fmt.Printf("=== bench: concurrency: driver %.2f/s, bare %.2f/s\n", driverRate, bareRate)
	return nil
}

// listing is section 3. It first fills <pool>/bench/list up to the listed
// count with bare zfs create of the driver's thin-dataset command line (so
// each is a volume of the driver's, with its user properties), in
// parallel, then starts the daemon afresh and lists: every page of
// pageSize, and everything in one page, against one bare zfs list of the
// same datasets and columns (the driver's own argv), round after round
// in an order drawn for each round (sideOrder).
func (b *bench) listing(ctx context.Context) error {
	have := 2 * b.cfg.concurrent
	if missing := b.cfg.listed - have; missing > 0 {
		took, _, err := parallel(b.cfg.clients, 0, missing, func(i int) error {
			name := fmt.Sprintf("fill-%d", i)
			return b.zfs(ctx, b.templates["create-thin"].with(map[string]string{b.props.CSIName: name}, b.dataset("list")+"/"+name))
		})
		if err != nil {
			return err
		}
		b.notes = append(b.notes, fmt.Sprintf("section 3 set-up: %d more volumes by %d parallel bare zfs create in %.0fs (%.1f/s)",
			missing, b.cfg.clients, took.Seconds(), float64(missing)/took.Seconds()))
	}
	d, err := startDaemon(ctx, b.daemonConfig("list"))
	if err != nil {
		return err
	}
	defer d.stop()
	d.quiesce() // the reaper's sweep at start lists everything too
	_, startPeak, err := d.memory()
	if err != nil {
		return err
	}
	want := b.cfg.listed
	paged := func(ctx context.Context) error {
		token, entries := "", 0
		for {
			response, err := d.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(b.cfg.pageSize), StartingToken: token})
			if err != nil {
				return err
			}
			entries += len(response.GetEntries())
			if token = response.GetNextToken(); token == "" {
				break
			}
		}
		return expectCount("paged ListVolumes", entries, want)
	}
	onePage := func(ctx context.Context) error {
		response, err := d.controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
		if err != nil {
			return err
		}
		return expectCount("ListVolumes", len(response.GetEntries()), want)
	}
	bareList := func(ctx context.Context) error {
		_, out, err := run(ctx, append([]string{b.tools.zfs}, b.templates["list"].with(nil, b.dataset("list"))...)...)
		if err != nil {
			return err
		}
		return expectCount("zfs list", bytes.Count(out, []byte("\n")), want+1) // and the parent
	}
	sides := []func(context.Context) error{paged, onePage, bareList}
	results := make([]samples, len(sides))
	for round := range b.cfg.listRepeats {
		for k := range sides {
			side := (round + k) % len(sides)
			took, err := timed(ctx, sides[side])
			if err != nil {
				return err
			}
			results[side] = append(results[side], took)
			d.quiesce()
		}
	}
	rss, peak, err := d.memory()
	if err != nil {
		return err
	}
	pages := (want + b.cfg.pageSize - 1) / b.cfg.pageSize
	pagedRow := compare("3", fmt.Sprintf("ListVolumes %d volumes, all %d pages of %d vs one zfs list", want, pages, b.cfg.pageSize), results[0], results[2], 1.2)
	onePageRow := compare("3", fmt.Sprintf("ListVolumes %d volumes in one page vs one zfs list", want), results[1], results[2], 1.2)
	pagedRow.commands = fmt.Sprintf("1 page: %s", b.counts["ListVolumes"])
	memory := memoryRow("3", fmt.Sprintf("peak RSS (VmHWM) serving %d volumes; VmRSS after: %s; VmHWM before listing: %s", want, mib(rss), mib(startPeak)),
		[]uint64{peak}, 64<<20)
	b.rows["3"] = []row{pagedRow, onePageRow, memory}
	fmt.Printf("=== bench: listing: paged p50 %s, one page p50 %s, zfs list p50 %s, peak RSS %s\n",
		ms(results[0].p50()), ms(results[1].p50()), ms(results[2].p50()), mib(peak))
	return nil
}

func expectCount(what string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s returned %d entries, want %d", what, got, want)
	}
	return nil
}
