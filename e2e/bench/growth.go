package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/driver"
)

// growth is section 9: how the driver's costs grow with the number of
// volumes. One parent (<pool>/bench/scale) is filled to each level in turn
// (-scale, default 100, 1,000, 10,000 volumes), by parallel bare zfs create
// of the command line the driver ran for a thin dataset (read back from the
// first volume's local properties, so the section needs no other). At each
// level: daemon start → READY=1, one ListVolumes page and the full paged
// listing, a reaper pass (the daemon's own debug log line), a metrics
// scrape, GetCapacity, CreateVolume and CreateSnapshot, and the daemon's
// peak RSS. Calls that are not listings must cost the same at every level
// (≤ 1.2× the smallest); listings are compared with one bare zfs list of the
// same rows, the command the daemon ran for ListVolumes (from its debug log).
func (b *bench) growth(ctx context.Context) error {
	parent := b.dataset("scale")
	if _, _, err := run(ctx, b.tools.zfs, "create", parent); err != nil {
		return err
	}
	create, err := b.thinCreateLine(ctx)
	if err != nil {
		return err
	}
	have := 1 // the template volume
	var base *levelCosts
	for _, level := range b.cfg.scale {
		if missing := level - have; missing > 0 {
			took, _, err := parallel(b.cfg.clients, have, level, func(i int) error {
				name := fmt.Sprintf("scale-%d", i)
				return b.zfs(ctx, create(name, parent+"/"+name))
			})
			if err != nil {
				return err
			}
			b.notes = append(b.notes, fmt.Sprintf("section 9: %d volumes made by %d parallel bare zfs create in %.0fs (%.1f/s)",
				missing, b.cfg.clients, took.Seconds(), float64(missing)/took.Seconds()))
			have = level
		}
		costs, err := b.measureLevel(ctx, level, have)
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

// thinCreateLine makes one thin dataset through the driver and returns a
// function giving the bare zfs create of another one with the same local
// properties (its CSI name replaced).
func (b *bench) thinCreateLine(ctx context.Context) (func(csiName, dataset string) []string, error) {
	d, err := startDaemon(ctx, b.daemonConfig("scale"))
	if err != nil {
		return nil, err
	}
	defer d.stop()
	volume, err := createVolume(ctx, d, volumeRequest("scale-0", mountCapability(""), true))
	if err != nil {
		return nil, err
	}
	_, dataset, err := driver.ParseVolumeID(volume.GetVolumeId())
	if err != nil {
		return nil, err
	}
	_, out, err := run(ctx, b.tools.zfs, "get", "-H", "-p", "-s", "local", "-o", "property,value", "all", dataset)
	if err != nil {
		return nil, err
	}
	var options []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		property, value, found := strings.Cut(line, "\t")
		if found {
			options = append(options, property, value)
		}
	}
	if len(options) == 0 {
		return nil, fmt.Errorf("%s has no local properties", dataset)
	}
	return func(csiName, name string) []string {
		argv := []string{"create"}
		for i := 0; i < len(options); i += 2 {
			value := options[i+1]
			if options[i] == b.props.CSIName {
				value = csiName
			}
			argv = append(argv, "-o", options[i]+"="+value)
		}
		return append(argv, name)
	}, nil
}

// levelCosts are the measurements at one level.
type levelCosts struct {
	start, page, full, bareList, reaper, scrape, capacity, create, snapshot samples
	peak                                                                    uint64
	made                                                                    int // volumes CreateVolume added
}

// scaleRounds is how many times each call is measured at a level.
const scaleRounds = 5

// measureLevel measures everything at one level, where the parent holds
// want volumes.
func (b *bench) measureLevel(ctx context.Context, level, want int) (*levelCosts, error) {
	c := &levelCosts{}
	// Each start's first reaper pass runs alone: it is the pass measured.
	for i := range 3 {
		cfg := b.daemonConfig("scale")
		cfg.notify = true
		cfg.logName = fmt.Sprintf("driver-%d-start-%d.log", level, i)
		cfg.extra = []string{"--log-level", "debug"}
		d, err := startDaemon(ctx, cfg)
		if err != nil {
			return nil, err
		}
		c.start = append(c.start, d.notified)
		pass, err := firstReaperPass(ctx, filepath.Join(cfg.dir, cfg.logName))
		d.stop()
		if err != nil {
			return nil, err
		}
		c.reaper = append(c.reaper, pass)
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
	if _, err := firstReaperPass(ctx, filepath.Join(cfg.dir, cfg.logName)); err != nil {
		return nil, err
	}
	d.quiesce()
	logPath := filepath.Join(cfg.dir, cfg.logName)
	for round := range scaleRounds {
		took, err := timed(ctx, func(ctx context.Context) error {
			response, err := d.controller.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(b.cfg.pageSize)})
			if err == nil && len(response.GetEntries()) != min(b.cfg.pageSize, want) {
				err = fmt.Errorf("one page of ListVolumes: %d entries", len(response.GetEntries()))
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		c.page = append(c.page, took)
		d.quiesce()
		took, err = timed(ctx, func(ctx context.Context) error { return listAll(ctx, d, b.cfg.pageSize, want) })
		if err != nil {
			return nil, err
		}
		c.full = append(c.full, took)
		d.quiesce()
		if round == 0 {
			continue // the bare side replays the command the first listing ran
		}
		argv, err := lastCommand(logPath, "list")
		if err != nil {
			return nil, err
		}
		took, _, err = run(ctx, append([]string{b.tools.zfs}, argv[1:]...)...)
		if err != nil {
			return nil, err
		}
		c.bareList = append(c.bareList, took)
	}
	for range scaleRounds {
		took, err := timed(ctx, func(ctx context.Context) error {
			_, err := d.controller.GetCapacity(ctx, &csi.GetCapacityRequest{})
			return err
		})
		if err != nil {
			return nil, err
		}
		c.capacity = append(c.capacity, took)
	}
	var source *csi.Volume
	for i := range scaleRounds {
		var v *csi.Volume
		took, err := timed(ctx, func(ctx context.Context) (err error) {
			v, err = createVolume(ctx, d, volumeRequest(fmt.Sprintf("scale-new-%d-%d", level, i), mountCapability(""), true))
			return err
		})
		if err != nil {
			return nil, err
		}
		c.create, c.made, source = append(c.create, took), c.made+1, v
		d.quiesce()
	}
	for i := range scaleRounds {
		took, err := timed(ctx, func(ctx context.Context) error {
			_, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("scale-snap-%d-%d", level, i),
				SourceVolumeId: source.GetVolumeId()})
			return err
		})
		if err != nil {
			return nil, err
		}
		c.snapshot = append(c.snapshot, took)
		d.quiesce()
	}
	// The metrics' pool and volume state is cached for 10 s: each scrape
	// waits that out, so that each reads ZFS.
	for range 3 {
		time.Sleep(11 * time.Second)
		d.quiesce()
		took, err := timed(ctx, func(ctx context.Context) error { return scrape(ctx, "http://"+metricsAddress+"/metrics") })
		if err != nil {
			return nil, err
		}
		c.scrape = append(c.scrape, took)
	}
	if _, c.peak, err = d.memory(); err != nil {
		return nil, err
	}
	fmt.Printf("=== bench: %d volumes: start %s, page %s, full %s, zfs list %s, reaper %s, scrape %s, GetCapacity %s, CreateVolume %s, CreateSnapshot %s, peak RSS %s\n",
		level, ms(c.start.p50()), ms(c.page.p50()), ms(c.full.p50()), ms(c.bareList.p50()), ms(c.reaper.p50()), ms(c.scrape.p50()),
		ms(c.capacity.p50()), ms(c.create.p50()), ms(c.snapshot.p50()), mib(c.peak))
	return c, nil
}

// rows are a level's rows: listings against the bare zfs list, the other
// calls against the first level (base; nil for the first level itself).
func (c *levelCosts) rows(level int, base *levelCosts) []row {
	at := func(what string) string { return fmt.Sprintf("%s, %d volumes", what, level) }
	rows := []row{
		compare("9", at("ListVolumes one page vs zfs list of all"), c.page, c.bareList, 1.2),
		compare("9", at("ListVolumes all pages vs zfs list"), c.full, c.bareList, 1.2),
		compare("9", at("reaper pass vs zfs list"), c.reaper, c.bareList, 1.2),
		compare("9", at("metrics scrape vs zfs list"), c.scrape, c.bareList, 1.2),
	}
	flat := []struct {
		what       string
		now, first samples
	}{{"daemon start → READY=1", c.start, nil}, {"GetCapacity", c.capacity, nil},
		{"CreateVolume thin dataset", c.create, nil}, {"CreateSnapshot", c.snapshot, nil}}
	if base != nil {
		flat[0].first, flat[1].first, flat[2].first, flat[3].first = base.start, base.capacity, base.create, base.snapshot
	}
	for _, f := range flat {
		if f.first == nil {
			rows = append(rows, durationRow("9", at(f.what), f.now))
			continue
		}
		rows = append(rows, compare("9", at(f.what)+" vs the first level", f.now, f.first, 1.2))
	}
	return append(rows, memoryRow("9", at("daemon peak RSS (VmHWM)"), []uint64{c.peak}, 64<<20))
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

// scrape reads the whole metrics page.
func scrape(ctx context.Context, url string) error {
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
	if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("zfs_csi_volume_info"))) {
		err = fmt.Errorf("metrics: %s, %d bytes without zfs_csi_volume_info", resp.Status, len(body))
	}
	return err
}

