package suite

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// latencyClaims is how many claims (each with a pod) the Latency scenario
// makes per StorageClass, all at once, as a user applying a batch would.
// The pods share the one node whose daemon log the scenario reads. Twenty
// was the batch on v1.34.4 (p50 2m32s to Running); on the same TCG node a
// v1.37.2 kubelet over containerd 1.6.20 had 4 of 20 running after 13
// minutes, its sandboxes failing and retried ("namespace path: lstat
// /proc/0/ns/ipc"), while the Volumes scenario's three pods at once ran in
// minutes. Six keeps the batch concurrent and inside what that node starts.
const latencyClaims = 6

// latencySnapshots is how many of them it snapshots and restores.
const latencySnapshots = 3

// sample is one thing a user waited for: how long, and how much of it the
// driver spent in the calls that served it (by method, from its log).
type sample struct {
	wait   time.Duration
	driver map[string]time.Duration
}

// 10. What a Kubernetes user waits for: claim and pod
// created → pod Running, latencyClaims at once per StorageClass; VolumeSnapshot
// created → readyToUse; restore claim (and pod) created → pod Running. Beside
// each, the share of the wait spent inside the driver's calls, from the
// daemon's log (one JSON line per call with its duration). The table goes to
// the log and to $ZFS_CSI_E2E_RESULTS/latency.txt; it asserts no time.
func testLatency(t *testing.T, e *env) {
	since := time.Now()
	var rows []string
	for _, c := range classes {
		claims := make([]string, latencyClaims)
		for i := range claims {
			claims[i] = fmt.Sprintf("lat-%s-%02d", strings.TrimPrefix(c.name, "zfs-"), i)
		}
		// A scenario that fails half-way leaves nothing to the next ones.
		t.Cleanup(func() { e.leftovers(claims) })
		created := map[string]time.Time{}
		for _, name := range claims {
			created[name] = time.Now()
			e.pvc(t, name, c.name, "1Gi", c.mode(), "")
			e.pod(t, name, name, c.block, "sleep 100000")
		}
		running := e.allRunning(t, created, 15*time.Minute)

		snaps := claims[:latencySnapshots]
		snapCreated := map[string]time.Time{}
		for _, name := range snaps {
			snapCreated["snap-"+name] = time.Now()
			e.requestSnapshot(t, "snap-"+name, name)
		}
		ready := e.allReady(t, snapCreated, 10*time.Minute)

		restoreCreated := map[string]time.Time{}
		for _, name := range snaps {
			restoreCreated["rst-"+name] = time.Now()
			e.pvc(t, "rst-"+name, c.name, "1Gi", c.mode(), "snap:snap-"+name)
			e.pod(t, "rst-"+name, "rst-"+name, c.block, "sleep 100000")
		}
		restored := e.allRunning(t, restoreCreated, 15*time.Minute)

		calls := driverCalls(t, since)
		rows = append(rows,
			row(c.name+" claim+pod → Running", e.claimSamples(t, created, running, calls)),
			row(c.name+" VolumeSnapshot → readyToUse", e.snapshotSamples(t, snapCreated, ready, calls)),
			row(c.name+" restore claim+pod → Running", e.claimSamples(t, restoreCreated, restored, calls)))
		// Each class's rows as soon as they are known: a later class that
		// fails keeps what the earlier ones measured.
		t.Logf("%s:\n%s", c.name, strings.Join(rows[len(rows)-3:], ""))

		restores := slices.Collect(maps.Keys(restoreCreated))
		e.deleteAll(t, restores)
		for name := range snapCreated {
			e.deleteSnapshot(t, name)
		}
		e.deleteAll(t, claims)
	}
	table := fmt.Sprintf("%-46s %3s %8s %8s %7s  %s\n", "what (n at once)", "n", "p50", "p95", "driver", "driver's calls, p50 each") +
		strings.Join(rows, "")
	t.Logf("what a user waits for, on TCG nodes:\n%s", table)
	if dir := os.Getenv("ZFS_CSI_E2E_RESULTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "latency.txt"), []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// allRunning waits for the pods (named like their claims) to run and returns
// when each was first seen running, polling them all every 250 ms. Past the
// timeout it fails the test and returns those that ran.
func (e *env) allRunning(t *testing.T, pods map[string]time.Time, timeout time.Duration) map[string]time.Time {
	t.Helper()
	seen := map[string]time.Time{}
	deadline := time.Now().Add(timeout)
	for len(seen) < len(pods) {
		list, err := e.cs.CoreV1().Pods(e.ns).List(ctx(), metav1.ListOptions{})
		now := time.Now()
		if err == nil {
			for i := range list.Items {
				p := &list.Items[i]
				if _, want := pods[p.Name]; !want || !seen[p.Name].IsZero() || e.restartIfNeverStarted(t, p) {
					continue
				}
				if p.Status.Phase == corev1.PodRunning {
					seen[p.Name] = now
				}
			}
		}
		if now.After(deadline) {
			waiting := ""
			for name := range pods {
				if seen[name].IsZero() {
					waiting = name + ": " + e.events(name)
					break
				}
			}
			// The scenario fails, but the table keeps what those that ran
			// measured.
			t.Errorf("after %s, %d of %d pods run (last error: %v); one waiting, %s", timeout, len(seen), len(pods), err, waiting)
			return seen
		}
		time.Sleep(250 * time.Millisecond)
	}
	return seen
}

// deleteAll deletes the pods and the claims of these names (each pod uses
// the claim of its name), all at once, and waits for the claims' PVs to go:
// 3 minutes and 45 s more per PV, as kubelet tears down a batch of pods one
// after another on a TCG node before any PV can go (v1.37.2's kubelet
// unpublished 20 ext4 claims at about two a minute, 11 min in all; 15 s a PV
// had been enough on v1.34.4's).
func (e *env) deleteAll(t *testing.T, names []string) {
	t.Helper()
	pvs := map[string]bool{}
	for _, name := range names {
		if c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx(), name, metav1.GetOptions{}); err == nil && c.Spec.VolumeName != "" {
			pvs[c.Spec.VolumeName] = true
		}
		if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx(), name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
		if err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx(), name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
	timeout := 3*time.Minute + time.Duration(len(pvs))*45*time.Second
	start, n := time.Now(), len(pvs)
	defer func() {
		t.Logf("%d PVs gone %s after their claims were deleted", n-len(pvs), time.Since(start).Round(time.Second))
	}()
	e2eutil.Eventually(t, timeout, fmt.Sprintf("%d PVs to go", len(pvs)), func() (bool, error) {
		for pv := range pvs {
			if _, err := e.cs.CoreV1().PersistentVolumes().Get(ctx(), pv, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("PV %s: %v; %s", pv, err, e.eventsIn("", pv))
			}
			delete(pvs, pv)
		}
		return true, nil
	})
}

// leftovers deletes, without waiting or failing, what the scenario made for
// these claims and is still there: restore pods and claims, snapshots, pods
// and claims (each pod is named like its claim).
func (e *env) leftovers(claims []string) {
	for _, name := range claims {
		e.removeQuietly([]string{"rst-" + name, name}, []string{"rst-" + name}, "snap-"+name, name)
	}
}

// removeQuietly deletes, without waiting or failing, pods, then claims
// made from a snapshot, the snapshot, and its source claim: what a scenario
// that failed half-way may have left.
func (e *env) removeQuietly(pods, restores []string, snapshot, source string) {
	for _, pod := range pods {
		_ = e.cs.CoreV1().Pods(e.ns).Delete(ctx(), pod, metav1.DeleteOptions{})
	}
	for _, claim := range restores {
		_ = e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx(), claim, metav1.DeleteOptions{})
	}
	_ = e.dyn.Resource(snapshotGVR).Namespace(e.ns).Delete(ctx(), snapshot, metav1.DeleteOptions{})
	_ = e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx(), source, metav1.DeleteOptions{})
}

