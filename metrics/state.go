package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// poolStates are the health values zpool reports; zfs_csi_pool_health has
// one series per state, 1 for the current one (a Prometheus state set).
var poolStates = []string{"ONLINE", "DEGRADED", "FAULTED", "OFFLINE", "UNAVAIL", "REMOVED", "SUSPENDED"}

// stateCollector turns a State into gauges at scrape time. One Read serves
// every scrape for cacheFor, so that scraping often costs no more zfs
// commands than scraping every cacheFor.
type stateCollector struct {
	read     func(context.Context) (State, error)
	cacheFor time.Duration
	timeout  time.Duration
	log      func(error)

	mu     sync.Mutex
	state  State
	err    error
	readAt time.Time
	took   time.Duration

	up, readDuration, backlog                               *prometheus.Desc
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
		read: cfg.Read, cacheFor: cfg.CacheFor, timeout: cfg.ReadTimeout,
		log: func(err error) { cfg.Log.Warn().Err(err).Msg("metrics: reading pools and volumes failed") },

		up:           desc("zfs_up", "1 when the last read of pools and volumes succeeded; the pool and volume metrics are absent otherwise."),
		readDuration: desc("zfs_read_duration_seconds", "How long the last read of pools and volumes took."),
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
	for _, d := range []*prometheus.Desc{c.up, c.readDuration, c.backlog, c.poolHealth, c.poolSize, c.poolAllocated,
		c.poolFree, c.poolFrag, c.volumeInfo, c.capacity, c.logicalUsed, c.referenced, c.usedBySnapshots, c.compressRatio} {
		ch <- d
	}
}

// current returns the cached State, reading a new one when it is older than
// cacheFor. Concurrent scrapes wait for one read instead of starting several.
func (c *stateCollector) current() (State, time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readAt.IsZero() && time.Since(c.readAt) < c.cacheFor {
		return c.state, c.took, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	start := time.Now()
	c.state, c.err = c.read(ctx)
	c.readAt = time.Now()
	c.took = c.readAt.Sub(start)
	if c.err != nil {
		c.log(c.err)
	}
	return c.state, c.took, c.err
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	state, took, err := c.current()
	gauge := func(desc *prometheus.Desc, value float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, value, labels...)
	}
	gauge(c.readDuration, took.Seconds())
	if err != nil {
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
