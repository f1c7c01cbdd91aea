package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
)

// growth is section 9: how the driver's costs grow with the number of
// volumes. One parent (<pool>/bench/scale) is filled to each level in turn
// (-scale, default 100, 1,000, 10,000 volumes), by parallel bare zfs create
// of the command line the driver ran for a thin dataset (read back from the
// first volume's local properties, so the section needs no other). At each
// level: daemon start → READY=1, the reaper's sweep at start and its next
// pass (the daemon's own debug log lines; a pass must stay flat per volume
// and within 1.2× of the zfs commands it ran), one ListVolumes page and the
// full paged listing, the metrics' background read (its debug log line) and
// a scrape served from it, GetCapacity, CreateVolume and CreateSnapshot,
// and the daemon's peak RSS. Calls that are not listings must cost the same at every level
// (≤ 1.2× the smallest); CreateVolume and CreateSnapshot are also timed
// beside the bare zfs create / zfs snapshot in the same parent (what ZFS's
// own cost does). Listings are compared with the replay of the zfs and
// zpool commands the daemon logged for them (at debug level).
func (b *bench) growth(ctx context.Context) error {
	parent := b.dataset("scale")
	if _, _, err := run(ctx, b.tools.zfs, "create", parent); err != nil {
		return err
	}
	template, err := b.thinTemplate(ctx)
	if err != nil {
		return err
	}
	create := func(name string) []string { return template.argv(name, parent+"/"+name) }
	have := 1                      // the template volume
	byIoctl, tried := false, false // the ioctl fill is tried once, at the first level that makes volumes
	var base *levelCosts
	for _, level := range b.cfg.scale {
		if missing := level - have; missing > 0 {
			if !tried {
				tried = true
				byIoctl = b.fillsAsCreated(ctx, template, parent, have)
				if byIoctl {
					have++
					missing--
				}
			}
			workers := 4 * b.cfg.clients // many creates share each transaction group
			how := "bare zfs create"
			makeOne := func(i int) error {
				name := fmt.Sprintf("scale-%d", i)
				return b.zfs(ctx, create(name))
			}
			if byIoctl {
				workers, how = 16*b.cfg.clients, "ZFS_IOC_CREATE"
				makeOne = func(i int) error {
					name := fmt.Sprintf("scale-%d", i)
					return createByIoctl(parent+"/"+name, template.props(name))
				}
			}
			took, _, err := parallel(workers, have, level, makeOne)
			if err != nil {
				return err
			}
			b.notes = append(b.notes, fmt.Sprintf("section 9: %d volumes made by %d parallel %s in %.0fs (%.1f/s)",
				missing, workers, how, took.Seconds(), float64(missing)/took.Seconds()))
			have = level
		}
		costs, err := b.measureLevel(ctx, level, have, create)
		if err != nil {
			return fmt.Errorf("at %d volumes: %w", level, err)
		}
		have += costs.made
		b.rows["9"] = append(b.rows["9"], costs.rows(level, base)...)
		if base == nil {
			base = costs
		}
		b.checkpoint()
	}
	return nil
}

// levelCosts are the measurements at one level. Each listing has a bare
// twin: the zfs and zpool commands the daemon logged for it, replayed.
type levelCosts struct {
	start              samples
	capacity           paired // GetCapacity, and the replay of its zfs list
	create, snapshot   paired // the calls, and the bare zfs create / zfs snapshot beside them
	page, full, scrape paired
	sweep, pass        paired  // the reaper's sweep at start, and a pass after it
	served             samples // a scrape served from the last read
	peak               uint64
	made               int  // volumes CreateVolume added
	level              int  // volumes when measured
	reaperOnly         bool // only start and the reaper measured (-reaper-only)
}

// paired is a call and its bare twin: for a listing, the replay of the
// commands it ran; for a create, the bare command beside it.
type paired struct{ driver, bare samples }

// row compares the call with its twin (≤ 1.2×), or shows its time
// alone when it was not replayed.
func (l paired) row(what string) row {
	if len(l.bare) == 0 {
		return durationRow("9", what+" (not replayed)", l.driver)
	}
	return compare("9", what, l.driver, l.bare, 1.2)
}

// scaleRounds is how many times each call that is not a listing is
// measured at a level; listings are measured fewer times at large levels.
const scaleRounds = 5

func listingRounds(level int) int {
	if level > 1000 {
		return 1
	}
	return 3
}

// startRounds is how many times the daemon is started at a level: three
// everywhere, since one start is a noisy sample; past the first, a start at a
// large level is stopped once READY, without waiting out its reaper's sweep.
const startRounds = 3