// volumesGoneQuietly waits, without failing, until no PV is bound to the
// claims named, or until the timeout: for a cleanup whose next step removes
// something their deletion needs.
func (e *env) volumesGoneQuietly(claims []string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pvs, err := e.cs.CoreV1().PersistentVolumes().List(ctx(), metav1.ListOptions{})
		if err == nil && !slices.ContainsFunc(pvs.Items, func(pv corev1.PersistentVolume) bool {
			ref := pv.Spec.ClaimRef
			return ref != nil && ref.Namespace == e.ns && slices.Contains(claims, ref.Name)
		}) {
			return
		}
		time.Sleep(2 * time.Second)
	}
}

// allReady waits for the VolumeSnapshots to be readyToUse and returns when
// each was first seen ready.
func (e *env) allReady(t *testing.T, snaps map[string]time.Time, timeout time.Duration) map[string]time.Time {
	t.Helper()
	seen := map[string]time.Time{}
	deadline := time.Now().Add(timeout)
	for len(seen) < len(snaps) {
		list, err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).List(ctx(), metav1.ListOptions{})
		now := time.Now()
		if err == nil {
			for _, s := range list.Items {
				ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse")
				if _, want := snaps[s.GetName()]; want && ready && seen[s.GetName()].IsZero() {
					seen[s.GetName()] = now
				}
			}
		}
		if now.After(deadline) {
			t.Errorf("after %s, %d of %d snapshots are ready (last error: %v)", timeout, len(seen), len(snaps), err)
			return seen
		}
		time.Sleep(250 * time.Millisecond)
	}
	return seen
}

