// Package checks holds the checks of what zfs-csi ships that need heavy
// dependencies, kept out of the driver's module: the Grafana dashboard and
// the Prometheus alert rules (packaging/monitoring: every PromQL expression
// parses, every metric it names is one the driver exports, every alert fires
// where it must and only there, every runbook link leads to a heading), and the
// Kubernetes objects of the plain manifests and the Helm chart, decoded
// strictly by the Kubernetes API types.
package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/metrics"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// exported scrapes the real metrics handler, with one observation of each
// histogram and a state with a pool, a volume and a backlog, and returns
// the names of the series it exposes (histograms with _bucket, _count and
// _sum).
func exported(t *testing.T) map[string]bool {
	m := metrics.New(metrics.Config{DriverName: "zfs.csi.dev", Version: "test",
		Read: func(context.Context) (metrics.State, error) {
			return metrics.State{Pools: []zfs.Pool{{Name: "tank", Health: "ONLINE", Size: 100, Free: 50, Allocated: 50}},
				Parents:       []metrics.Parent{{Name: "tank/csi", Pool: "tank", Available: 40, Used: 10}},
				Volumes:       []metrics.Volume{{ID: "n:tank/csi/v", CSIName: "v", Kind: "dataset", Capacity: 10}},
				ReaperBacklog: 1}, nil
		}})
	m.ObserveCommand("list", time.Millisecond, nil)
	interceptor := m.UnaryInterceptor()
	_, _ = interceptor(context.Background(), nil, &grpcInfo, func(context.Context, any) (any, error) { return nil, nil })
	_, _ = interceptor(context.Background(), nil, &grpcInfo, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.ResourceExhausted, rpc.OtherNodeMarker+": the source lives on another node")
	})
	server := httptest.NewServer(m.Handler())
	defer server.Close()
	response, err := server.Client().Get(server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	textParser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := textParser.TextToMetricFamilies(response.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"up": true} // Prometheus's own, for the daemon-down rule
	for name, family := range families {
		names[name] = true
		if family.GetType().String() == "HISTOGRAM" {
			names[name+"_bucket"], names[name+"_count"], names[name+"_sum"] = true, true, true
		}
	}
	return names
}

// panel is one panel of the shipped dashboard, as far as the checks read it.
type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// dashboardPanels reads the panels of packaging/monitoring's dashboard.
func dashboardPanels(t *testing.T) []panel {
	t.Helper()
	var dashboard struct {
		Panels []panel `json:"panels"`
	}
	data, err := os.ReadFile("../monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dashboard); err != nil {
		t.Fatal(err)
	}
	return dashboard.Panels
}

// expressions gathers every PromQL expression the alert rules and the
// dashboard hold, by where they are.
func expressions(t *testing.T) map[string]string {
	found := map[string]string{}
	for _, rule := range shippedRules(t) {
		found[fmt.Sprint("alert ", rule["alert"])] = fmt.Sprint(rule["expr"])
	}
	for _, panel := range dashboardPanels(t) {
		for i, target := range panel.Targets {
			found["panel "+panel.Title+" #"+string(rune('A'+i))] = target.Expr
		}
	}
	return found
}

var grafanaVariable = regexp.MustCompile(`\$\{?[a-z_]+\}?`)

func TestEveryExpressionParsesAndNamesExportedMetrics(t *testing.T) {
	names := exported(t)
	found := expressions(t)
	if len(found) < 15 {
		t.Fatalf("found only %d expressions", len(found))
	}
	wanted := map[string]bool{"ZFSCSIDaemonDown": false, "ZFSCSIDaemonAbsent": false, "ZFSCSIPoolDegraded": false,
		"ZFSCSIPoolFaulted": false, "ZFSCSIParentNearlyFull": false, "ZFSCSIParentFillingUp": false,
		"ZFSCSIReaperBacklogGrowing": false, "ZFSCSICommandErrors": false, "ZFSCSIRPCErrorRatio": false,
		"ZFSCSIStateStale": false, "ZFSCSIStateReadFailing": false}
	for where, expr := range found {
		if name, ok := strings.CutPrefix(where, "alert "); ok {
			wanted[name] = true
		}
		// Grafana's variables stand inside label matchers' strings.
		parsed, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariable.ReplaceAllString(expr, "x"))
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, expr, err)
			continue
		}
		parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
			if selector, ok := node.(*parser.VectorSelector); ok && !names[selector.Name] {
				t.Errorf("%s: names %s, which the driver does not export", where, selector.Name)
			}
			return nil
		})
	}
	for name, present := range wanted {
		if !present {
			t.Errorf("the alert %s is missing", name)
		}
	}
}

// The dashboard shows each volume in a table with its PVC, fill and
// compression, each parent's space left, and how old the pool and volume
// series are.
func TestDashboardHasTheVolumeTableAndTheStateAge(t *testing.T) {
	found := map[string]bool{}
	for _, panel := range dashboardPanels(t) {
		var exprs []string
		for _, target := range panel.Targets {
			exprs = append(exprs, target.Expr)
		}
		all := strings.Join(exprs, "\n")
		if panel.Type == "table" && strings.Contains(all, "pvc_name") && strings.Contains(all, "zfs_csi_volume_compress_ratio") &&
			strings.Contains(all, "zfs_csi_volume_referenced_bytes{instance=~\"$instance\"} / zfs_csi_volume_capacity_bytes") {
			found["volume table"] = true
		}
		if strings.Contains(all, "zfs_csi_zfs_state_age_seconds") {
			found["state age"] = true
		}
		if strings.Contains(all, "zfs_csi_parent_available_bytes") {
			found["parent space"] = true
		}
	}
	for _, want := range []string{"volume table", "state age", "parent space"} {
		if !found[want] {
			t.Errorf("the dashboard has no %s panel", want)
		}
	}
}
