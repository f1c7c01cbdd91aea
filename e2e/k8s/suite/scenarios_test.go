package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

const (
	driverName  = "zfs.csi.dev"
	topologyKey = driverName + "/node"
	driverNS    = "zfs-csi" // of the plain manifests
	sidecarsDS  = "zfs-csi-sidecars"
)

// scenario is one of TestCluster's, run in the table's order.
type scenario struct {
	name     string
	run      func(*testing.T, *env)
	required bool // the rest cannot run without it
	// bench marks a benchmark: it prints figures and asserts no time, so
	// make e2e-k8s skips it and make bench-k8s runs it. The Latency batches
	// took 1,875 and 2,290 s of the 9,000-10,000 a whole v1.37.2 run needs
	// on two TCG nodes, which a three-hour session could not fit.
	bench bool
}

// scenarios is TestCluster's table.
var scenarios = []scenario{
	{name: "Registration", run: testRegistration, required: true},
	{name: "Manifests", run: testManifests, required: true},
	{name: "Volumes", run: testVolumes},
	{name: "Snapshots", run: testSnapshots},
	{name: "Expansion", run: testExpansion},
	{name: "DeleteWithSnapshot", run: testDeleteWithSnapshot},
	{name: "DaemonRestart", run: testDaemonRestart},
	{name: "MissingDistributedSnapshotting", run: testMissingDistributedSnapshotting},
	{name: "Latency", run: testLatency, bench: true},
	{name: "GroupSnapshots", run: testGroupSnapshots},
	{name: "Encryption", run: testEncryption},
	{name: "Scheduling", run: testScheduling},
	{name: "AcrossNodes", run: testAcrossNodes},
	{name: "Move", run: testMove},
	{name: "TenantMoveRefused", run: testTenantMoveRefused},
	{name: "SmallRestoreAcrossNodes", run: testSmallRestoreAcrossNodes},
	{name: "CARotation", run: testCARotation},
	{name: "Adoption", run: testAdoption},
	{name: "Health", run: testHealth},
	{name: "Forwarding", run: testForwarding},
	{name: "ChangedBlocks", run: testChangedBlocks},
	{name: "Chart", run: testChart},
	{name: "NothingLeft", run: testNothingLeft},
}

// benchEnv is set to 1 by the node's suite when the host was given
// K8S_BENCH=1 (make bench-k8s).
const benchEnv = "ZFS_CSI_E2E_BENCH"

// skipReason says why the run leaves s out, or "" if it runs it.
func (s scenario) skipReason(benchAsked string) string {
	if s.bench && benchAsked != "1" {
		return s.name + " is a benchmark (figures, no timed assertion): make bench-k8s runs it"
	}
	return ""
}

// TestCluster runs the scenarios in order on one cluster: later ones need the
// manifests applied, so a failure to apply them ends the run. The last one
// checks that the scenarios left nothing behind, in ZFS or in the sidecars'
// logs.
func TestCluster(t *testing.T) {
	e := newEnv(t)
	e.namespace(t)
	for _, s := range scenarios {
		if !t.Run(s.name, func(t *testing.T) {
			if why := s.skipReason(os.Getenv(benchEnv)); why != "" {
				t.Skip(why)
			}
			s.run(t, e)
		}) && s.required {
			t.Fatalf("%s failed: the remaining scenarios need it", s.name)
		}
	}
}

// 1. The daemon registers with kubelet, and again after either restarts.
func testRegistration(t *testing.T, e *env) {
	e.registered(t, 0)
	for _, unit := range []string{"zfs-csi", "kubelet"} {
		before, start := registrations(t), time.Now()
		must(t, "systemctl", "restart", unit)
		e.registered(t, before)
		t.Logf("registered again after systemctl restart %s: %s", unit, time.Since(start).Round(time.Second))
	}
}

// registrations counts the daemon's log lines saying kubelet registered it.
func registrations(t *testing.T) int {
	t.Helper()
	out := must(t, "journalctl", "-u", "zfs-csi", "-o", "cat", "--no-pager")
	return strings.Count(out, "kubelet registered the plugin")
}

