package kubernetes

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// helm is the helm binary the Makefile builds (make helm; make test builds it
// first), or $HELM.
func helm(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("HELM"); path != "" {
		return path
	}
	found, _ := filepath.Glob("../../out/tools/helm-*")
	if len(found) == 0 {
		t.Fatal("no helm: run make helm (make test does), or set HELM")
	}
	return found[len(found)-1]
}

const chart = "../helm/zfs-csi"

// render runs helm template with the given extra arguments and decodes the
// objects it prints.
func render(t *testing.T, args ...string) []object {
	t.Helper()
	touchInputs(t)
	cmd := exec.Command(helm(t), append([]string{"template", "zfs-csi", chart}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	decoder := yaml.NewDecoder(bytes.NewReader(out))
	var objects []object
	for {
		var doc map[string]any
		err := decoder.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template %v printed YAML that does not decode: %v", args, err)
		}
		if doc != nil {
			objects = append(objects, object{file: "helm template", doc: doc})
		}
	}
	return objects
}

// touchInputs reads what helm will read, so that go test's cache knows the
// result depends on it (it sees only the files the test process opens).
func touchInputs(t *testing.T) {
	t.Helper()
	for _, root := range []string{chart, "testdata"} {
		err := filepath.WalkDir(root, func(path string, entry os.DirEntry, err error) error {
			if err == nil && !entry.IsDir() {
				_, err = os.ReadFile(path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func byKindAndName(objects []object) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objects {
		out[o.kind()+"/"+o.name()] = o.doc
	}
	return out
}

// The chart and the plain manifests cannot drift: with its default values
// the chart renders the same objects, field for field.
func TestChartRendersThePlainManifests(t *testing.T) {
	plain, charted := byKindAndName(load(t)), byKindAndName(render(t))
	for key, doc := range plain {
		if !reflect.DeepEqual(doc, charted[key]) {
			t.Errorf("%s differs:\n plain %v\n chart %v", key, doc, charted[key])
		}
	}
	for key := range charted {
		if _, ok := plain[key]; !ok {
			t.Errorf("the chart renders %s, which the plain manifests lack", key)
		}
	}
}

func TestChartLintsWithItsValuesAndOthers(t *testing.T) {
	touchInputs(t)
	for _, args := range [][]string{nil, {"--values", "testdata/helm-values.yaml"}} {
		out, err := exec.Command(helm(t), append([]string{"lint", "--strict", chart}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("helm lint %v: %v\n%s", args, err, out)
		}
	}
}

// The chart carries the shipped alert rules and dashboard as copies: they
// must stay identical to packaging/monitoring's.
func TestChartMonitoringFilesAreThePackagedOnes(t *testing.T) {
	for _, name := range []string{"alerts.yaml", "dashboard.json"} {
		packaged, err := os.ReadFile("../monitoring/" + name)
		if err != nil {
			t.Fatal(err)
		}
		charted, err := os.ReadFile(chart + "/files/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(packaged, charted) {
			t.Errorf("%s/files/%s differs from packaging/monitoring/%s: copy it again", chart, name, name)
		}
	}
}

// A non-default set of values: what each changes.
func TestChartValues(t *testing.T) {
	objects := byKindAndName(render(t, "--values", "testdata/helm-values.yaml"))
	if _, ok := objects["Namespace/storage"]; ok {
		t.Error("createNamespace: false still renders the Namespace")
	}
	daemonSet := objects["DaemonSet/zfs-csi-sidecars"]
	if got := str(daemonSet, "metadata", "namespace"); got != "storage" {
		t.Errorf("the DaemonSet is in %q", got)
	}
	pod := get(daemonSet, "spec", "template", "spec")
	if str(pod, "priorityClassName") != "system-node-critical" || str(pod, "nodeSelector", "zfs.csi.dev/host") != "true" {
		t.Errorf("pod spec %v", pod)
	}
	var names []string
	for _, c := range list(pod, "containers") {
		names = append(names, str(c, "name"))
		if str(c, "securityContext", "seLinuxOptions", "type") != "spc_t" {
			t.Errorf("%s has no SELinux type spc_t", str(c, "name"))
		}
		if str(c, "resources", "limits", "memory") != "128Mi" {
			t.Errorf("%s resources %v", str(c, "name"), get(c, "resources"))
		}
	}
	if !reflect.DeepEqual(names, []string{"csi-provisioner", "csi-resizer"}) {
		t.Errorf("containers %v, want the provisioner and the resizer (snapshotter disabled)", names)
	}
	if got := str(pod, "volumes", 0, "hostPath", "path"); got != "/data/kubelet/plugins/"+driverName {
		t.Errorf("socket directory %q", got)
	}
	for _, o := range []string{"VolumeSnapshotClass/zfs-snapshot", "ValidatingAdmissionPolicy/" + contentPolicy, "ValidatingAdmissionPolicyBinding/" + contentPolicy} {
		if _, ok := objects[o]; ok {
			t.Errorf("snapshotter disabled still renders %s", o)
		}
	}
	if sc := objects["StorageClass/fast"]; str(sc, "parameters", "zfs.recordsize") != "16K" || len(objects) == 0 {
		t.Errorf("StorageClass fast %v", sc)
	}
	if _, ok := objects["StorageClass/zfs-ext4"]; ok {
		t.Error("a StorageClass left out of the values is rendered")
	}
	if scrape := objects["ScrapeConfig/zfs-csi"]; str(scrape, "spec", "jobName") != "zfs-csi" {
		t.Errorf("metrics enabled: ScrapeConfig %v", scrape)
	}
	if rule := objects["PrometheusRule/zfs-csi"]; len(list(rule, "spec", "groups", 0, "rules")) != 11 {
		t.Errorf("alertRules: PrometheusRule %v", rule)
	}
	if dashboard := objects["ConfigMap/zfs-csi-dashboard"]; !strings.Contains(str(dashboard, "data", "zfs-csi.json"), `"uid": "zfs-csi"`) {
		t.Errorf("grafanaDashboard: ConfigMap %v", dashboard)
	}
	for _, rb := range []string{"ClusterRoleBinding/zfs-csi-provisioner", "RoleBinding/zfs-csi-sidecars"} {
		if got := str(objects[rb], "subjects", 0, "namespace"); got != "storage" {
			t.Errorf("%s binds the ServiceAccount of namespace %q", rb, got)
		}
	}
}
