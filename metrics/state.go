package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// poolStates are the health values zpool reports; zfs_csi_pool_health has
// one series per state, 1 for the current one (a Prometheus state set).
var poolStates = []string{"ONLINE", "DEGRADED", "FAULTED", "OFFLINE", "UNAVAIL", "REMOVED", "SUSPENDED"}

// stateCollector turns a State into gauges at scrape time. One Read serves
// every scrape for cacheFor, so that scraping often costs no more zfs
// commands than scraping every cacheFor. A read runs on its own goroutine:
// a scrape waits for it at most wait, then shows the last State read, so
// that a listing slower than Prometheus' scrape timeout (thousands of
// volumes on a slow host) costs the scrape nothing but staleness.
type stateCollector struct {
	read     func(context.Context) (State, error)
	cacheFor time.Duration
	wait     time.Duration
	timeout  time.Duration
	log      zerolog.Logger

	mu      sync.Mutex
	last    *reading      // the newest read that finished; nil before the first
	pending chan struct{} // closed when the read in flight finishes; nil when none is

	up, readDuration, age, backlog                          *prometheus.Desc
	poolHealth, poolSize, poolAllocated, poolFree, poolFrag *prometheus.Desc
	volumeInfo, capacity, logicalUsed, referenced           *prometheus.Desc
	usedBySnapshots, compressRatio                          *prometheus.Desc
}

func newStateCollector(cfg Config) *stateCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	volume := func(name, help string) *prometheus.Desc { return desc(name, help, "volume_id") }
	pool := func(name, help string) *prometheus.Desc { return desc(name, help, "pool") }
	return &stateCollector{
		read: cfg.Read, cacheFor: cfg.CacheFor, wait: cfg.ScrapeWait, timeout: cfg.ReadTimeout, log: cfg.Log,

		up:           desc("zfs_up", "1 when the last read of pools and volumes succeeded; the pool and volume metrics are absent otherwise."),
		readDuration: desc("zfs_read_duration_seconds", "How long the last read of pools and volumes took."),
		age:          desc("zfs_state_age_seconds", "How long ago the last read of pools and volumes finished: what the pool and volume metrics show is that old."),
		backlog:      desc("reaper_backlog_volumes", "Volumes deleted by the CO but still held by their snapshots or clones."),

		poolHealth:    desc("pool_health", "Pool health as a state set: 1 for the current state.", "pool", "state"),
		poolSize:      pool("pool_size_bytes", "Pool size."),
		poolAllocated: pool("pool_allocated_bytes", "Space allocated in the pool."),
		poolFree:      pool("pool_free_bytes", "Space free in the pool."),
		poolFrag:      pool("pool_fragmentation_ratio", "Free-space fragmentation of the pool, 0 to 1."),

		volumeInfo: desc("volume_info", "Always 1 for each live volume; labelled with what names it.",
			"volume_id", "csi_name", "kind", "pvc_namespace", "pvc_name"),
		capacity:        volume("volume_capacity_bytes", "Volume size: refquota of a dataset, volsize of a zvol."),
		logicalUsed:     volume("volume_logical_used_bytes", "Data written to the volume and its snapshots, before compression (logicalused)."),
		referenced:      volume("volume_referenced_bytes", "Space the volume's current data takes (referenced)."),
		usedBySnapshots: volume("volume_used_by_snapshots_bytes", "Space only the volume's snapshots hold (usedbysnapshots)."),
		compressRatio:   volume("volume_compress_ratio", "Compression ratio of the volume's data (compressratio)."),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.readDuration, c.age, c.backlog, c.poolHealth, c.poolSize, c.poolAllocated,
		c.poolFree, c.poolFrag, c.volumeInfo, c.capacity, c.logicalUsed, c.referenced, c.usedBySnapshots, c.compressRatio} {
		ch <- d
	}
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

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	r, ok := c.current()
	if !ok {
		return // the first read is still going: nothing to show yet
	}
	state := r.state
	gauge := func(desc *prometheus.Desc, value float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, value, labels...)
	}
	gauge(c.readDuration, r.took.Seconds())
	gauge(c.age, time.Since(r.at).Seconds())
	if r.err != nil {
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	gauge(c.backlog, float64(state.ReaperBacklog))
	for _, pool := range state.Pools {
		known := false
		for _, health := range poolStates {
			known = known || health == pool.Health
			gauge(c.poolHealth, boolValue(health == pool.Health), pool.Name, health)
		}
		if !known {
			gauge(c.poolHealth, 1, pool.Name, pool.Health)
		}
		gauge(c.poolSize, float64(pool.Size), pool.Name)
		gauge(c.poolAllocated, float64(pool.Allocated), pool.Name)
		gauge(c.poolFree, float64(pool.Free), pool.Name)
		gauge(c.poolFrag, float64(pool.Fragmentation)/100, pool.Name)
	}
	for _, volume := range state.Volumes {
		gauge(c.volumeInfo, 1, volume.ID, volume.CSIName, volume.Kind, volume.PVCNamespace, volume.PVCName)
		gauge(c.capacity, float64(volume.Capacity), volume.ID)
		gauge(c.logicalUsed, float64(volume.LogicalUsed), volume.ID)
		gauge(c.referenced, float64(volume.Referenced), volume.ID)
		gauge(c.usedBySnapshots, float64(volume.UsedBySnapshots), volume.ID)
		gauge(c.compressRatio, volume.CompressRatio, volume.ID)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