// registered waits for the daemon to log a registration beyond the first
// before, then checks what kubelet made of it: the CSINode entry with the
// topology key, and the node's topology label.
func (e *env) registered(t *testing.T, before int) {
	t.Helper()
	e2eutil.Eventually(t, 3*time.Minute, "the daemon to log that kubelet registered it", func() (bool, error) {
		return registrations(t) > before, nil
	})
	e2eutil.Eventually(t, 2*time.Minute, "CSINode to list "+driverName, func() (bool, error) {
		n, err := e.cs.StorageV1().CSINodes().Get(ctx(), e.node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == driverName {
				if d.NodeID != e.node || len(d.TopologyKeys) != 1 || d.TopologyKeys[0] != topologyKey {
					return false, fmt.Errorf("CSINode entry: node ID %q, topology keys %v; want %q, [%s]", d.NodeID, d.TopologyKeys, e.node, topologyKey)
				}
				node, err := e.cs.CoreV1().Nodes().Get(ctx(), e.node, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if v := node.Labels[topologyKey]; v != e.node {
					return false, fmt.Errorf("node label %s=%q, want %q", topologyKey, v, e.node)
				}
				return true, nil
			}
		}
		return false, fmt.Errorf("CSINode drivers: %v", n.Spec.Drivers)
	})
}

// 2. The shipped manifests apply unchanged and every sidecar runs.
func testManifests(t *testing.T, e *env) {
	must(t, e.kubectl, "apply", "-R", "-f", e.manifests) // with snapshots/: the cluster has the CRDs
	e.sidecarsReady(t)
	e.probeLessOften(t)
}

// sidecarsReady waits for the sidecars' DaemonSet in e.driverNS to be ready,
// then checks that no sidecar restarted or logged an RBAC or watch error.
func (e *env) sidecarsReady(t *testing.T) {
	t.Helper()
	// The sidecars, of the manifests and of the chart alike, run on every
	// node kubelet labelled when zfs-csi registered there.
	e.daemonSetReady(t, e.driverNS, sidecarsDS, e.nodesWithDaemon(t))
	// A sidecar that cannot list or watch what it needs logs it within
	// seconds of starting, and may exit.
	time.Sleep(30 * time.Second)
	pods, err := e.cs.CoreV1().Pods(e.driverNS).List(ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + sidecarsDS})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if !c.Ready || c.RestartCount != 0 {
				t.Errorf("sidecar %s: ready %v, %d restarts%s", c.Name, c.Ready, c.RestartCount, lastRun(p, c))
			}
		}
	}
	e.sidecarLogsClean(t)
}

// lastRun says how a restarted container's previous run ended: its exit,
// its termination message and the end of its log. kubelet keeps the exit
// only while it keeps the dead container, which it may remove within
// seconds; the log outlives it in the node's kept copies (podLogDirs).
func lastRun(p corev1.Pod, c corev1.ContainerStatus) string {
	if c.RestartCount == 0 && c.LastTerminationState.Terminated == nil {
		return ""
	}
	out := "; kubelet keeps no record of the last run's exit (it removed the dead container already)"
	if end := c.LastTerminationState.Terminated; end != nil {
		out = fmt.Sprintf("; the last run (%s to %s) ended with exit code %d, reason %q, message %q",
			end.StartedAt.UTC().Format(time.TimeOnly), end.FinishedAt.UTC().Format(time.TimeOnly), end.ExitCode, end.Reason, end.Message)
	}
	return out + lastLog(p, c)
}

// podLogDirs are where a container's log is on the node the suite runs on:
// kubelet's directory, then the hard links the node makes of every log
// kubelet writes (keep_pod_logs in e2e/guest/lib.sh), which keep a log
// kubelet removed with its dead container.
var podLogDirs = []string{"/var/log/pods", "/var/log/kept-pods"}