// measureLevel measures everything at one level, where the parent holds
// want volumes; bareCreate is the zfs create of another thin volume there.
//
// long: every row of one level, measured on the same parent in order
func (b *bench) measureLevel(ctx context.Context, level, want int, bareCreate func(name string) []string) (*levelCosts, error) {
	c := &levelCosts{level: level}
	rounds := listingRounds(level)
	if b.cfg.reaperOnly {
		rounds = 1 // a quick look: one sweep and one pass per level
	}
	// Each start's sweep and the pass after it are what is measured: the
	// daemon does nothing else then but its start-up reads. A pass comes
	// right after the sweep: the interval (1 s) has passed by then.
	for i := range startRounds {
		cfg := b.daemonConfig("scale")
		cfg.notify = true
		cfg.logName = fmt.Sprintf("driver-%d-start-%d.log", level, i)
		cfg.extra = []string{"--log-level", "debug", "--reap-interval", "1s"}
		d, err := startDaemon(ctx, cfg)
		if err != nil {
			return nil, err
		}
		c.start = append(c.start, d.notified)
		if i >= rounds {
			d.stop() // READY is all this start measures
			continue
		}
		sweep, pass, err := reaperRuns(ctx, filepath.Join(cfg.dir, cfg.logName), true)
		d.stop()
		if err != nil {
			return nil, err
		}
		c.sweep.driver, c.pass.driver = append(c.sweep.driver, sweep.took), append(c.pass.driver, pass.took)
		bare, err := replay(ctx, pass.commands)
		if err != nil {
			return nil, err
		}
		c.pass.bare = append(c.pass.bare, bare)
		if level > 1000 {
			continue // the sweep's replay would take as long again: growth is read against the smaller levels
		}
		if bare, err = replay(ctx, sweep.commands); err != nil {
			return nil, err
		}
		c.sweep.bare = append(c.sweep.bare, bare)
	}
	if b.cfg.reaperOnly {
		c.reaperOnly = true
		fmt.Printf("=== bench: %d volumes: start %s, reaper sweep %s (bare %s), pass %s (bare %s)\n", level, ms(c.start.p50()),
			ms(c.sweep.driver.p50()), ms(c.sweep.bare.p50()), ms(c.pass.driver.p50()), ms(c.pass.bare.p50()))
		return c, nil
	}
	cfg := b.daemonConfig("scale")
	cfg.logName = fmt.Sprintf("driver-%d.log", level)
	const metricsAddress = "127.0.0.1:19829"
	cfg.extra = []string{"--log-level", "debug", "--reap-interval", "1h", "--metrics-address", metricsAddress}
	d, err := startDaemon(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	logPath := filepath.Join(cfg.dir, cfg.logName)
	if _, _, err := reaperRuns(ctx, logPath, false); err != nil {
		return nil, err
	}
	d.quiesce()
	// measure times call, then the replay of the commands it ran.
	measure := func(into *paired, call func(context.Context) error) error {
		before, err := loggedCommands(logPath)
		if err != nil {
			return err
		}
		took, err := timedWithin(ctx, listingLimit(level), call)
		if err != nil {
			return err
		}
		bare, err := replaySince(ctx, d, logPath, len(before))
		if err != nil {
			return err
		}
		into.driver, into.bare = append(into.driver, took), append(into.bare, bare)
		return nil
	}
	for range rounds {
		if err := measure(&c.page, func(ctx context.Context) error {
			response, err := d.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(b.cfg.pageSize)})
			if err == nil && len(response.GetEntries()) != min(b.cfg.pageSize, want) {
				err = fmt.Errorf("one page of ListVolumes: %d entries", len(response.GetEntries()))
			}
			return err
		}); err != nil {
			return nil, err
		}
		if err := measure(&c.full, func(ctx context.Context) error { return listAll(ctx, d, b.cfg.pageSize, want) }); err != nil {
			return nil, err
		}
	}
	// The metrics' pool and volume state is read when a scrape finds it
	// older than 10 s, in the background (the scrape waits at most 5 s for
	// it). Each round waits that out, scrapes to start a read, and takes the
	// read's duration from the daemon's log; then a scrape served from that
	// read.
	url := "http://" + metricsAddress + "/metrics"
	for range rounds {
		time.Sleep(11 * time.Second)
		if err := b.measureMetricsRead(ctx, d, logPath, url, level, c); err != nil {
			// A finding, not the end of the section.
			b.notes = append(b.notes, fmt.Sprintf("section 9: metrics at %d volumes: %v", level, err))
			break
		}
	}
	// GetCapacity is one zfs list of the parent: beside its replay, whether
	// what grows is ZFS's own.
	for range 3 * scaleRounds {
		if err := measure(&c.capacity, func(ctx context.Context) error {
			_, err := d.controller.GetCapacity(ctx, &csi.GetCapacityRequest{})
			return err
		}); err != nil {
			return nil, err
		}
	}
	// CreateVolume and CreateSnapshot beside the bare command in the same
	// parent: what grows with the number of volumes may be ZFS's own.
	var source *csi.Volume
	for i := range scaleRounds {
		var v *csi.Volume
		err := interleave(i, d, func() (time.Duration, error) {
			return timed(ctx, func(ctx context.Context) (err error) {
				v, err = createVolume(ctx, d, volumeRequest(fmt.Sprintf("scale-new-%d-%d", level, i), mountCapability(""), true))
				return err
			})
		}, func() (time.Duration, error) {
			took, _, err := run(ctx, append([]string{b.tools.zfs}, bareCreate(fmt.Sprintf("scale-bare-%d-%d", level, i))...)...)
			return took, err
		}, &c.create.driver, &c.create.bare)
		if err != nil {
			return nil, err
		}
		c.made, source = c.made+2, v
	}
	_, sourceDataset, err := rules.ParseVolumeID(source.GetVolumeId())
	if err != nil {
		return nil, err
	}
	for i := range scaleRounds {
		err := interleave(i, d, func() (time.Duration, error) {
			return timed(ctx, func(ctx context.Context) error {
				_, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("scale-snap-%d-%d", level, i),
					SourceVolumeId: source.GetVolumeId()})
				return err
			})
		}, func() (time.Duration, error) {
			took, _, err := run(ctx, b.tools.zfs, "snapshot", "-o", b.props.SnapshotName+"="+fmt.Sprintf("scale-bare-snap-%d-%d", level, i),
				fmt.Sprintf("%s@bare-%d", sourceDataset, i))
			return took, err
		}, &c.snapshot.driver, &c.snapshot.bare)
		if err != nil {
			return nil, err
		}
	}
	if _, c.peak, err = d.memory(); err != nil {
		return nil, err
	}
	fmt.Printf("=== bench: %d volumes: start %s, page %s (bare %s), full %s (bare %s), reaper sweep %s (bare %s), pass %s (bare %s), scrape %s (bare %s), GetCapacity %s, CreateVolume %s (zfs create %s), CreateSnapshot %s (zfs snapshot %s), peak RSS %s\n",
		level, ms(c.start.p50()), ms(c.page.driver.p50()), ms(c.page.bare.p50()), ms(c.full.driver.p50()), ms(c.full.bare.p50()),
		ms(c.sweep.driver.p50()), ms(c.sweep.bare.p50()), ms(c.pass.driver.p50()), ms(c.pass.bare.p50()), ms(c.scrape.driver.p50()), ms(c.scrape.bare.p50()),
		ms(c.capacity.driver.p50()), ms(c.create.driver.p50()), ms(c.create.bare.p50()), ms(c.snapshot.driver.p50()), ms(c.snapshot.bare.p50()), mib(c.peak))
	return c, nil
}

