package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// scrape serves m's handler and reads /metrics like Prometheus does.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	server := httptest.NewServer(m.Handler())
	defer server.Close()
	response, err := http.Get(server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", response.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(response.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return families
}

// sample finds the metric of a family with exactly the given label values.
func sample(families map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	for _, metric := range families[name].GetMetric() {
		matched := 0
		for _, pair := range metric.GetLabel() {
			if value, ok := labels[pair.GetName()]; ok && value == pair.GetValue() {
				matched++
			}
		}
		if matched == len(labels) && len(metric.GetLabel()) == len(labels) {
			return metric
		}
	}
	return nil
}

func TestCallsAreCountedAndTimedByMethodAndCode(t *testing.T) {
	m := New(Config{WithoutProcessMetrics: true})
	intercept := m.UnaryInterceptor()
	call := func(method string, err error) {
		handler := func(context.Context, any) (any, error) { time.Sleep(time.Millisecond); return nil, err }
		intercept(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/" + method}, handler)
	}
	call("CreateVolume", nil)
	call("CreateVolume", nil)
	call("CreateVolume", status.Error(codes.ResourceExhausted, "full"))
	call("DeleteVolume", nil)
	families := scrape(t, m)

	tests := []struct {
		name   string
		labels map[string]string
		count  uint64
	}{
		{"two successful creations", map[string]string{"method": "CreateVolume", "code": "OK"}, 2},
		{"one creation refused for lack of space", map[string]string{"method": "CreateVolume", "code": "ResourceExhausted"}, 1},
		{"one deletion", map[string]string{"method": "DeleteVolume", "code": "OK"}, 1},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			metric := sample(families, "zfs_csi_rpc_duration_seconds", test.labels)
			if metric == nil {
				t.Fatalf("no zfs_csi_rpc_duration_seconds%v series", test.labels)
			}
			histogram := metric.GetHistogram()
			if histogram.GetSampleCount() != test.count || histogram.GetSampleSum() < float64(test.count)*0.001 {
				t.Errorf("count %d sum %g; want count %d, sum ≥ %d ms", histogram.GetSampleCount(), histogram.GetSampleSum(), test.count, test.count)
			}
		})
	}
}