// lastLog prints the end of the log of a container's run before its
// current one.
func lastLog(p corev1.Pod, c corev1.ContainerStatus) string {
	rel := fmt.Sprintf("%s_%s_%s/%s/%d.log", p.Namespace, p.Name, p.UID, c.Name, max(c.RestartCount-1, 0))
	for _, dir := range podLogDirs {
		data, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		return fmt.Sprintf("; the end of its log (%s):\n%s", filepath.Join(dir, rel), strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}
	return fmt.Sprintf("; its log %s is in none of %s on this node (the pod ran on %s)", rel, strings.Join(podLogDirs, ", "), p.Spec.NodeName)
}

// nodesWithDaemon counts the nodes that carry the label kubelet gives a
// node when zfs-csi registers there.
func (e *env) nodesWithDaemon(t *testing.T) int32 {
	t.Helper()
	nodes, err := e.cs.CoreV1().Nodes().List(ctx(), metav1.ListOptions{LabelSelector: topologyKey})
	if err != nil {
		t.Fatal(err)
	}
	return int32(len(nodes.Items))
}

// daemonSetReady waits for want pods of a DaemonSet, of its current spec
// (a rollout finished), to be scheduled and ready.
func (e *env) daemonSetReady(t *testing.T, ns, name string, want int32) {
	t.Helper()
	e2eutil.Eventually(t, podWait, "DaemonSet "+name+" to be ready", func() (bool, error) {
		ds, err := e.cs.AppsV1().DaemonSets(ns).Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := ds.Status
		return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled == want &&
				s.UpdatedNumberScheduled == want && s.NumberReady == want,
			fmt.Errorf("generation %d observed %d, desired %d, updated %d, ready %d, want %d; pods: %s",
				ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady, want, e.sidecarPods())
	})
}

func (e *env) sidecarPods() string {
	pods, err := e.cs.CoreV1().Pods(e.driverNS).List(ctx(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "%s %s %s; ", p.Name, p.Status.Phase, e.eventsIn(e.driverNS, p.Name))
	}
	return b.String()
}

// sidecarErrors are what a sidecar logs when the RBAC of the manifests lacks
// something or a watch keeps failing.
var sidecarErrors = regexp.MustCompile(`(?i)forbidden|failed to watch|failed to list|unauthorized`)

// sidecarLogsClean reads the sidecars' logs on the node (kubelet keeps them
// under /var/log/pods) and fails on every RBAC or watch error in them.
func (e *env) sidecarLogsClean(t *testing.T) {
	t.Helper()
	logs, _ := filepath.Glob("/var/log/pods/" + e.driverNS + "_" + sidecarsDS + "-*/*/*.log")
	if len(logs) == 0 {
		t.Fatal("no sidecar logs under /var/log/pods")
	}
	for _, f := range logs {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(string(data), "\n") {
			if sidecarErrors.MatchString(line) {
				if n < 5 {
					t.Errorf("%s: %s", f, line)
				}
				n++
			}
		}
		if n > 5 {
			t.Errorf("%s: %d more such lines", f, n-5)
		}
	}
}

// class is one of the shipped StorageClasses, as a pod uses it.
type class struct {
	name  string
	block bool
}

var classes = []class{{"zfs-dataset", false}, {"zfs-ext4", false}, {"zfs-block", true}}

func (c class) mode() corev1.PersistentVolumeMode {
	if c.block {
		return corev1.PersistentVolumeBlock
	}
	return corev1.PersistentVolumeFilesystem
}

// write is a pod script that stores token on the volume durably; read
// reports what is there as the pod's termination message.
func (c class) write(token string) string {
	if c.block {
		return fmt.Sprintf("set -e; printf '%%s\\n' %s | dd of=/dev/xvda bs=4096 conv=sync,fsync 2>/dev/null; echo written > /dev/termination-log", token)
	}
	return fmt.Sprintf("set -e; echo %s > /data/token; sync; echo written > /dev/termination-log", token)
}

func (c class) read() string {
	if c.block {
		return "set -e; head -n 1 /dev/xvda > /dev/termination-log"
	}
	return "set -e; cat /data/token > /dev/termination-log"
}

// 3. Each StorageClass: capacity published, a late-bound claim provisioned
// for its first pod, data kept across pods, everything gone after deletion.
func testVolumes(t *testing.T, e *env) {
	for _, c := range classes {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e.capacity(t, c.name)
			name := "vol-" + c.name
			token := "token-of-" + name
			e.pvc(t, name, c.name, "1Gi", c.mode(), "")
			e.pod(t, name+"-writer", name, c.block, c.write(token))
			e.finished(t, name+"-writer", podWait)
			pv := e.boundPV(t, name)
			ds := e.dataset(t, pv)
			e.checkPV(t, pv)
			wantType, sizeProp := "volume", "volsize"
			if c.name == "zfs-dataset" {
				wantType, sizeProp = "filesystem", "refquota"
			}
			props := e.props(t, ds, "type", sizeProp, "zfs.csi.dev:pvc-name", "zfs.csi.dev:pvc-namespace")
			if props[0] != wantType || props[1] != "1073741824" || props[2] != name || props[3] != e.ns {
				t.Errorf("%s: type, %s, pvc-name, pvc-namespace = %v; want %s, 1073741824, %s, %s", ds, sizeProp, props, wantType, name, e.ns)
			}
			if c.block {
				if bs := e.props(t, ds, "volblocksize")[0]; bs != "16384" {
					t.Errorf("%s: volblocksize %s, want the class's 16384", ds, bs)
				}
			}
			e.deletePod(t, name+"-writer")
			e.pod(t, name+"-reader", name, c.block, c.read())
			if got := e.finished(t, name+"-reader", podWait); got != token {
				t.Errorf("the second pod read %q, want %q", got, token)
			}
			e.deletePod(t, name+"-reader")
			e.deletePVC(t, name, ds)
		})
	}
}

