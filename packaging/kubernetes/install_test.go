package kubernetes

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// withMonitoringAPI is a cluster with prometheus-operator's CRDs: helm
// install learns the kinds from the cluster, helm template is told them.
var withMonitoringAPI = []string{"--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
	"--api-versions", "monitoring.coreos.com/v1alpha1/ScrapeConfig"}

// The chart says which Kubernetes it needs, the oldest the sidecars'
// images serve and the harness runs (1.34), so helm install on an older
// cluster stops before it creates anything, with a reason; a provider's
// build of a newer one (a pre-release suffix) is let in.
func TestChartRefusesKubernetesOlderThanItsSidecars(t *testing.T) {
	touchInputs(t)
	for _, test := range []struct {
		version string
		ok      bool
	}{
		{"1.33.7", false},
		{"1.34.0", true},
		{"v1.34.2-eks-1", true},
		{"1.36.0", true},
		{"", true}, // helm's own default, its client-go's (1.34 for v3.19)
	} {
		args := []string{"template", "zfs-csi", chart}
		if test.version != "" {
			args = append(args, "--kube-version", test.version)
		}
		out, err := exec.Command(helm(t), args...).CombinedOutput()
		if test.ok && err != nil {
			t.Errorf("helm template --kube-version %q: %v\n%s", test.version, err, out)
		}
		if !test.ok && (err == nil || !strings.Contains(string(out), "kubeVersion: >=1.34.0-0")) {
			t.Errorf("helm template --kube-version %q: %v, want the chart's kubeVersion refusal\n%.300s", test.version, err, out)
		}
	}
}

// metrics.enabled and alertRules on a cluster without prometheus-operator
// render no ScrapeConfig or PrometheusRule, whose kinds such a cluster does
// not know (helm install would fail whole on them); the dashboard's
// ConfigMap needs no CRD. Where the kinds are served, each comes.
func TestChartRendersMonitoringOnlyWhereItsAPIIsServed(t *testing.T) {
	values := []string{"--set", "metrics.enabled=true", "--set", "metrics.alertRules=true", "--set", "metrics.grafanaDashboard=true"}
	for _, test := range []struct {
		name string
		args []string
		want []string
	}{
		{"without the CRDs", nil, []string{"ConfigMap/zfs-csi-dashboard"}},
		{"with PrometheusRule only", []string{"--api-versions", "monitoring.coreos.com/v1/PrometheusRule"},
			[]string{"ConfigMap/zfs-csi-dashboard", "PrometheusRule/zfs-csi"}},
		{"with the CRDs", withMonitoringAPI, []string{"ConfigMap/zfs-csi-dashboard", "PrometheusRule/zfs-csi", "ScrapeConfig/zfs-csi"}},
		{"with the CRDs, metrics off", append(withMonitoringAPI, "--set", "metrics.enabled=false", "--set", "metrics.alertRules=false"),
			[]string{"ConfigMap/zfs-csi-dashboard"}},
	} {
		t.Run(test.name, func(t *testing.T) {
			var got []string
			for _, o := range render(t, append(append([]string{}, values...), test.args...)...) {
				if key := o.kind() + "/" + o.name(); key == "ConfigMap/zfs-csi-dashboard" || strings.HasPrefix(str(o.doc, "apiVersion"), "monitoring.coreos.com/") {
					got = append(got, key)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, test.want) {
				t.Errorf("renders %v, want %v", got, test.want)
			}
		})
	}
}

// The node pods are placed by the label kubelet sets when the daemon
// registers, in the chart's defaults as in the plain manifests (which
// TestChartRendersThePlainManifests holds equal): no hand-made node label,
// and every node affinity term requires it (terms are alternatives).
// packaging/checks places them on a cluster of tainted and untainted nodes
// with the scheduler's own matching.
func TestNodePodsRequireTheLabelKubeletSetsOnRegistration(t *testing.T) {
	for _, source := range []struct {
		name    string
		objects []object
	}{
		{"the plain manifests", load(t)},
		{"the chart", render(t, "--values", "testdata/snapshot-metadata-values.yaml")},
	} {
		daemonSets := only(t, source.objects, "DaemonSet")
		if len(daemonSets) != 2 {
			t.Errorf("%s: %d DaemonSets, want the sidecars' and the snapshot metadata sidecar's", source.name, len(daemonSets))
		}
		for _, ds := range daemonSets {
			pod := get(ds.doc, "spec", "template", "spec")
			terms := list(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
			if len(terms) == 0 {
				t.Errorf("%s: %s has no required node affinity", source.name, ds.name())
			}
			for i, term := range terms {
				required := false
				for _, expression := range list(term, "matchExpressions") {
					required = required || str(expression, "key") == "zfs.csi.dev/node" && str(expression, "operator") == "Exists"
				}
				if !required {
					t.Errorf("%s: %s's node selector term %d does not require the label zfs.csi.dev/node: %v", source.name, ds.name(), i, term)
				}
			}
			for key := range asMap(get(pod, "nodeSelector")) {
				if key != "kubernetes.io/os" {
					t.Errorf("%s: %s selects nodes by %s, a label someone must set by hand", source.name, ds.name(), key)
				}
			}
		}
	}
}

func asMap(node any) map[string]any {
	m, _ := node.(map[string]any)
	return m
}
