package suite

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// 14. Scheduling on two nodes, with nothing but the claims and pods a user
// writes: a pod of an existing volume goes to the volume's node; a restore of
// a snapshot of node A's volume lands on A (the other node's provisioner
// answers that it cannot, and the claim is rescheduled); a claim that does
// not fit A's pool lands on B (capacity tracking).
//
// long: one scenario on the cluster whose steps build on the volumes before them
func testScheduling(t *testing.T, e *env) {
	a, b := e.node, os.Getenv("ZFS_CSI_E2E_PEER_NODE")
	nodes, err := e.cs.CoreV1().Nodes().List(ctx(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) < 2 || b == "" {
		t.Skipf("needs a cluster of two nodes (make e2e-k8s has them); %d nodes, peer %q", len(nodes.Items), b)
	}
	c := classes[0]
	read := c.read()

	// A volume made on B (its first pod pinned there); a second pod, not
	// pinned, goes to B.
	onB := "sched-on-b"
	e.pvc(t, onB, c.name, "1Gi", c.mode(), "")
	e.podOn(t, map[string]string{"kubernetes.io/hostname": b}, onB+"-writer", onB, false, c.write("token-of-"+onB))
	e.finished(t, onB+"-writer", podWait)
	e.deletePod(t, onB+"-writer")
	e.checkPVNode(t, e.boundPV(t, onB), b)
	e.podOn(t, nil, onB+"-reader", onB, false, read)
	if got := e.finished(t, onB+"-reader", podWait); got != "token-of-"+onB {
		t.Errorf("the second pod of a volume on %s read %q", b, got)
	}
	e.onNode(t, onB+"-reader", b)
	e.deletePod(t, onB+"-reader")

	// A restore of a snapshot taken on A: without the daemons' peer
	// channel it lands on A, wherever the scheduler first tries it (B's
	// daemon refuses, the claim is rescheduled); with it, where the
	// scheduler puts it, B pulling the snapshot from A (docs/across-nodes.md).
	onA := "sched-on-a"
	e.written(t, onA, c, "token-of-"+onA) // e.pod pins the writer to A
	srcDS := e.dataset(t, e.boundPV(t, onA))
	snap := onA + "-snap"
	e.snapshot(t, snap, onA)
	restore := onA + "-restore"
	e.pvc(t, restore, c.name, "1Gi", c.mode(), "snap:"+snap)
	e.podOn(t, nil, restore+"-reader", restore, false, read)
	start := time.Now()
	// The claim may be tried on B first and rescheduled: more time.
	got := e.finished(t, restore+"-reader", podWait+pullWait)
	if got != "token-of-"+onA {
		t.Errorf("the restore of %s's snapshot read %q", a, got)
	}
	landed := a
	if peerChannel(t) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx(), restore+"-reader", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		landed = p.Spec.NodeName
	}
	e.onNode(t, restore+"-reader", landed)
	e.checkPVNode(t, e.boundPV(t, restore), landed)
	t.Logf("the restore of %s's snapshot landed on %s after %s (peer channel %v); its claim's events: %s",
		a, landed, time.Since(start).Round(time.Second), peerChannel(t), e.events(restore))
	e.deletePod(t, restore+"-reader")
	e.deletePVC(t, restore, "")
	e.deleteSnapshot(t, snap)
	e.deletePVC(t, onA, srcDS)

	// Capacity: A's pool filled (a reservation outside the driver's
	// parent) until the provisioner publishes less than a claim asks for;
	// that claim, its pod not pinned, lands on B.
	const fill = "/e2e-fill"
	size := int64(2 * gib)
	avail, err := strconv.ParseInt(strings.TrimSpace(must(t, "zfs", "get", "-Hp", "-o", "value", "available", e.pool)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	must(t, "zfs", "create", "-o", "refreservation="+strconv.FormatInt(avail-size/2, 10), e.pool+fill)
	t.Cleanup(func() { _, _ = run("zfs", "destroy", e.pool+fill) })
	e2eutil.Eventually(t, 4*time.Minute, fmt.Sprintf("%s's published capacity for %s to drop below %d bytes", a, c.name, size), func() (bool, error) {
		left, err := e.publishedCapacity(c.name, a)
		return err == nil && left < size, fmt.Errorf("%d bytes (%v)", left, err)
	})
	if left, err := e.publishedCapacity(c.name, b); err != nil || left < size {
		t.Fatalf("%s publishes %d bytes for %s (%v): too little for the claim", b, left, c.name, err)
	}
	big := "sched-too-big-for-a"
	e.pvc(t, big, c.name, resource.NewQuantity(size, resource.BinarySI).String(), c.mode(), "")
	e.podOn(t, nil, big+"-writer", big, false, c.write("token-of-"+big))
	e.finished(t, big+"-writer", podWait)
	e.onNode(t, big+"-writer", b)
	e.checkPVNode(t, e.boundPV(t, big), b)
	e.deletePod(t, big+"-writer")
	e.deletePVC(t, big, "")
	must(t, "zfs", "destroy", e.pool+fill)
	e.deletePVC(t, onB, "")
}

// onNode checks which node a pod ran on.
func (e *env) onNode(t *testing.T, pod, node string) {
	t.Helper()
	p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != node {
		t.Errorf("pod %s ran on %q, want %s", pod, p.Spec.NodeName, node)
	}
}

// checkPVNode checks that a PV's node affinity names node (the driver's
// topology key, which kubelet labels each node with).
func (e *env) checkPVNode(t *testing.T, name, node string) {
	t.Helper()
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	if a := pv.Spec.NodeAffinity; a != nil && a.Required != nil {
		for _, term := range a.Required.NodeSelectorTerms {
			for _, m := range term.MatchExpressions {
				if m.Key == topologyKey {
					values = append(values, m.Values...)
				}
			}
		}
	}
	if len(values) != 1 || values[0] != node {
		t.Errorf("PV %s is pinned to %v, want [%s]", name, values, node)
	}
}

// publishedCapacity is what the provisioner of node publishes for a class:
// the largest volume it may make there (maximumVolumeSize, else capacity).
func (e *env) publishedCapacity(class, node string) (int64, error) {
	list, err := e.cs.StorageV1().CSIStorageCapacities(e.driverNS).List(ctx(), metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	for _, c := range list.Items {
		if c.StorageClassName != class || c.NodeTopology == nil || c.NodeTopology.MatchLabels[topologyKey] != node {
			continue
		}
		if c.MaximumVolumeSize != nil {
			return c.MaximumVolumeSize.Value(), nil
		}
		if c.Capacity != nil {
			return c.Capacity.Value(), nil
		}
	}
	return 0, fmt.Errorf("no CSIStorageCapacity of %s for %s", class, node)
}

// peerChannel reports whether this node's daemon is configured to reach the
// other nodes' daemons (ZFS_CSI_PEER_LISTEN in its configuration file).
func peerChannel(t *testing.T) bool {
	t.Helper()
	data, err := os.ReadFile("/etc/default/zfs-csi")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), "ZFS_CSI_PEER_LISTEN="); ok {
			return strings.Trim(value, `"'`) != ""
		}
	}
	return false
}
