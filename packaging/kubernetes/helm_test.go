package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// helm is $HELM (make test sets it to out/tools/helmtool: helm's Go packages
// behind the commands these tests run, packaging/checks/helmtool), else the
// helmtool or the helm binary make has left in out/tools.
func helm(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("HELM"); path != "" {
		return path
	}
	found, _ := filepath.Glob("../../out/tools/helm*")
	if len(found) == 0 {
		t.Fatal("no helm: run make test (it builds out/tools/helmtool), or set HELM")
	}
	absolute, err := filepath.Abs(found[len(found)-1])
	if err != nil {
		t.Fatal(err)
	}
	return absolute
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

// releaseLabels are what Helm adds to the labels of the plain manifests:
// which chart and release made an object. A kubectl apply cannot say that.
var releaseLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

// withoutReleaseLabels checks that an object of the chart carries Helm's
// labels, on itself and on its pod template, and returns it without them.
func withoutReleaseLabels(t *testing.T, o object) object {
	t.Helper()
	for _, path := range [][]any{{"metadata", "labels"}, {"spec", "template", "metadata", "labels"}} {
		labels, ok := get(o.doc, path...).(map[string]any)
		if !ok {
			if len(path) == 2 {
				t.Errorf("%v has no labels", o)
			}
			continue
		}
		if str(labels, "app.kubernetes.io/name") == "" || str(labels, "app.kubernetes.io/part-of") != "zfs-csi" {
			t.Errorf("%v: labels %v lack app.kubernetes.io/name or part-of", o, labels)
		}
		for _, name := range releaseLabels {
			if str(labels, name) == "" {
				t.Errorf("%v: labels %v lack %s", o, labels, name)
			}
			delete(labels, name)
		}
	}
	return o
}

// snapshotAPI and kubeVersion are what helm template must be told of a
// cluster with the snapshot CRDs and ValidatingAdmissionPolicy v1 (helm
// install reads them from the cluster).
var withSnapshotAPI = []string{"--api-versions", "snapshot.storage.k8s.io/v1", "--kube-version", "1.34.0"}

// withGroupSnapshotAPI is a Kubernetes 1.36 cluster with the snapshot and
// group snapshot CRDs: MutatingAdmissionPolicy is GA there (v1, on by
// default), the API the plain manifests name.
var withGroupSnapshotAPI = []string{"--api-versions", "snapshot.storage.k8s.io/v1",
	"--api-versions", "groupsnapshot.storage.k8s.io/v1",
	"--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy", "--kube-version", "1.36.0"}

// withBetaMutatingPolicy is a Kubernetes 1.34 cluster with the same CRDs and
// MutatingAdmissionPolicy v1beta1 turned on (beta and off by default before
// 1.36).
var withBetaMutatingPolicy = append([]string{"--api-versions", "groupsnapshot.storage.k8s.io/v1",
	"--api-versions", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"}, withSnapshotAPI...)

// withTemplateNodes gives the chart the nodes load expands the plain
// manifests' per-node templates for.
var withTemplateNodes = []string{"--set", "groupSnapshots.nodes={" + strings.Join(templateNodes, ",") + "}"}

// The chart and the plain manifests cannot drift: with its default values
// and the release in namespace zfs-csi, the chart renders the same objects,
// field for field, less the Namespace (helm --create-namespace makes it) and
// plus Helm's labels; on a cluster without the snapshot CRDs, the same less
// what needs them (the plain manifests' snapshots/ directory). Given the
// nodes, it renders what the per-node templates make for them.
func TestChartRendersThePlainManifests(t *testing.T) {
	for _, test := range []struct {
		name      string
		args      []string
		dirs      []string // the optional directories of the plain manifests it renders
		templates bool     // and their per-node templates, for templateNodes
	}{
		{"with the snapshot API", withSnapshotAPI, []string{snapshotDir}, false},
		{"without it", nil, nil, false},
		{"with the group snapshot API and MutatingAdmissionPolicy", withGroupSnapshotAPI, []string{snapshotDir, groupSnapshotDir}, false},
		{"with the group snapshot API and nodes", append(withTemplateNodes, withGroupSnapshotAPI...), []string{snapshotDir, groupSnapshotDir}, true},
		{"with an encryption key Secret", []string{"--values", "testdata/encryption-values.yaml"}, []string{encryptionDir}, false},
		{"with changed-block tracking", []string{"--values", "testdata/snapshot-metadata-values.yaml"}, []string{snapshotMetadataDir}, false},
	} {
		t.Run(test.name, func(t *testing.T) {
			plain := map[string]map[string]any{}
			for _, o := range load(t) {
				if o.node != "" && !test.templates {
					continue
				}
				if dir := filepath.Dir(o.file); o.kind() != "Namespace" && (dir == "." || slices.Contains(test.dirs, dir)) {
					plain[o.kind()+"/"+o.name()] = o.doc
				}
			}
			var objects []object
			for _, o := range render(t, append([]string{"--namespace", namespace}, test.args...)...) {
				objects = append(objects, withoutReleaseLabels(t, o))
			}
			charted := byKindAndName(objects)
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
		})
	}
}

func TestChartLintsWithItsValuesAndOthers(t *testing.T) {
	touchInputs(t)
	for _, args := range [][]string{nil, {"--values", "testdata/helm-values.yaml"}, {"--kube-version", "1.34.0"}} {
		out, err := exec.Command(helm(t), append([]string{"lint", "--strict", chart}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("helm lint %v: %v\n%s", args, err, out)
		}
	}
}

// values.schema.json: a misspelt or mistyped value fails helm template (and
// install and lint) instead of being ignored.
func TestChartRefusesValuesItDoesNotKnow(t *testing.T) {
	touchInputs(t)
	for _, set := range []string{
		"namespace=storage",                  // the release's namespace now (helm -n)
		"priorityClass=system-node-critical", // priorityClassName
		"images.provisioner.tag=",
		"images.resizer.pullPolicy=Sometimes",
		"storageClasses[0].reclaimPolcy=Retain",
		"storageClasses[0].volumeBindingMode=Later",
		"snapshotter.enabled=yes",
		"metrics.port=0",
		"kubeletDir=var/lib/kubelet",
		"groupSnapshots.nodes={Node_A}", // not a node name: the class's name and label refuse it
		"groupSnapshots.nodes={node-a,node-a}",
	} {
		out, err := exec.Command(helm(t), "template", "zfs-csi", chart, "--set", set).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "schema") {
			t.Errorf("helm template --set %s: %v, want a schema error\n%s", set, err, out)
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
//
// long: one rendering of the chart, a check per value it sets
func TestChartValues(t *testing.T) {
	rendered := render(t, append(append([]string{"--namespace", "storage", "--values", "testdata/helm-values.yaml"}, withSnapshotAPI...), withMonitoringAPI...)...)
	for _, o := range rendered {
		withoutReleaseLabels(t, o)
		if ns := str(o.doc, "metadata", "namespace"); ns != "" && ns != "storage" {
			t.Errorf("%v is in namespace %q, not the release's", o, ns)
		}
	}
	objects := byKindAndName(rendered)
	for key := range objects {
		if strings.HasPrefix(key, "Namespace/") {
			t.Errorf("the chart renders %s: helm install --create-namespace makes it, and uninstall must not delete it", key)
		}
	}
	daemonSet := objects["DaemonSet/zfs-csi-sidecars"]
	if got := str(daemonSet, "metadata", "namespace"); got != "storage" {
		t.Errorf("the DaemonSet is in %q", got)
	}
	if got := get(daemonSet, "spec", "updateStrategy"); !reflect.DeepEqual(got, map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": "25%"}}) {
		t.Errorf("updateStrategy %v", got)
	}
	template := get(daemonSet, "spec", "template", "metadata")
	if str(template, "labels", "team") != "storage" || str(template, "annotations", "example.com/scrape") != "false" {
		t.Errorf("pod labels and annotations %v", template)
	}
	pod := get(daemonSet, "spec", "template", "spec")
	if str(pod, "priorityClassName") != "storage-critical" || str(pod, "nodeSelector", "zfs.csi.dev/host") != "true" {
		t.Errorf("pod spec %v", pod)
	}
	if str(pod, "imagePullSecrets", 0, "name") != "mirror" {
		t.Errorf("imagePullSecrets %v", get(pod, "imagePullSecrets"))
	}
	if str(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", 0, "matchExpressions", 0, "key") != "zfs.csi.dev/node" {
		t.Errorf("affinity %v", get(pod, "affinity"))
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
	provisioner := list(pod, "containers")[0]
	if str(provisioner, "image") != "mirror.example.com/csi-provisioner:v6.4.1" || str(provisioner, "imagePullPolicy") != "Always" {
		t.Errorf("provisioner image %q, pull policy %q", str(provisioner, "image"), str(provisioner, "imagePullPolicy"))
	}
	if args := texts(provisioner, "args"); args[len(args)-1] != "--v=5" {
		t.Errorf("provisioner args %v lack the extra --v=5 at the end", args)
	}
	if got := str(pod, "volumes", 0, "hostPath", "path"); got != "/data/kubelet/plugins/"+driverName {
		t.Errorf("socket directory %q", got)
	}
	for _, o := range []string{"VolumeSnapshotClass/zfs-snapshot", "ValidatingAdmissionPolicy/" + contentPolicy, "ValidatingAdmissionPolicyBinding/" + contentPolicy} {
		if _, ok := objects[o]; ok {
			t.Errorf("snapshotter disabled still renders %s", o)
		}
	}
	fast := objects["StorageClass/fast"]
	if str(fast, "parameters", "zfs.recordsize") != "16K" || str(fast, "reclaimPolicy") != "Retain" ||
		str(fast, "metadata", "annotations", "storageclass.kubernetes.io/is-default-class") != "true" ||
		str(fast, "volumeBindingMode") != "Immediate" || !reflect.DeepEqual(texts(fast, "mountOptions"), []string{"noatime"}) ||
		str(fast, "allowedTopologies", 0, "matchLabelExpressions", 0, "key") != "zfs.csi.dev/node" || get(fast, "allowVolumeExpansion") != false {
		t.Errorf("StorageClass fast %v", fast)
	}
	if plain := objects["StorageClass/plain"]; get(plain, "metadata", "annotations") != nil || str(plain, "volumeBindingMode") != "WaitForFirstConsumer" ||
		get(plain, "allowVolumeExpansion") != true {
		t.Errorf("StorageClass plain (defaults) %v", plain)
	}
	if _, ok := objects["StorageClass/zfs-ext4"]; ok {
		t.Error("a StorageClass left out of the values is rendered")
	}
	scrape := objects["ScrapeConfig/zfs-csi"]
	if str(scrape, "spec", "jobName") != "zfs-csi" || str(scrape, "metadata", "labels", "release") != "monitoring" ||
		str(scrape, "metadata", "labels", "prometheus") != "main" {
		t.Errorf("metrics enabled: ScrapeConfig %v", scrape)
	}
	keep := get(scrape, "spec", "relabelings", 0)
	if str(keep, "action") != "keep" || str(keep, "regex") != "true" ||
		!reflect.DeepEqual(texts(keep, "sourceLabels"), []string{"__meta_kubernetes_node_labelpresent_zfs_csi_dev_node"}) {
		t.Errorf("the ScrapeConfig does not keep only the nodes labelled zfs.csi.dev/node first: %v", keep)
	}
	rule := objects["PrometheusRule/zfs-csi"]
	if len(list(rule, "spec", "groups", 0, "rules")) != 11 || str(rule, "metadata", "labels", "release") != "monitoring" {
		t.Errorf("alertRules: PrometheusRule %v", rule)
	}
	if dashboard := objects["ConfigMap/zfs-csi-dashboard"]; !strings.Contains(str(dashboard, "data", "zfs-csi.json"), `"uid": "zfs-csi"`) ||
		str(dashboard, "metadata", "labels", "grafana_dashboard") != "1" {
		t.Errorf("grafanaDashboard: ConfigMap %v", dashboard)
	}
	for _, rb := range []string{"ClusterRoleBinding/zfs-csi-provisioner", "RoleBinding/zfs-csi-sidecars"} {
		if got := str(objects[rb], "subjects", 0, "namespace"); got != "storage" {
			t.Errorf("%s binds the ServiceAccount of namespace %q", rb, got)
		}
	}
}

// The snapshot objects come with the snapshot API, whatever the values say:
// without the CRDs a VolumeSnapshotClass would fail the whole install. (The
// admission policy's ValidatingAdmissionPolicy v1, from 1.30, is in every
// Kubernetes the chart's kubeVersion admits.)
func TestChartRendersSnapshotObjectsOnlyWhereTheAPIExists(t *testing.T) {
	snapshotObjects := []string{"VolumeSnapshotClass/zfs-snapshot", "ValidatingAdmissionPolicy/" + contentPolicy, "ValidatingAdmissionPolicyBinding/" + contentPolicy}
	for _, test := range []struct {
		name string
		args []string
		want []string
	}{
		{"no snapshot CRDs", []string{"--kube-version", "1.34.0"}, nil},
		{"snapshot CRDs", withSnapshotAPI, snapshotObjects},
		{"snapshot CRDs, a default class", append([]string{"--set", "snapshotter.defaultSnapshotClass=true"}, withSnapshotAPI...), snapshotObjects},
	} {
		t.Run(test.name, func(t *testing.T) {
			objects := byKindAndName(render(t, test.args...))
			var got []string
			for _, key := range snapshotObjects {
				if _, ok := objects[key]; ok {
					got = append(got, key)
				}
			}
			if !reflect.DeepEqual(got, test.want) {
				t.Errorf("renders %v, want %v", got, test.want)
			}
			class := objects["VolumeSnapshotClass/zfs-snapshot"]
			if isDefault := str(class, "metadata", "annotations", "snapshot.storage.kubernetes.io/is-default-class") == "true"; class != nil && isDefault != strings.Contains(test.name, "default") {
				t.Errorf("VolumeSnapshotClass default annotation %v", get(class, "metadata", "annotations"))
			}
		})
	}
}

// A VolumeGroupSnapshotClass for each node listed, labelled with it (a
// node's csi-snapshotter sees no other), and the label policy, only with the
// snapshotter, groupSnapshots.enabled and the group snapshot API; without
// nodes, the policy alone.
func TestChartRendersAGroupSnapshotClassPerNode(t *testing.T) {
	policy := "MutatingAdmissionPolicy/zfs-csi-group-snapshot-content-node"
	nodes := []string{"--set", "groupSnapshots.nodes={node-1,node-2}"}
	perNode := []string{"VolumeGroupSnapshotClass/zfs-group-snapshot-node-1", "VolumeGroupSnapshotClass/zfs-group-snapshot-node-2"}
	for _, test := range []struct {
		name string
		args []string
		want []string
	}{
		{"no nodes listed", withGroupSnapshotAPI, []string{policy}},
		{"two nodes", append(nodes, withGroupSnapshotAPI...), append([]string{policy}, perNode...)},
		{"two nodes, MutatingAdmissionPolicy v1beta1", append(nodes, withBetaMutatingPolicy...), append([]string{policy}, perNode...)},
		{"two nodes, no MutatingAdmissionPolicy", append(nodes, "--api-versions", "groupsnapshot.storage.k8s.io/v1"), perNode},
		{"two nodes, no group snapshot API", append(nodes, withSnapshotAPI...), nil},
		{"two nodes, group snapshots disabled", append(append(nodes, "--set", "groupSnapshots.enabled=false"), withGroupSnapshotAPI...), nil},
		{"two nodes, snapshotter disabled", append(append(nodes, "--set", "snapshotter.enabled=false"), withGroupSnapshotAPI...), nil},
	} {
		t.Run(test.name, func(t *testing.T) {
			var got []string
			for _, o := range render(t, test.args...) {
				key := o.kind() + "/" + o.name()
				switch o.kind() {
				case "MutatingAdmissionPolicy":
					got = append(got, key)
				case "VolumeGroupSnapshotClass":
					got = append(got, key)
					if node := strings.TrimPrefix(o.name(), "zfs-group-snapshot-"); str(o.doc, "metadata", "labels", managedBy) != node {
						t.Errorf("%s is labelled %v, want %s=%s", key, get(o.doc, "metadata", "labels"), managedBy, node)
					}
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, test.want) {
				t.Errorf("renders %v, want %v", got, test.want)
			}
		})
	}
}

// The label policy and its binding take the MutatingAdmissionPolicy API the
// cluster serves: v1 where it has it (Kubernetes 1.36+, also when v1beta1 is
// still turned on), else v1beta1 (1.34 and 1.35 with the API turned on).
func TestChartRendersTheMutatingPolicyUnderTheClustersAPI(t *testing.T) {
	both := append([]string{"--api-versions", "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"}, withGroupSnapshotAPI...)
	for _, test := range []struct {
		name string
		args []string
		want string
	}{
		{"v1 (1.36)", withGroupSnapshotAPI, "admissionregistration.k8s.io/v1"},
		{"v1beta1 (1.34)", withBetaMutatingPolicy, "admissionregistration.k8s.io/v1beta1"},
		{"both", both, "admissionregistration.k8s.io/v1"},
	} {
		t.Run(test.name, func(t *testing.T) {
			n := 0
			for _, o := range render(t, test.args...) {
				if !strings.HasPrefix(o.kind(), "MutatingAdmissionPolicy") {
					continue
				}
				n++
				if got := str(o.doc, "apiVersion"); got != test.want {
					t.Errorf("%s/%s is %s, want %s", o.kind(), o.name(), got, test.want)
				}
			}
			if n != 2 {
				t.Errorf("renders %d MutatingAdmissionPolicy objects, want the policy and its binding", n)
			}
		})
	}
}

// The chart's version is the release's: Chart.yaml names the newest release
// of packaging/changelog.yml (the packages' changelog), and make chart
// packages it as the build's package version (make pkg-version), for a
// tagged build and for one after the tag alike.
func TestChartVersionIsTheReleaseVersion(t *testing.T) {
	touchInputs(t)
	var meta struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	data, err := os.ReadFile(chart + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		t.Fatal(err)
	}
	var changelog []struct {
		Semver string `yaml:"semver"`
	}
	if data, err = os.ReadFile("../changelog.yml"); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &changelog); err != nil || len(changelog) == 0 {
		t.Fatalf("packaging/changelog.yml: %v", err)
	}
	if meta.Version != changelog[0].Semver || meta.AppVersion != changelog[0].Semver {
		t.Errorf("Chart.yaml has version %q and appVersion %q; the newest release in packaging/changelog.yml is %q",
			meta.Version, meta.AppVersion, changelog[0].Semver)
	}
	for _, build := range [][]string{
		{"VERSION=v0.2.0", "LAST_TAG=0.2.0", "COMMIT_TIME=20261201000000", "COMMIT=0123456789ab"},
		{"VERSION=v0.2.0-3-g0b0b0b0", "LAST_TAG=0.2.0", "COMMIT_TIME=20261202000000", "COMMIT=0b0b0b0b0b0b"},
	} {
		out, err := exec.Command("make", append([]string{"-s", "-C", "../..", "pkg-version"}, build...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("make pkg-version: %v\n%s", err, out)
		}
		want := strings.TrimSpace(string(out))
		dir := t.TempDir()
		if out, err := exec.Command("make", append([]string{"-s", "-C", "../..", "chart", "CHART_DIR=" + dir, "HELM=" + helm(t)}, build...)...).CombinedOutput(); err != nil {
			t.Fatalf("make chart: %v\n%s", err, out)
		}
		packaged, _ := filepath.Glob(dir + "/zfs-csi-*.tgz")
		if len(packaged) != 1 {
			t.Fatalf("make chart made %v", packaged)
		}
		out, err = exec.Command(helm(t), "show", "chart", packaged[0]).Output()
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(out, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Version != want || meta.AppVersion != want || filepath.Base(packaged[0]) != "zfs-csi-"+want+".tgz" {
			t.Errorf("make chart %v: %s, version %q, appVersion %q; want the package version %q", build, filepath.Base(packaged[0]), meta.Version, meta.AppVersion, want)
		}
	}
}

// encryption.keySecrets: one Role per namespace of the Secrets, naming only
// them, bound to the sidecars' ServiceAccount of the release's namespace.
func TestChartLetsTheSidecarsReadOnlyTheKeySecretsNamed(t *testing.T) {
	rendered := render(t, "--namespace", "storage",
		"--set", "encryption.keySecrets[0].name=key-a",
		"--set", "encryption.keySecrets[1].name=key-b", "--set", "encryption.keySecrets[1].namespace=vault",
		"--set", "encryption.keySecrets[2].name=key-c")
	roles := map[string][]string{}
	for _, o := range rendered {
		switch {
		case o.kind() == "Role" && o.name() == "zfs-csi-encryption-keys":
			rule := get(o.doc, "rules", 0)
			if !reflect.DeepEqual(texts(rule, "resources"), []string{"secrets"}) || !reflect.DeepEqual(texts(rule, "verbs"), []string{"get"}) ||
				len(list(o.doc, "rules")) != 1 {
				t.Errorf("Role in %s grants %v", str(o.doc, "metadata", "namespace"), get(o.doc, "rules"))
			}
			roles[str(o.doc, "metadata", "namespace")] = texts(rule, "resourceNames")
		case o.kind() == "RoleBinding" && o.name() == "zfs-csi-encryption-keys":
			if str(o.doc, "subjects", 0, "name") != "zfs-csi-sidecars" || str(o.doc, "subjects", 0, "namespace") != "storage" {
				t.Errorf("RoleBinding in %s binds %v", str(o.doc, "metadata", "namespace"), get(o.doc, "subjects"))
			}
		case o.kind() == "ClusterRole":
			if strings.Contains(fmt.Sprint(o.doc["rules"]), "secrets") {
				t.Errorf("ClusterRole %s names secrets: keys must be readable only where named", o.name())
			}
		}
	}
	if want := map[string][]string{"storage": {"key-a", "key-c"}, "vault": {"key-b"}}; !reflect.DeepEqual(roles, want) {
		t.Errorf("Roles by namespace %v, want %v", roles, want)
	}
	for _, o := range render(t, "--namespace", "storage") {
		if o.name() == "zfs-csi-encryption-keys" {
			t.Errorf("without keySecrets the chart renders %s", o)
		}
	}
}
