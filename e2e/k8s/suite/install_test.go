package suite

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

const (
	distributedFlag = "--enable-distributed-snapshotting"
	// contentPolicy is the shipped admission policy that refuses contents
	// without the node label that flag makes the snapshot-controller set.
	contentPolicy = "zfs-csi-snapshot-content-has-a-node"
	chartNS       = "zfs-csi-chart" // e2e/k8s/helm-values.yaml
)

// 8. A snapshot-controller without --enable-distributed-snapshotting: the
// snapshot is refused with a reason that names the flag (the shipped
// admission policy), in the VolumeSnapshot's events and status, nothing is
// made in ZFS, and once the flag is back the same snapshot becomes ready.
func testMissingDistributedSnapshotting(t *testing.T, e *env) {
	t.Cleanup(func() { e.setDistributedSnapshotting(t, true) })
	e.setDistributedSnapshotting(t, false)
	c := classes[0]
	name := "unlabelled"
	e.written(t, name, c, "token-of-"+name)
	ds := e.dataset(t, e.boundPV(t, name))
	snap := name + "-snap"
	e.requestSnapshot(t, snap, name)
	e2eutil.Eventually(t, 3*time.Minute, "the VolumeSnapshot's events to name the missing flag", func() (bool, error) {
		ev := e.events(snap)
		return strings.Contains(ev, "SnapshotContentCreationFailed") && strings.Contains(ev, distributedFlag) &&
			strings.Contains(ev, contentPolicy), fmt.Errorf("events: %s", ev)
	})
	s, err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).Get(ctx(), snap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if msg, _, _ := unstructured.NestedString(s.Object, "status", "error", "message"); !strings.Contains(msg, distributedFlag) {
		t.Errorf("the VolumeSnapshot's status.error does not name %s: %q", distributedFlag, msg)
	}
	if out := must(t, "zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-r", ds); strings.TrimSpace(out) != "" {
		t.Errorf("a refused snapshot left ZFS snapshots: %s", out)
	}
	t.Logf("refused as: %s", e.events(snap))
	e.setDistributedSnapshotting(t, true)
	e.snapshotReady(t, snap)
	e.deleteSnapshot(t, snap)
	e.deletePVC(t, name, ds)
}

// setDistributedSnapshotting gives the snapshot-controller the flag or takes
// it away, and waits for the one controller pod to run with its new arguments.
func (e *env) setDistributedSnapshotting(t *testing.T, on bool) {
	t.Helper()
	deployments := e.cs.AppsV1().Deployments("kube-system")
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := deployments.Get(ctx(), "snapshot-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := &d.Spec.Template.Spec.Containers[0]
		args := slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool { return a == distributedFlag })
		if on {
			args = append(args, distributedFlag)
		}
		if slices.Equal(args, c.Args) {
			return nil
		}
		c.Args = args
		_, err = deployments.Update(ctx(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e2eutil.Eventually(t, 4*time.Minute, fmt.Sprintf("the snapshot-controller to run with %s = %v", distributedFlag, on), func() (bool, error) {
		pods, err := e.cs.CoreV1().Pods("kube-system").List(ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=snapshot-controller"})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, p := range pods.Items {
			has := slices.Contains(p.Spec.Containers[0].Args, distributedFlag)
			seen = append(seen, fmt.Sprintf("%s %s flag=%v deleting=%v", p.Name, p.Status.Phase, has, p.DeletionTimestamp != nil))
		}
		if len(pods.Items) != 1 {
			return false, fmt.Errorf("pods: %v", seen)
		}
		p := pods.Items[0]
		ready := p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
		return ready && slices.Contains(p.Spec.Containers[0].Args, distributedFlag) == on, fmt.Errorf("pods: %v", seen)
	})
}

// chartClasses are the StorageClasses e2e/k8s/helm-values.yaml asks for.
var chartClasses = []class{{"chart-dataset", false}, {"chart-ext4", false}}

// 9. The Helm chart, with values that are not the defaults, replaces the
// plain manifests, installed as a user does: helm install --wait, while the
// other node runs no zfs-csi (its daemon stopped and the label kubelet gave
// it taken away, as a node that never ran it). The install finishes with
// the sidecars on this node only; once the other node's daemon is back,
// kubelet labels it again and the sidecars follow. Then the chart's
// StorageClasses provision with their parameters, and snapshots restore
// through it.
func testChart(t *testing.T, e *env) {
	peer := needPeer(t)
	// kubelet removes a pod's logs with the pod: check the manifests'
	// sidecars for RBAC and watch errors while they are there.
	e.sidecarLogsClean(t)
	must(t, e.kubectl, "delete", "-R", "-f", e.manifests, "--wait=true", "--timeout=5m")
	// The chart owns no Namespace (helm install --create-namespace makes it).
	must(t, e.kubectl, "create", "namespace", chartNS)
	must(t, e.kubectl, "label", "namespace", chartNS, "pod-security.kubernetes.io/enforce=privileged")
	e.withoutDaemon(t, peer)
	start := time.Now()
	out := e.helm(t, "install", "zfs-csi", e.chart, "--namespace", chartNS, "--values", e.values, "--wait", "--timeout", "10m")
	t.Logf("helm install --wait returned after %s with %s running no zfs-csi: %s", time.Since(start).Round(time.Second), peer,
		strings.Join(strings.Fields(out), " "))
	e.driverNS = chartNS
	pods, err := e.cs.CoreV1().Pods(chartNS).List(ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + sidecarsDS})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != e.node {
		t.Fatalf("the chart's sidecar pods with %s running no zfs-csi: %v (%v), want one, on %s", peer, podNodes(pods.Items), err, e.node)
	}
	e.daemonBack(t, peer)
	e.sidecarsReady(t)
	pods, err = e.cs.CoreV1().Pods(chartNS).List(ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + sidecarsDS})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("the chart's sidecar pods with both daemons: %v (%v)", podNodes(pods.Items), err)
	}
	for _, p := range pods.Items {
		if p.Spec.PriorityClassName != "system-node-critical" {
			t.Errorf("the chart's sidecar pod %s: priority class %q; want the values' system-node-critical", p.Name, p.Spec.PriorityClassName)
		}
	}
	if _, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx(), contentPolicy, metav1.GetOptions{}); err != nil {
		t.Errorf("the chart's admission policy: %v", err)
	}
	for _, c := range chartClasses {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e.capacity(t, c.name)
			src := "from-" + c.name
			token := "token-of-" + src
			e.written(t, src, c, token)
			ds := e.dataset(t, e.boundPV(t, src))
			if c.name == "chart-dataset" {
				if rs := e.props(t, ds, "recordsize")[0]; rs != "16384" {
					t.Errorf("%s: recordsize %s, want the class's 16K", ds, rs)
				}
			}
			snap := src + "-snap"
			e.snapshot(t, snap, src)
			restore := src + "-restore"
			e.pvc(t, restore, c.name, "1Gi", c.mode(), "snap:"+snap)
			e.pod(t, restore+"-reader", restore, c.block, c.read())
			if got := e.finished(t, restore+"-reader", podWait); got != token {
				t.Errorf("restored through the chart's classes: %q, want %q", got, token)
			}
			e.deletePod(t, restore+"-reader")
			e.deletePVC(t, restore, "")
			e.deleteSnapshot(t, snap)
			e.deletePVC(t, src, ds)
		})
	}
}