// checkPV checks that the PV pins its pod to the volume's node.
func (e *env) checkPV(t *testing.T, name string) {
	t.Helper()
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) != 1 {
		t.Fatalf("PV %s has no node affinity: %+v", name, a)
	}
	term := a.Required.NodeSelectorTerms[0]
	if len(term.MatchExpressions) != 1 || term.MatchExpressions[0].Key != topologyKey ||
		len(term.MatchExpressions[0].Values) != 1 || term.MatchExpressions[0].Values[0] != e.node {
		t.Errorf("PV %s node affinity %+v, want %s in [%s]", name, term, topologyKey, e.node)
	}
}

// capacity waits for the provisioner to publish the node's capacity for a
// StorageClass, which the scheduler needs to place a late-bound claim.
func (e *env) capacity(t *testing.T, sc string) {
	t.Helper()
	e2eutil.Eventually(t, 3*time.Minute, "a CSIStorageCapacity for "+sc, func() (bool, error) {
		list, err := e.cs.StorageV1().CSIStorageCapacities(e.driverNS).List(ctx(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, c := range list.Items {
			seen = append(seen, fmt.Sprintf("%s:%v:%v", c.StorageClassName, c.Capacity, c.NodeTopology))
			if c.StorageClassName != sc || c.NodeTopology == nil || c.NodeTopology.MatchLabels[topologyKey] != e.node {
				continue
			}
			if c.Capacity == nil || c.Capacity.Sign() <= 0 {
				return false, fmt.Errorf("capacity of %s is %v", sc, c.Capacity)
			}
			return true, nil
		}
		return false, fmt.Errorf("published: %v", seen)
	})
}

// props reads ZFS properties of a dataset on the node.
func (e *env) props(t *testing.T, ds string, names ...string) []string {
	t.Helper()
	out := must(t, "zfs", "get", "-Hp", "-o", "value", strings.Join(names, ","), ds)
	return strings.Split(strings.TrimSpace(out), "\n")
}

// deletePVC deletes a claim and waits for its PV and its dataset to go.
func (e *env) deletePVC(t *testing.T, name, ds string) {
	t.Helper()
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if pv := c.Spec.VolumeName; pv != "" {
		e.gonePV(t, pv)
	}
	if ds != "" {
		e2eutil.Eventually(t, 3*time.Minute, "dataset "+ds+" to be destroyed", func() (bool, error) {
			out, err := run("zfs", "list", "-H", "-o", "name", ds)
			return err != nil && strings.Contains(out, "does not exist"), err
		})
	}
}
