package checks

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// topologyKey is the label kubelet sets on a Node when the zfs-csi daemon
// there registers: the topology segment of the daemon's NodeGetInfo.
const topologyKey = "zfs.csi.dev/node"

// cluster is a cluster where zfs-csi runs on some nodes only: a tainted
// control-plane node without it (the case where helm install --wait never
// finished), a worker not installed yet, and two nodes whose daemon
// registered, one of them a tainted control-plane node.
func cluster() []*corev1.Node {
	node := func(name string, registered, controlPlane bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/os": "linux", "kubernetes.io/hostname": name}}}
		if registered {
			n.Labels[topologyKey] = name
		}
		if controlPlane {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
			n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
		}
		return n
	}
	return []*corev1.Node{
		node("control-plane", false, true),
		node("worker-new", false, false),
		node("worker-1", true, false),
		node("control-plane-storage", true, true),
	}
}

// placedOn is where the DaemonSet controller puts a pod of ds: the nodes
// whose labels fit the pod's required node affinity and node selector, and
// whose NoSchedule and NoExecute taints it tolerates (the predicates of
// pkg/controller/daemon, with the scheduler's own helpers).
func placedOn(ds *appsv1.DaemonSet, nodes []*corev1.Node) []string {
	pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	var names []string
	for _, node := range nodes {
		fits, _ := affinity.Match(node)
		_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
		if fits && !untolerated {
			names = append(names, node.Name)
		}
	}
	return names
}

// daemonSets decodes the DaemonSets of a YAML stream.
func daemonSets(t *testing.T, stream []byte) map[string]*appsv1.DaemonSet {
	t.Helper()
	found := map[string]*appsv1.DaemonSet{}
	for _, doc := range strings.Split(string(stream), "\n---") {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil || head.Kind != "DaemonSet" {
			continue
		}
		ds := &appsv1.DaemonSet{}
		if err := yaml.UnmarshalStrict([]byte(doc), ds); err != nil {
			t.Fatal(err)
		}
		found[ds.Name] = ds
	}
	return found
}

// helmTemplate runs helm template of the chart (helmtool under make test).
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(helmBinary(t), append([]string{"template", "zfs-csi", "../helm/zfs-csi"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// The node pods go only where the daemon runs, without the operator
// labelling a node: to the nodes kubelet labelled when their daemon
// registered, tainted or not. A node without zfs-csi gets no pod, whose
// readiness probe's hostPath (the package's binary) would never exist there
// and whose rollout would never finish.
func TestNodePodsRunOnlyWhereTheDaemonRegistered(t *testing.T) {
	var manifests []byte
	for _, file := range []string{"../kubernetes/30-sidecars.yaml", "../kubernetes/snapshot-metadata/20-sidecar.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(append(manifests, data...), "\n---\n"...)
	}
	sources := map[string]map[string]*appsv1.DaemonSet{
		"the plain manifests": daemonSets(t, manifests),
		"the chart":           daemonSets(t, helmTemplate(t, "--values", "../kubernetes/testdata/snapshot-metadata-values.yaml")),
	}
	want := []string{"worker-1", "control-plane-storage"}
	for source, found := range sources {
		for _, name := range []string{"zfs-csi-sidecars", "zfs-csi-snapshot-metadata"} {
			ds, ok := found[name]
			if !ok {
				t.Errorf("%s: no DaemonSet %s", source, name)
				continue
			}
			if got := placedOn(ds, cluster()); !slices.Equal(got, want) {
				t.Errorf("%s: DaemonSet %s runs on %v, want %v (the nodes labelled %s)", source, name, got, want, topologyKey)
			}
		}
	}
}