// rows are a level's rows: listings against the replay of their commands,
// the other calls against the first level (base; nil for the first level).
func (c *levelCosts) rows(level int, base *levelCosts) []row {
	at := func(what string) string { return fmt.Sprintf("%s, %d volumes", what, level) }
	if c.reaperOnly {
		rows := []row{c.sweep.row(at("reaper sweep at start (in the background) vs its zfs list")),
			c.pass.row(at("reaper pass vs its zfs commands"))}
		if base == nil {
			return append(rows, durationRow("9", at("daemon start → READY=1"), c.start), durationRow("9", at("reaper pass per volume"), perVolume(c.pass.driver, level)))
		}
		return append(rows, compare("9", at("daemon start → READY=1")+" vs the first level", c.start, base.start, 1.2),
			compare("9", at("reaper pass per volume")+" vs the first level", perVolume(c.pass.driver, level), perVolume(base.pass.driver, base.level), 1.2),
			c.listPerVolume(base))
	}
	rows := []row{
		c.page.row(at("ListVolumes one page vs its zfs commands")),
		c.full.row(at("ListVolumes all pages vs their zfs commands")),
		c.sweep.row(at("reaper sweep at start (in the background) vs its zfs list")),
		c.pass.row(at("reaper pass vs its zfs commands")),
		c.scrape.row(at("metrics read (in the background) vs its zfs commands")),
	}
	if len(c.served) > 0 {
		rows = append(rows, durationRow("9", at("metrics scrape served from the last read"), c.served))
	}
	rows = append(rows, compare("9", at("GetCapacity vs its zfs command"), c.capacity.driver, c.capacity.bare, 1.2),
		compare("9", at("CreateVolume thin dataset vs zfs create"), c.create.driver, c.create.bare, 1.2),
		compare("9", at("CreateSnapshot vs zfs snapshot -o"), c.snapshot.driver, c.snapshot.bare, 1.2))
	flat := []struct {
		what       string
		now, first samples
	}{{"daemon start → READY=1", c.start, nil}, {"GetCapacity", c.capacity.driver, nil},
		{"CreateVolume thin dataset", c.create.driver, nil}, {"CreateSnapshot", c.snapshot.driver, nil},
		{"reaper pass per volume", perVolume(c.pass.driver, level), nil}}
	if base != nil {
		flat[0].first, flat[1].first, flat[2].first, flat[3].first = base.start, base.capacity.driver, base.create.driver, base.snapshot.driver
		flat[4].first = perVolume(base.pass.driver, base.level)
	}
	for _, f := range flat {
		if f.first == nil {
			rows = append(rows, durationRow("9", at(f.what), f.now))
			continue
		}
		rows = append(rows, compare("9", at(f.what)+" vs the first level", f.now, f.first, 1.2))
	}
	if base != nil {
		rows = append(rows, c.listPerVolume(base))
	}
	return append(rows, memoryRow("9", at("daemon peak RSS (VmHWM)"), []uint64{c.peak}, 64<<20))
}