// A call refused because it is another node's (the phrase Nomad retries on)
// is the driver working as designed: it is counted apart, and neither the
// calls nor their codes in rpc_duration_seconds show it.
func TestCallsRefusedForAnotherNodeAreCountedApart(t *testing.T) {
	m := New(Config{WithoutProcessMetrics: true})
	intercept := m.UnaryInterceptor()
	call := func(method string, err error) {
		handler := func(context.Context, any) (any, error) { return nil, err }
		intercept(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/" + method}, handler)
	}
	otherNode := func(code codes.Code) error {
		return status.Errorf(code, "volume \"b:tank/csi/v\": %s: it lives on node \"b\", this is node \"a\"", rpc.OtherNodeMarker)
	}
	call("CreateVolume", otherNode(codes.ResourceExhausted))
	call("CreateVolume", otherNode(codes.ResourceExhausted))
	call("DeleteVolume", otherNode(codes.FailedPrecondition))
	call("CreateVolume", status.Error(codes.ResourceExhausted, "out of space"))
	families := scrape(t, m)

	for _, test := range []struct {
		name   string
		family string
		labels map[string]string
		want   float64
	}{
		{"two creations for another node", "zfs_csi_rpc_other_node_refusals_total", map[string]string{"method": "CreateVolume", "code": "ResourceExhausted"}, 2},
		{"a deletion for another node", "zfs_csi_rpc_other_node_refusals_total", map[string]string{"method": "DeleteVolume", "code": "FailedPrecondition"}, 1},
		{"a pool out of space is a failed call", "zfs_csi_rpc_duration_seconds", map[string]string{"method": "CreateVolume", "code": "ResourceExhausted"}, 1},
	} {
		t.Run(test.name, func(t *testing.T) {
			metric := sample(families, test.family, test.labels)
			var got float64
			if metric.GetHistogram() != nil {
				got = float64(metric.GetHistogram().GetSampleCount())
			} else {
				got = metric.GetCounter().GetValue()
			}
			if got != test.want {
				t.Errorf("%s%v = %g, want %g", test.family, test.labels, got, test.want)
			}
		})
	}
	if metric := sample(families, "zfs_csi_rpc_duration_seconds", map[string]string{"method": "DeleteVolume", "code": "FailedPrecondition"}); metric != nil {
		t.Errorf("a refusal for another node is counted as a failed call: %v", metric)
	}
}

func TestZFSCommandsAreCountedBySubcommandAndResult(t *testing.T) {
	m := New(Config{WithoutProcessMetrics: true})
	busy := &zfs.CommandError{Argv: []string{"zfs", "destroy", "tank/csi/a"}, ExitCode: 1, Kind: zfs.ErrBusy}
	m.ObserveCommand("list", 150*time.Millisecond, nil)
	m.ObserveCommand("list", 250*time.Millisecond, nil)
	m.ObserveCommand("destroy", time.Second, busy)
	m.ObserveCommand("create", time.Second, fmt.Errorf("zfs create: %w", context.DeadlineExceeded))
	m.ObserveCommand("send", time.Second, errors.New("exec: zfs: not found"))
	families := scrape(t, m)

	tests := []struct {
		name       string
		subcommand string
		result     string
		count      uint64
		sum        float64
	}{
		{"successful reads are ok", "list", "ok", 2, 0.4},
		{"a typed zfs error is named", "destroy", "busy", 1, 1},
		{"a deadline is a timeout", "create", "timeout", 1, 1},
		{"anything zfs did not explain is an error", "send", "error", 1, 1},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			metric := sample(families, "zfs_csi_zfs_command_duration_seconds", map[string]string{"subcommand": test.subcommand, "result": test.result})
			if metric == nil {
				t.Fatalf("no series for %s/%s", test.subcommand, test.result)
			}
			if got := metric.GetHistogram(); got.GetSampleCount() != test.count || got.GetSampleSum() < test.sum-1e-9 || got.GetSampleSum() > test.sum+1e-9 {
				t.Errorf("count %d sum %g; want %d and %g", got.GetSampleCount(), got.GetSampleSum(), test.count, test.sum)
			}
		})
	}
}

var testState = State{
	Pools: []zfs.Pool{{Name: "tank", Health: "DEGRADED", Size: 8 << 30, Allocated: 2 << 30, Free: 6 << 30, Fragmentation: 12}},
	// A thick volume's reservation: the parent has less available than the
	// pool has free.
	Parents: []Parent{{Name: "tank/csi", Pool: "tank", Available: 5 << 30, Used: 1<<30 + 2<<20}},
	Volumes: []Volume{{ID: "node-a:tank/csi/pvc-a", CSIName: "pvc-a", Kind: "dataset", PVCNamespace: "shop", PVCName: "data",
		Capacity: 1 << 30, LogicalUsed: 3 << 20, Referenced: 2 << 20, UsedBySnapshots: 1 << 20, CompressRatio: 1.5}},
	ReaperBacklog: 2,
}

