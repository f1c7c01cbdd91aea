package metrics

import (
	"bufio"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// poolStates are the health values zpool reports; zfs_csi_pool_health has
// one series per state, 1 for the current one (a Prometheus state set).
var poolStates = []string{"ONLINE", "DEGRADED", "FAULTED", "OFFLINE", "UNAVAIL", "REMOVED", "SUSPENDED"}

// stateCollector serves the pool and volume series from the State read
// last. One Read serves every scrape for cacheFor, so that scraping often
// costs no more zfs commands than scraping every cacheFor. A read runs on
// its own goroutine: a scrape waits for it at most wait, then shows the last
// State read, so that a listing slower than Prometheus' scrape timeout
// (thousands of volumes on a slow host) costs the scrape nothing but
// staleness.
//
// The series are written straight to the response, a line at a time, not
// through the registry: a registry Collector makes a metric object per
// series and holds them all until the page is encoded, which at 10,000
// volumes (60,000 series) took 39 MiB per scrape, most of the daemon's peak
// memory (BenchmarkScrape).
type stateCollector struct {
	read     func(context.Context) (State, error)
	cacheFor time.Duration
	wait     time.Duration
	timeout  time.Duration
	log      zerolog.Logger

	mu      sync.Mutex
	last    *reading      // the newest read that finished; nil before the first
	pending chan struct{} // closed when the read in flight finishes; nil when none is
}

func newStateCollector(cfg Config) *stateCollector {
	return &stateCollector{read: cfg.Read, cacheFor: cfg.CacheFor, wait: cfg.ScrapeWait, timeout: cfg.ReadTimeout, log: cfg.Log}
}

// reading is one finished read.
type reading struct {
	state State
	err   error
	at    time.Time
	took  time.Duration
}

// current returns the newest reading, after starting a read when it is older
// than cacheFor and waiting at most wait for that read. Concurrent scrapes
// share the read in flight. ok is false before any read has finished.
func (c *stateCollector) current() (r reading, ok bool) {
	c.mu.Lock()
	if c.last != nil && time.Since(c.last.at) < c.cacheFor {
		defer c.mu.Unlock()
		return *c.last, true
	}
	if c.pending == nil {
		c.pending = make(chan struct{})
		go c.refresh(c.pending)
	}
	pending := c.pending
	c.mu.Unlock()
	timer := time.NewTimer(c.wait)
	defer timer.Stop()
	select {
	case <-pending:
	case <-timer.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		return reading{}, false
	}
	return *c.last, true
}

// refresh reads the State, keeps it as the newest reading, and closes done.
func (c *stateCollector) refresh(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	start := time.Now()
	state, err := c.read(ctx)
	// Sorted once here, for every scrape this reading serves.
	state.Pools = slices.SortedFunc(slices.Values(state.Pools), func(a, b zfs.Pool) int { return strings.Compare(a.Name, b.Name) })
	state.Volumes = slices.SortedFunc(slices.Values(state.Volumes), func(a, b Volume) int { return strings.Compare(a.ID, b.ID) })
	state.Parents = slices.SortedFunc(slices.Values(state.Parents), func(a, b Parent) int { return strings.Compare(a.Name, b.Name) })
	r := &reading{state: state, err: err, at: time.Now()}
	r.took = r.at.Sub(start)
	if err != nil {
		c.log.Warn().Err(err).Dur("duration", r.took).Msg("metrics: reading pools and volumes failed")
	} else {
		c.log.Debug().Dur("duration", r.took).Int("volumes", len(state.Volumes)).Msg("metrics read")
	}
	c.mu.Lock()
	c.last, c.pending = r, nil
	c.mu.Unlock()
	close(done)
}

// write writes the series of the current reading in the text exposition
// format.
func (c *stateCollector) write(w io.Writer) error {
	r, ok := c.current()
	if !ok {
		return nil // the first read is still going: nothing to show yet
	}
	e := exposition{w: bufio.NewWriterSize(w, 64<<10)}
	e.family("zfs_read_duration_seconds", "How long the last read of pools and volumes took.")
	e.sample(r.took.Seconds())
	e.family("zfs_state_age_seconds", "How long ago the last read of pools and volumes finished: what the pool and volume metrics show is that old.")
	e.sample(time.Since(r.at).Seconds())
	e.family("zfs_up", "1 when the last read of pools and volumes succeeded; the pool and volume metrics are absent otherwise.")
	if r.err != nil {
		e.sample(0)
		return e.w.Flush()
	}
	e.sample(1)
	state := r.state
	e.family("reaper_backlog_volumes", "Volumes deleted by the CO but still held by their snapshots or clones.")
	e.sample(float64(state.ReaperBacklog))

	e.pools(state.Pools)
	e.parents(state.Parents)
	e.volumes(state.Volumes)
	return e.w.Flush()
}

// pools writes the pools' families, in the order the refresh sorted them.
func (e *exposition) pools(pools []zfs.Pool) {
	e.family("pool_health", "Pool health as a state set: 1 for the current state.")
	for _, pool := range pools {
		states := poolStates
		if !slices.Contains(states, pool.Health) {
			states = append(slices.Clone(states), pool.Health)
		}
		for _, health := range slices.Sorted(slices.Values(states)) {
			e.sample(boolValue(health == pool.Health), "pool", pool.Name, "state", health)
		}
	}
	for _, f := range []struct {
		name, help string
		value      func(zfs.Pool) float64
	}{
		{"pool_size_bytes", "Pool size.", func(p zfs.Pool) float64 { return float64(p.Size) }},
		{"pool_allocated_bytes", "Space allocated in the pool.", func(p zfs.Pool) float64 { return float64(p.Allocated) }},
		{"pool_free_bytes", "Space free in the pool.", func(p zfs.Pool) float64 { return float64(p.Free) }},
		{"pool_fragmentation_ratio", "Free-space fragmentation of the pool, 0 to 1.", func(p zfs.Pool) float64 { return float64(p.Fragmentation) / 100 }},
	} {
		e.family(f.name, f.help)
		for _, pool := range pools {
			e.sample(f.value(pool), "pool", pool.Name)
		}
	}
}

// parents writes the parent datasets' families, in the refresh's order.
func (e *exposition) parents(parents []Parent) {
	for _, f := range []struct {
		name, help string
		value      func(Parent) float64
	}{
		{"parent_available_bytes", "Space new volumes under the parent dataset can still take (zfs list -o available): thick volumes' reservations and the parent's quota are already out of it, unlike the pool's free space.",
			func(p Parent) float64 { return float64(p.Available) }},
		{"parent_used_bytes", "Space the parent dataset and everything under it use, reservations included (zfs list -o used).",
			func(p Parent) float64 { return float64(p.Used) }},
	} {
		e.family(f.name, f.help)
		for _, parent := range parents {
			e.sample(f.value(parent), "parent", parent.Name, "pool", parent.Pool)
		}
	}
}

// volumes writes the live volumes' families, in the refresh's order.
func (e *exposition) volumes(volumes []Volume) {
	e.family("volume_info", "Always 1 for each live volume; labelled with what names it.")
	for _, v := range volumes {
		e.sample(1, "csi_name", v.CSIName, "kind", v.Kind, "pvc_name", v.PVCName, "pvc_namespace", v.PVCNamespace, "volume_id", v.ID)
	}
	for _, f := range []struct {
		name, help string
		value      func(Volume) float64
	}{
		{"volume_capacity_bytes", "Volume size: refquota of a dataset, volsize of a zvol.", func(v Volume) float64 { return float64(v.Capacity) }},
		{"volume_logical_used_bytes", "Data written to the volume and its snapshots, before compression (logicalused).", func(v Volume) float64 { return float64(v.LogicalUsed) }},
		{"volume_referenced_bytes", "Space the volume's current data takes (referenced).", func(v Volume) float64 { return float64(v.Referenced) }},
		{"volume_used_by_snapshots_bytes", "Space only the volume's snapshots hold (usedbysnapshots).", func(v Volume) float64 { return float64(v.UsedBySnapshots) }},
		{"volume_compress_ratio", "Compression ratio of the volume's data (compressratio).", func(v Volume) float64 { return v.CompressRatio }},
	} {
		e.family(f.name, f.help)
		for _, v := range volumes {
			e.sample(f.value(v), "volume_id", v.ID)
		}
	}
}

// exposition writes gauge families in the Prometheus text format (0.0.4),
// reusing one line buffer.
type exposition struct {
	w    *bufio.Writer
	name string
	line []byte
}

// family starts a gauge family: its HELP and TYPE lines.
func (e *exposition) family(name, help string) {
	e.name = namespace + "_" + name
	e.line = append(e.line[:0], "# HELP "...)
	e.line = append(e.line, e.name...)
	e.line = append(e.line, ' ')
	e.line = appendEscaped(e.line, help, false)
	e.line = append(e.line, "\n# TYPE "...)
	e.line = append(e.line, e.name...)
	e.line = append(e.line, " gauge\n"...)
	e.w.Write(e.line)
}

// sample writes one sample of the current family; labels are name, value
// pairs in the order of their names.
func (e *exposition) sample(value float64, labels ...string) {
	e.line = append(e.line[:0], e.name...)
	for i := 0; i+1 < len(labels); i += 2 {
		if i == 0 {
			e.line = append(e.line, '{')
		} else {
			e.line = append(e.line, ',')
		}
		e.line = append(e.line, labels[i]...)
		e.line = append(e.line, '=', '"')
		e.line = appendEscaped(e.line, labels[i+1], true)
		e.line = append(e.line, '"')
	}
	if len(labels) > 0 {
		e.line = append(e.line, '}')
	}
	e.line = append(e.line, ' ')
	e.line = strconv.AppendFloat(e.line, value, 'g', -1, 64)
	e.line = append(e.line, '\n')
	e.w.Write(e.line)
}

// appendEscaped escapes as the text format asks: backslash and newline
// everywhere, the double quote in label values.
func appendEscaped(line []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			line = append(line, '\\', '\\')
		case c == '\n':
			line = append(line, '\\', 'n')
		case c == '"' && quote:
			line = append(line, '\\', '"')
		default:
			line = append(line, c)
		}
	}
	return line
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