// listPerVolume shows how ZFS's own cost of the pass's commands grows per
// volume (no target): what of the pass's growth is not the driver's.
func (c *levelCosts) listPerVolume(base *levelCosts) row {
	return compare("9", fmt.Sprintf("the reaper pass's zfs commands per volume, %d volumes, vs the first level", c.level),
		perVolume(c.pass.bare, c.level), perVolume(base.pass.bare, base.level), 0)
}

// listingLimit bounds one listing at a level: the bench's per-call limit,
// plus what a listing of that many volumes may take in an emulated guest
// (measured: 14 s per 1,000 volumes).
func listingLimit(level int) time.Duration {
	return callLimit + time.Duration(level)*60*time.Millisecond
}

// replaySince waits until the daemon runs nothing, then replays the zfs
// commands it logged after the first seen ones.
func replaySince(ctx context.Context, d *daemon, logPath string, seen int) (time.Duration, error) {
	d.quiesce()
	logged, err := loggedCommands(logPath)
	if err != nil {
		return 0, err
	}
	return replay(ctx, logged[seen:])
}

// replay runs commands one after another and returns the time they took.
func replay(ctx context.Context, commands [][]string) (time.Duration, error) {
	var total time.Duration
	for _, argv := range commands {
		took, _, err := run(ctx, argv...)
		if err != nil {
			return 0, err
		}
		total += took
	}
	return total, nil
}

// listAll pages through ListVolumes and checks the count.
func listAll(ctx context.Context, d *daemon, pageSize, want int) error {
	token, entries := "", 0
	for {
		response, err := d.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(pageSize), StartingToken: token})
		if err != nil {
			return err
		}
		entries += len(response.GetEntries())
		if token = response.GetNextToken(); token == "" {
			return expectCount("paged ListVolumes", entries, want)
		}
	}
}

// measureMetricsRead starts a metrics read with a scrape, waits for the
// daemon to log the read's end, and replays the zfs commands it ran; then
// times a scrape served from it.
func (b *bench) measureMetricsRead(ctx context.Context, d *daemon, logPath, url string, level int, c *levelCosts) error {
	before, err := loggedCommands(logPath)
	if err != nil {
		return err
	}
	done, err := readLog(logPath, "metrics read")
	if err != nil {
		return err
	}
	if err := scrape(ctx, url, false); err != nil {
		return err
	}
	read, err := waitForLog(ctx, logPath, "metrics read", len(done), listingLimit(level))
	if err != nil {
		return err
	}
	// At once, while the read is fresh (younger than the 10 s the daemon
	// keeps it): a later scrape would start the next read and wait for it.
	served, err := timed(ctx, func(ctx context.Context) error { return scrape(ctx, url, true) })
	if err != nil {
		return err
	}
	c.served = append(c.served, served)
	bare, err := replaySince(ctx, d, logPath, len(before))
	if err != nil {
		return err
	}
	c.scrape.driver = append(c.scrape.driver, time.Duration(read.Duration*float64(time.Millisecond)))
	c.scrape.bare = append(c.scrape.bare, bare)
	return nil
}

// scrape reads the whole metrics page; full says it must show volumes.
func scrape(ctx context.Context, url string, full bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && (resp.StatusCode != http.StatusOK || full && !bytes.Contains(body, []byte("zfs_csi_volume_info"))) {
		err = fmt.Errorf("metrics: %s, %d bytes without zfs_csi_volume_info", resp.Status, len(body))
	}
	return err
}

// perVolume divides each sample by the number of volumes.
func perVolume(took samples, volumes int) samples {
	out := make(samples, len(took))
	for i, t := range took {
		out[i] = t / time.Duration(volumes)
	}
	return out
}