func TestPoolAndVolumeGaugesShowTheState(t *testing.T) {
	m := New(Config{WithoutProcessMetrics: true, DriverName: "zfs.csi.dev", Version: "v1.2.3",
		Read: func(context.Context) (State, error) { return testState, nil }})
	server := httptest.NewServer(m.Handler())
	defer server.Close()
	expected := `
# HELP zfs_csi_build_info Always 1; labelled with the driver name and version.
# TYPE zfs_csi_build_info gauge
zfs_csi_build_info{driver="zfs.csi.dev",version="v1.2.3"} 1
# HELP zfs_csi_parent_available_bytes Space new volumes under the parent dataset can still take (zfs list -o available): thick volumes' reservations and the parent's quota are already out of it, unlike the pool's free space.
# TYPE zfs_csi_parent_available_bytes gauge
zfs_csi_parent_available_bytes{parent="tank/csi",pool="tank"} 5.36870912e+09
# HELP zfs_csi_parent_used_bytes Space the parent dataset and everything under it use, reservations included (zfs list -o used).
# TYPE zfs_csi_parent_used_bytes gauge
zfs_csi_parent_used_bytes{parent="tank/csi",pool="tank"} 1.075838976e+09
# HELP zfs_csi_pool_fragmentation_ratio Free-space fragmentation of the pool, 0 to 1.
# TYPE zfs_csi_pool_fragmentation_ratio gauge
zfs_csi_pool_fragmentation_ratio{pool="tank"} 0.12
# HELP zfs_csi_pool_free_bytes Space free in the pool.
# TYPE zfs_csi_pool_free_bytes gauge
zfs_csi_pool_free_bytes{pool="tank"} 6.442450944e+09
# HELP zfs_csi_pool_health Pool health as a state set: 1 for the current state.
# TYPE zfs_csi_pool_health gauge
zfs_csi_pool_health{pool="tank",state="DEGRADED"} 1
zfs_csi_pool_health{pool="tank",state="FAULTED"} 0
zfs_csi_pool_health{pool="tank",state="OFFLINE"} 0
zfs_csi_pool_health{pool="tank",state="ONLINE"} 0
zfs_csi_pool_health{pool="tank",state="REMOVED"} 0
zfs_csi_pool_health{pool="tank",state="SUSPENDED"} 0
zfs_csi_pool_health{pool="tank",state="UNAVAIL"} 0
# HELP zfs_csi_reaper_backlog_volumes Volumes deleted by the CO but still held by their snapshots or clones.
# TYPE zfs_csi_reaper_backlog_volumes gauge
zfs_csi_reaper_backlog_volumes 2
# HELP zfs_csi_volume_compress_ratio Compression ratio of the volume's data (compressratio).
# TYPE zfs_csi_volume_compress_ratio gauge
zfs_csi_volume_compress_ratio{volume_id="node-a:tank/csi/pvc-a"} 1.5
# HELP zfs_csi_volume_info Always 1 for each live volume; labelled with what names it.
# TYPE zfs_csi_volume_info gauge
zfs_csi_volume_info{csi_name="pvc-a",kind="dataset",pvc_name="data",pvc_namespace="shop",volume_id="node-a:tank/csi/pvc-a"} 1
# HELP zfs_csi_volume_logical_used_bytes Data written to the volume and its snapshots, before compression (logicalused).
# TYPE zfs_csi_volume_logical_used_bytes gauge
zfs_csi_volume_logical_used_bytes{volume_id="node-a:tank/csi/pvc-a"} 3.145728e+06
# HELP zfs_csi_volume_used_by_snapshots_bytes Space only the volume's snapshots hold (usedbysnapshots).
# TYPE zfs_csi_volume_used_by_snapshots_bytes gauge
zfs_csi_volume_used_by_snapshots_bytes{volume_id="node-a:tank/csi/pvc-a"} 1.048576e+06
# HELP zfs_csi_zfs_up 1 when the last read of pools and volumes succeeded; the pool and volume metrics are absent otherwise.
# TYPE zfs_csi_zfs_up gauge
zfs_csi_zfs_up 1
`
	err := testutil.ScrapeAndCompare(server.URL+"/metrics", strings.NewReader(expected),
		"zfs_csi_build_info", "zfs_csi_parent_available_bytes", "zfs_csi_parent_used_bytes", "zfs_csi_pool_fragmentation_ratio", "zfs_csi_pool_free_bytes", "zfs_csi_pool_health",
		"zfs_csi_reaper_backlog_volumes", "zfs_csi_volume_compress_ratio", "zfs_csi_volume_info",
		"zfs_csi_volume_logical_used_bytes", "zfs_csi_volume_used_by_snapshots_bytes", "zfs_csi_zfs_up")
	if err != nil {
		t.Error(err)
	}
	// The whole page, the state's series with the registry's, as
	// Prometheus' linter reads it.
	response, err := http.Get(server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	if problems, err := promlint.New(response.Body).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// Label values are escaped as the text format asks, and a pool in a state
// zpool may add later is shown as it is.
func TestStateSeriesAreEscapedAndParse(t *testing.T) {
	odd := `a "quoted" \ name` + "\nwith a newline"
	state := State{Pools: []zfs.Pool{{Name: "tank", Health: "RESILVERING"}},
		Volumes: []Volume{{ID: "node-a:tank/csi/x", CSIName: "x", Kind: "zvol", PVCNamespace: "ns", PVCName: odd, CompressRatio: 1}}}
	m := New(Config{WithoutProcessMetrics: true, Read: func(context.Context) (State, error) { return state, nil }})
	families := scrape(t, m)
	info := sample(families, "zfs_csi_volume_info", map[string]string{"volume_id": "node-a:tank/csi/x", "csi_name": "x", "kind": "zvol",
		"pvc_namespace": "ns", "pvc_name": odd})
	if info == nil || info.GetGauge().GetValue() != 1 {
		t.Errorf("zfs_csi_volume_info with pvc_name %q: %v", odd, families["zfs_csi_volume_info"])
	}
	if health := sample(families, "zfs_csi_pool_health", map[string]string{"pool": "tank", "state": "RESILVERING"}); health.GetGauge().GetValue() != 1 {
		t.Errorf("an unknown pool state: %v", families["zfs_csi_pool_health"])
	}
	if n := len(families["zfs_csi_pool_health"].GetMetric()); n != len(poolStates)+1 {
		t.Errorf("%d pool_health series, want %d", n, len(poolStates)+1)
	}
}

// BenchmarkScrape is one scrape of 10,000 volumes (60,000 series): its time
// and what it allocates.
func BenchmarkScrape(b *testing.B) {
	var state State
	for i := range 10000 {
		id := fmt.Sprintf("pvc-%08d-aaaa-bbbb-cccc-dddddddddddd", i)
		state.Volumes = append(state.Volumes, Volume{ID: "node-a:tank/csi/" + id, CSIName: id, Kind: "dataset", Capacity: 1 << 30, CompressRatio: 1})
	}
	m := New(Config{WithoutProcessMetrics: true, CacheFor: time.Hour, Read: func(context.Context) (State, error) { return state, nil }})
	handler := m.Handler()
	request := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	request.Header.Set("Accept-Encoding", "gzip")
	handler.ServeHTTP(httptest.NewRecorder(), request) // the read
	b.ReportAllocs()
	for b.Loop() {
		handler.ServeHTTP(discard{}, request)
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func TestOneReadServesScrapesForTheCachePeriod(t *testing.T) {
	tests := []struct {
		name      string
		cacheFor  time.Duration
		wantReads int32
	}{
		{"three scrapes within the cache period read once", time.Hour, 1},
		{"three scrapes after the period each read", time.Nanosecond, 3},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			var reads atomic.Int32
			m := New(Config{WithoutProcessMetrics: true, CacheFor: test.cacheFor,
				Read: func(context.Context) (State, error) { reads.Add(1); return testState, nil }})
			for range 3 {
				scrape(t, m)
				time.Sleep(time.Millisecond)
			}
			if got := reads.Load(); got != test.wantReads {
				t.Errorf("%d reads, want %d", got, test.wantReads)
			}
		})
	}
}

func TestAFailedReadLeavesOnlyZFSUpAtZero(t *testing.T) {
	m := New(Config{WithoutProcessMetrics: true,
		Read: func(context.Context) (State, error) { return State{}, zfs.ErrPoolSuspended }})
	families := scrape(t, m)
	if up := sample(families, "zfs_csi_zfs_up", map[string]string{}); up == nil || up.GetGauge().GetValue() != 0 {
		t.Errorf("zfs_csi_zfs_up = %v, want 0", up)
	}
	for _, name := range []string{"zfs_csi_pool_size_bytes", "zfs_csi_volume_info", "zfs_csi_reaper_backlog_volumes"} {
		if _, ok := families[name]; ok {
			t.Errorf("%s is exposed after a failed read", name)
		}
	}
}

func TestListenAddressBindsLoopbackUnlessAHostIsNamed(t *testing.T) {
	tests := []struct {
		name, address, want string
	}{
		{"a bare port binds loopback", "9820", "127.0.0.1:9820"},
		{"a port without a host binds loopback", ":9820", "127.0.0.1:9820"},
		{"a named host is kept", "0.0.0.0:9820", "0.0.0.0:9820"},
		{"an IPv6 host is kept", "[::1]:9820", "[::1]:9820"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got, err := ListenAddress(test.address); err != nil || got != test.want {
				t.Errorf("ListenAddress(%q) = %q, %v; want %q", test.address, got, err, test.want)
			}
		})
	}
	if _, err := ListenAddress("localhost:"); err == nil {
		t.Error("an address without a port was accepted")
	}
}

// TestAScrapeNeverWaitsLongerThanScrapeWaitForZFS: a read slower than the
// scrape wait (thousands of volumes on a slow host) costs the scrape
// staleness, not time: it shows the last state read, with its age, and
// nothing before the first read finished. Scrapes during a read share it.
func TestAScrapeNeverWaitsLongerThanScrapeWaitForZFS(t *testing.T) {
	var reads atomic.Int32
	release := make(chan struct{})
	const wait = 50 * time.Millisecond
	m := New(Config{WithoutProcessMetrics: true, CacheFor: 200 * time.Millisecond, ScrapeWait: wait,
		Read: func(ctx context.Context) (State, error) {
			reads.Add(1)
			select {
			case <-release:
				return testState, nil
			case <-ctx.Done():
				return State{}, ctx.Err()
			}
		}})
	// The read never returns before release: a scrape that came back at all
	// did not wait for it. The minute is only there so that a scrape that
	// does wait fails the test instead of hanging it.
	scrapeDuringRead := func() map[string]*dto.MetricFamily {
		done := make(chan map[string]*dto.MetricFamily, 1)
		go func() { done <- scrape(t, m) }()
		select {
		case families := <-done:
			return families
		case <-time.After(time.Minute):
			t.Fatalf("a scrape during a slow read has not returned after a minute: it waits for ZFS")
			return nil
		}
	}

	// The first read is slow: two scrapes return after the wait, without the
	// state, having started one read between them.
	for range 2 {
		families := scrapeDuringRead()
		for _, name := range []string{"zfs_csi_zfs_up", "zfs_csi_volume_info", "zfs_csi_zfs_state_age_seconds"} {
			if _, ok := families[name]; ok {
				t.Errorf("%s is exposed before the first read finished", name)
			}
		}
	}
	if got := reads.Load(); got != 1 {
		t.Fatalf("%d reads started by two scrapes during one read, want 1", got)
	}
	release <- struct{}{}
	eventually(t, func() bool { _, ok := scrape(t, m)["zfs_csi_volume_info"]; return ok })

	// Past the cache period the next read is slow again: the scrape shows the
	// state read before, and says how old it is.
	time.Sleep(300 * time.Millisecond)
	families := scrapeDuringRead()
	if info := families["zfs_csi_volume_info"]; len(info.GetMetric()) != len(testState.Volumes) {
		t.Errorf("during a slow read the scrape shows %d volumes, want the last read's %d", len(info.GetMetric()), len(testState.Volumes))
	}
	if age := sample(families, "zfs_csi_zfs_state_age_seconds", map[string]string{}); age.GetGauge().GetValue() < 0.3 {
		t.Errorf("zfs_csi_zfs_state_age_seconds = %v, want at least 0.3 (the sleep)", age.GetGauge().GetValue())
	}
	if got := reads.Load(); got != 2 {
		t.Errorf("%d reads, want 2", got)
	}
	close(release)
	eventually(t, func() bool {
		age := sample(scrape(t, m), "zfs_csi_zfs_state_age_seconds", map[string]string{})
		return age.GetGauge().GetValue() < 0.2
	})
}

// eventually polls ok for up to 5 s.
func eventually(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}