// call is one line of the daemon's log about a CSI call.
type call struct {
	Method         string  `json:"method"`
	Duration       float64 `json:"duration"` // milliseconds (zerolog's Dur)
	Name           string  `json:"name"`
	VolumeID       string  `json:"volume_id"`
	SourceVolumeID string  `json:"source_volume_id"`
}

func (c call) took() time.Duration { return time.Duration(c.Duration * float64(time.Millisecond)) }

func jsonUnmarshal(line string, c *call) error { return json.Unmarshal([]byte(line), c) }

// driverCalls reads the calls the daemon on this node logged since then.
func driverCalls(t *testing.T, since time.Time) []call {
	t.Helper()
	out := must(t, "journalctl", "-u", "zfs-csi", "-o", "cat", "--no-pager", "--since", since.Add(-time.Second).Format("2006-01-02 15:04:05"))
	var calls []call
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c call
		if jsonUnmarshal(sc.Text(), &c) == nil && c.Method != "" {
			calls = append(calls, c)
		}
	}
	return calls
}

// claimSamples: for each claim, the wait from its creation to its pod
// running, and the driver's CreateVolume (by the PV's name), NodeStageVolume
// and NodePublishVolume (by its handle) calls for it.
func (e *env) claimSamples(t *testing.T, created, done map[string]time.Time, calls []call) []sample {
	t.Helper()
	var samples []sample
	for name, start := range created {
		if _, ok := done[name]; !ok {
			continue // never ran: not a sample (allRunning failed the scenario)
		}
		c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx(), c.Spec.VolumeName, metav1.GetOptions{})
		if err != nil || pv.Spec.CSI == nil {
			t.Fatalf("PV of %s: %v", name, err)
		}
		s := sample{wait: done[name].Sub(start), driver: map[string]time.Duration{}}
		for _, k := range calls {
			switch {
			case k.Method == "CreateVolume" && k.Name == pv.Name,
				(k.Method == "NodeStageVolume" || k.Method == "NodePublishVolume") && k.VolumeID == pv.Spec.CSI.VolumeHandle:
				s.driver[k.Method] += k.took()
			}
		}
		samples = append(samples, s)
	}
	return samples
}

// snapshotSamples: for each VolumeSnapshot, the wait from its creation to
// readyToUse, and the driver's CreateSnapshot calls for it (the snapshotter
// names the CSI snapshot snapshot-<VolumeSnapshot's UID>).
func (e *env) snapshotSamples(t *testing.T, created, done map[string]time.Time, calls []call) []sample {
	t.Helper()
	var samples []sample
	for name, start := range created {
		if _, ok := done[name]; !ok {
			continue // never ready: not a sample (allReady failed the scenario)
		}
		s, err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		x := sample{wait: done[name].Sub(start), driver: map[string]time.Duration{}}
		for _, k := range calls {
			if k.Method == "CreateSnapshot" && k.Name == "snapshot-"+string(s.GetUID()) {
				x.driver[k.Method] += k.took()
			}
		}
		samples = append(samples, x)
	}
	return samples
}

// row formats one line of the table: p50 and p95 of the waits, the driver's
// share of all the waits together, and the p50 of each method's time.
func row(what string, samples []sample) string {
	var waits []time.Duration
	var total, inDriver time.Duration
	byMethod := map[string][]time.Duration{}
	for _, s := range samples {
		waits = append(waits, s.wait)
		total += s.wait
		for m, d := range s.driver {
			inDriver += d
			byMethod[m] = append(byMethod[m], d)
		}
	}
	methods := make([]string, 0, len(byMethod))
	for m := range byMethod {
		methods = append(methods, m)
	}
	slices.Sort(methods)
	var each []string
	for _, m := range methods {
		each = append(each, fmt.Sprintf("%s %s", m, percentile(byMethod[m], 50).Round(time.Millisecond)))
	}
	share := 0.0
	if total > 0 {
		share = 100 * float64(inDriver) / float64(total)
	}
	return fmt.Sprintf("%-46s %3d %8s %8s %6.1f%%  %s\n", what, len(samples),
		percentile(waits, 50).Round(100*time.Millisecond), percentile(waits, 95).Round(100*time.Millisecond), share, strings.Join(each, ", "))
}

// percentile is the nearest-rank percentile p of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}
