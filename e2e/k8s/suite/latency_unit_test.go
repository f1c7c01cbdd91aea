package suite

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The table's arithmetic, without a cluster: nearest-rank percentiles and the
// driver's share of the waits.
func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 20; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Second)
	}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{50, 10 * time.Second}, {95, 19 * time.Second}, {100, 20 * time.Second}, {1, time.Second}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("p%d of 1..20 s = %s, want %s", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %s", got)
	}
	if ds[0] != 20*time.Second {
		t.Error("percentile sorted its argument in place")
	}
}

func TestRow(t *testing.T) {
	got := row("x", []sample{
		{wait: 10 * time.Second, driver: map[string]time.Duration{"CreateVolume": time.Second, "NodeStageVolume": 500 * time.Millisecond}},
		{wait: 30 * time.Second, driver: map[string]time.Duration{"CreateVolume": 3 * time.Second}},
	})
	// (1 + 0.5 + 3) s of 40 s.
	for _, want := range []string{"  2 ", "11.2%", "CreateVolume 1s", "NodeStageVolume 500ms", "   10s ", "   30s "} {
		if !strings.Contains(got, want) {
			t.Errorf("row %q lacks %q", got, want)
		}
	}
}

func TestDriverCallLine(t *testing.T) {
	// A line as rpc/server.go logs it (zerolog: duration in ms).
	var c call
	line := `{"level":"info","method":"CreateVolume","name":"pvc-1","duration":12.5,"code":"OK","time":"x"}`
	if err := jsonUnmarshal(line, &c); err != nil || c.Method != "CreateVolume" || c.Name != "pvc-1" || c.took() != 12500*time.Microsecond {
		t.Errorf("parsed %+v (%v)", c, err)
	}
}

// NothingLeft's reading of a zfs list: the parent and the empty container
// of pulls are no leftovers; anything else below the parent, the container's
// content included, is; other datasets of the pool are not the driver's.
func TestLeftUnder(t *testing.T) {
	list := "tank\ntank/csi\ntank/csi/_incoming\ntank/other\ntank/csi-not\n"
	if left := leftUnder("tank/csi", list); len(left) != 0 {
		t.Errorf("left under tank/csi of %q: %v, want none", list, left)
	}
	list += "tank/csi/_incoming/pvc-1\ntank/csi/pvc-2@snap\n"
	if left := leftUnder("tank/csi", list); strings.Join(left, " ") != "tank/csi/_incoming/pvc-1 tank/csi/pvc-2@snap" {
		t.Errorf("left under tank/csi: %v", left)
	}
}

func TestOnlyTheBenchmarksWaitForMakeBenchK8s(t *testing.T) {
	var benches []string
	for _, s := range scenarios {
		if s.bench {
			benches = append(benches, s.name)
		}
		for _, asked := range []string{"", "0", "1"} {
			why := s.skipReason(asked)
			if want := s.bench && asked != "1"; (why != "") != want {
				t.Errorf("%s with %s=%q: skip reason %q, want one: %v", s.name, benchEnv, asked, why, want)
			}
		}
	}
	if want := []string{"Latency"}; !slices.Equal(benches, want) {
		t.Errorf("benchmark scenarios %q, want %q", benches, want)
	}
}