// logLine is the part of the daemon's JSON log lines the section reads.
type logLine struct {
	Message  string   `json:"message"`
	Argv     []string `json:"argv"`
	Duration float64  `json:"duration"` // milliseconds (zerolog's Dur)
}

// readLog decodes the daemon's JSON log lines that have the message.
func readLog(path, message string) ([]logLine, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var lines []logLine
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		var line logLine
		if json.Unmarshal(scanner.Bytes(), &line) == nil && line.Message == message {
			lines = append(lines, line)
		}
	}
	return lines, scanner.Err()
}

// lastCommand is the argv of the last zfs command with that subcommand the
// daemon logged (at debug level).
func lastCommand(path, subcommand string) ([]string, error) {
	lines, err := readLog(path, "zfs command")
	if err != nil {
		return nil, err
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if argv := lines[i].Argv; len(argv) > 1 && argv[1] == subcommand {
			return argv, nil
		}
	}
	return nil, fmt.Errorf("%s logs no zfs %s", path, subcommand)
}

// firstReaperPass waits for the daemon to log its first reaper pass (at
// debug level) and returns how long the pass took.
func firstReaperPass(ctx context.Context, path string) (time.Duration, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		lines, err := readLog(path, "reaper pass")
		if err != nil {
			return 0, err
		}
		if len(lines) > 0 {
			return time.Duration(lines[0].Duration * float64(time.Millisecond)), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("%s logs no reaper pass after 5 minutes", path)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
