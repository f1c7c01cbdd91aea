package suite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// 13. The daemon's health is visible in the cluster: when zfs-csi.service
// stops on the node, that node's sidecar pod turns not ready (the shipped
// readiness probe asks the daemon over its socket), and ready again once the
// daemon serves; the other node's pod stays ready throughout.
func testHealth(t *testing.T, e *env) {
	e.sidecarPodReady(t, e.node, true, 2*time.Minute)
	registered := registrations(t)
	start := time.Now()
	must(t, "systemctl", "stop", "zfs-csi")
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_, _ = run("systemctl", "start", "zfs-csi")
		}
	})
	reason := e.sidecarPodReady(t, e.node, false, 3*time.Minute)
	t.Logf("not ready %s after systemctl stop zfs-csi: %s", time.Since(start).Round(time.Second), reason)
	e.othersReady(t)
	start = time.Now()
	must(t, "systemctl", "start", "zfs-csi")
	stopped = false
	e.registered(t, registered)
	e.sidecarPodReady(t, e.node, true, 3*time.Minute)
	t.Logf("ready again %s after systemctl start zfs-csi", time.Since(start).Round(time.Second))
}

// sidecarPod returns the manifests' sidecar pod on node.
func (e *env) sidecarPod(node string) (*corev1.Pod, error) {
	pods, err := e.cs.CoreV1().Pods(e.driverNS).List(ctx(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=" + sidecarsDS, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d sidecar pods on %s", len(live), node)
	}
	return &live[0], nil
}

// sidecarPodReady waits for the sidecar pod of node to have its Ready
// condition as wanted, and returns the not-ready containers' states then.
func (e *env) sidecarPodReady(t *testing.T, node string, want bool, timeout time.Duration) string {
	t.Helper()
	var state string
	e2eutil.Eventually(t, timeout, fmt.Sprintf("the sidecar pod on %s to be ready=%v", node, want), func() (bool, error) {
		p, err := e.sidecarPod(node)
		if err != nil {
			return false, err
		}
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		var notReady []string
		for _, c := range p.Status.ContainerStatuses {
			if !c.Ready {
				notReady = append(notReady, c.Name)
			}
		}
		state = fmt.Sprintf("pod %s ready %v, containers not ready %v; %s", p.Name, ready, notReady, e.eventsIn(e.driverNS, p.Name))
		return ready == want, fmt.Errorf("%s", state)
	})
	return state
}

// othersReady checks that the sidecar pods of the other nodes stayed ready:
// one node's daemon says nothing about another's.
func (e *env) othersReady(t *testing.T) {
	t.Helper()
	nodes, err := e.cs.CoreV1().Nodes().List(ctx(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Name == e.node {
			continue
		}
		if state := e.sidecarPodReady(t, n.Name, true, time.Minute); !strings.Contains(state, "ready true") {
			t.Errorf("%s", state)
		}
	}
}
