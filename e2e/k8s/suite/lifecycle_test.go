package suite

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

const gib = int64(1) << 30

// 4. A VolumeSnapshot is ready with the source's size; a larger claim restored
// from it and a claim cloned from the source both hold the data, and the
// restored one's pod sees the larger filesystem.
func testSnapshots(t *testing.T, e *env) {
	for _, c := range classes[:2] { // the filesystems; raw block has nothing to df
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			src := "snap-src-" + c.name
			token := "token-of-" + src
			e.written(t, src, c, token)
			srcDS := e.dataset(t, e.boundPV(t, src))

			snap := src + "-snap"
			if size := e.snapshot(t, snap, src); size.Value() != gib {
				t.Errorf("restoreSize %s, want 1Gi", size.String())
			}
			restore, clone := src+"-restore", src+"-clone"
			e.pvc(t, restore, c.name, "2Gi", c.mode(), "snap:"+snap)
			e.pvc(t, clone, c.name, "1Gi", c.mode(), "pvc:"+src)
			// -P: busybox df wraps a long device name (a dataset's) onto
			// a line of its own otherwise.
			readSize := "set -e; cat /data/token > /dev/termination-log; df -P -k /data | tail -n 1 | awk '{print $2}' >> /dev/termination-log"
			e.pod(t, restore+"-reader", restore, false, readSize)
			e.pod(t, clone+"-reader", clone, false, c.read())
			got := strings.Fields(e.finished(t, restore+"-reader", podWait))
			if len(got) != 2 || got[0] != token {
				t.Errorf("the restored claim holds %q, want %q and its size", got, token)
			} else if kib, _ := strconv.ParseInt(got[1], 10, 64); kib*1024 < gib*3/2 {
				t.Errorf("the pod of the 2Gi restore sees a filesystem of %d KiB: not grown beyond the 1Gi snapshot", kib)
			}
			if got := e.finished(t, clone+"-reader", podWait); got != token {
				t.Errorf("the clone holds %q, want %q", got, token)
			}
			for _, claim := range []string{restore, clone} {
				e.deletePod(t, claim+"-reader")
				e.deletePVC(t, claim, "")
			}
			e.deleteSnapshot(t, snap)
			e.deletePVC(t, src, srcDS)
		})
	}
}

// snapshot takes a VolumeSnapshot of claim, waits for it to be ready and
// returns its restoreSize.
func (e *env) snapshot(t *testing.T, name, claim string) resource.Quantity {
	t.Helper()
	e.requestSnapshot(t, name, claim)
	return e.snapshotReady(t, name)
}

// requestSnapshot creates a VolumeSnapshot of claim in the shipped class.
func (e *env) requestSnapshot(t *testing.T, name, claim string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": name, "namespace": e.ns},
		"spec": map[string]any{
			"volumeSnapshotClassName": "zfs-snapshot",
			"source":                  map[string]any{"persistentVolumeClaimName": claim},
		},
	}}
	if _, err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).Create(ctx(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.removedIfFailed(t, func() error {
		return e.dyn.Resource(snapshotGVR).Namespace(e.ns).Delete(ctx(), name, metav1.DeleteOptions{})
	})
}

// snapshotReady waits for a VolumeSnapshot to be ready and returns its
// restoreSize.
func (e *env) snapshotReady(t *testing.T, name string) resource.Quantity {
	t.Helper()
	var size string
	e2eutil.Eventually(t, 3*time.Minute, "VolumeSnapshot "+name+" to be ready", func() (bool, error) {
		s, err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse")
		size, _, _ = unstructured.NestedString(s.Object, "status", "restoreSize")
		msg, _, _ := unstructured.NestedString(s.Object, "status", "error", "message")
		return ready, fmt.Errorf("readyToUse %v, error %q; %s", ready, msg, e.events(name))
	})
	q, err := resource.ParseQuantity(size)
	if err != nil {
		t.Fatalf("restoreSize %q: %v", size, err)
	}
	return q
}

// deleteSnapshot deletes a VolumeSnapshot and waits for its content to go.
func (e *env) deleteSnapshot(t *testing.T, name string) {
	t.Helper()
	s, err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	content, _, _ := unstructured.NestedString(s.Object, "status", "boundVolumeSnapshotContentName")
	if err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).Delete(ctx(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e2eutil.Eventually(t, 3*time.Minute, "VolumeSnapshotContent "+content+" to go", func() (bool, error) {
		_, err := e.dyn.Resource(contentGVR).Get(ctx(), content, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// 5. Online expansion through the shipped resizer: the running pod's volume
// grows, without the pod restarting.
func testExpansion(t *testing.T, e *env) {
	for _, c := range classes {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			name := "grow-" + c.name
			e.pvc(t, name, c.name, "1Gi", c.mode(), "")
			e.pod(t, name+"-user", name, c.block, "trap 'exit 0' TERM; while true; do sleep 1; done")
			p := e.running(t, name+"-user", podWait)
			pv := e.boundPV(t, name)
			ds := e.dataset(t, pv)
			before := e.seenSize(t, p, pv, ds, c.block)
			patch := []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
			if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(ctx(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			e2eutil.Eventually(t, podWait, "the claim and the pod's volume to grow to 2Gi", func() (bool, error) {
				claim, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx(), name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				got := claim.Status.Capacity[corev1.ResourceStorage]
				seen := e.seenSize(t, p, pv, ds, c.block)
				return got.Value() == 2*gib && seen >= before+gib*3/4,
					fmt.Errorf("claim capacity %s, conditions %v, the pod sees %d bytes (was %d); %s",
						got.String(), claim.Status.Conditions, seen, before, e.events(name))
			})
			now, err := e.cs.CoreV1().Pods(e.ns).Get(ctx(), p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if now.UID != p.UID || now.Status.Phase != corev1.PodRunning || now.Status.ContainerStatuses[0].RestartCount != 0 {
				t.Errorf("the pod was restarted to grow its volume: phase %s, %d restarts", now.Status.Phase, now.Status.ContainerStatuses[0].RestartCount)
			}
			e.deletePod(t, p.Name)
			e.deletePVC(t, name, ds)
		})
	}
}

// seenSize is the size of the volume as the pod sees it: its filesystem's
// size at the pod's mount (statfs on the node), or the block device's.
func (e *env) seenSize(t *testing.T, p *corev1.Pod, pv, ds string, block bool) int64 {
	t.Helper()
	if block {
		out := must(t, "blockdev", "--getsize64", "/dev/zvol/"+ds)
		n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mountOf(p, pv), &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * st.Bsize
}

// mountOf is where kubelet mounts a CSI volume for a pod.
func mountOf(p *corev1.Pod, pv string) string {
	return fmt.Sprintf("/var/lib/kubelet/pods/%s/volumes/kubernetes.io~csi/%s/mount", p.UID, pv)
}

// 6. Deleting a claim that has a snapshot: the PV goes at once, the dataset
// stays hidden (the snapshot still restores) and is destroyed when the
// snapshot goes.
func testDeleteWithSnapshot(t *testing.T, e *env) {
	c := classes[0]
	name := "kept"
	token := "token-of-" + name
	e.written(t, name, c, token)
	ds := e.dataset(t, e.boundPV(t, name))
	snap := name + "-snap"
	e.snapshot(t, snap, name)
	e.deletePVC(t, name, "")
	if got := e.props(t, ds, "zfs.csi.dev:deleted", "readonly"); got[0] != "true" || got[1] != "on" {
		t.Errorf("%s after its PV went: deleted, readonly = %v; want true, on (hidden, kept for its snapshot)", ds, got)
	}
	restore := name + "-restore"
	e.pvc(t, restore, c.name, "1Gi", c.mode(), "snap:"+snap)
	e.pod(t, restore+"-reader", restore, false, c.read())
	if got := e.finished(t, restore+"-reader", podWait); got != token {
		t.Errorf("restored from the snapshot of a deleted claim: %q, want %q", got, token)
	}
	e.deletePod(t, restore+"-reader")
	e.deletePVC(t, restore, "")
	e.deleteSnapshot(t, snap)
	e.reaped(t, ds)
}

// reaped waits for the reaper to destroy a deleted volume kept for its
// snapshots, once they are gone.
func (e *env) reaped(t *testing.T, ds string) {
	t.Helper()
	e2eutil.Eventually(t, 4*time.Minute, "the reaper to destroy "+ds, func() (bool, error) {
		out, err := run("zfs", "list", "-H", "-t", "all", "-o", "name", "-r", ds)
		return err != nil && strings.Contains(out, "does not exist"), fmt.Errorf("still there: %s", out)
	})
}

// 7. Restarting the daemon under writing pods: no write fails, no mount is
// lost, and the restarted daemon serves new claims.
func testDaemonRestart(t *testing.T, e *env) {
	type user struct {
		pod *corev1.Pod
		pv  string
	}
	var users []user
	for _, c := range classes[:2] {
		name := "busy-" + c.name
		e.pvc(t, name, c.name, "1Gi", c.mode(), "")
		// set -e: a failed write ends the pod as Failed (it never restarts).
		e.pod(t, name+"-writer", name, false, "set -e; trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo $i >> /data/log; sleep 0.2; done")
	}
	for _, c := range classes[:2] {
		name := "busy-" + c.name
		users = append(users, user{e.running(t, name+"-writer", podWait), e.boundPV(t, name)})
	}
	lines := func(u user) int {
		out, err := run("wc", "-l", mountOf(u.pod, u.pv)+"/log")
		if err != nil {
			t.Fatalf("pod %s: %v", u.pod.Name, err)
		}
		n, _ := strconv.Atoi(strings.Fields(out)[0])
		return n
	}
	before := make([]int, len(users))
	for i, u := range users {
		before[i] = lines(u)
	}
	registered := registrations(t)
	must(t, "systemctl", "restart", "zfs-csi")
	e.registered(t, registered)
	time.Sleep(15 * time.Second)
	mounts := must(t, "cat", "/proc/self/mountinfo")
	for i, u := range users {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx(), u.pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s after the restart: %s, %d restarts (%s)", p.Name, p.Status.Phase, p.Status.ContainerStatuses[0].RestartCount, e.events(p.Name))
			continue
		}
		if !strings.Contains(mounts, " "+mountOf(u.pod, u.pv)+" ") {
			t.Errorf("pod %s lost its mount %s", p.Name, mountOf(u.pod, u.pv))
		}
		if after := lines(u); after <= before[i] {
			t.Errorf("pod %s stopped writing: %d lines before the restart, %d after", p.Name, before[i], after)
		}
	}
	// The sidecars reconnect to the restarted daemon: a new claim provisions.
	c := classes[0]
	e.written(t, "after-restart", c, "x")
	e.deletePVC(t, "after-restart", "")
	for _, u := range users {
		e.deletePod(t, u.pod.Name)
		e.deletePVC(t, strings.TrimSuffix(u.pod.Name, "-writer"), "")
	}
}

// 10. Nothing is left behind, on either node: every dataset, snapshot and PV
// the scenarios (and a conformance run before them) made is gone, and the
// sidecars logged no RBAC or watch error all along.
func testNothingLeft(t *testing.T, e *env) {
	parent := e.pool + "/csi"
	lists := map[string]func() (string, error){
		e.node: func() (string, error) { return run("zfs", "list", "-H", "-t", "all", "-o", "name", "-r", e.pool) },
	}
	if peer := os.Getenv("ZFS_CSI_E2E_PEER_NODE"); peer != "" {
		lists[peer] = func() (string, error) { // the peer's own zfs list, published every few seconds
			data, err := os.ReadFile(os.Getenv("ZFS_CSI_E2E_PEER_ZFS"))
			return string(data), err
		}
	}
	for node, list := range lists {
		e2eutil.Eventually(t, 4*time.Minute, "nothing under "+parent+" on "+node, func() (bool, error) {
			out, err := list()
			if err != nil {
				return false, err
			}
			left := leftUnder(parent, out)
			return len(left) == 0, fmt.Errorf("left: %v", left)
		})
	}
	pvs, err := e.cs.CoreV1().PersistentVolumes().List(ctx(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pv := range pvs.Items {
		t.Errorf("PV %s left (%s, claim %v)", pv.Name, pv.Status.Phase, pv.Spec.ClaimRef)
	}
	e.sidecarLogsClean(t)
}

// leftUnder is what a zfs list of names shows below parent, less the
// container of pulls (controller.IncomingContainer: a node that received a
// volume from the other keeps it, docs/across-nodes.md); what is in it counts.
func leftUnder(parent, list string) []string {
	var left []string
	for _, name := range strings.Fields(list) {
		if strings.HasPrefix(name, parent+"/") && name != parent+"/_incoming" {
			left = append(left, name)
		}
	}
	return left
}

// written makes a 1Gi claim of class c, fills it with token by a pod that
// runs to completion, and deletes that pod.
func (e *env) written(t *testing.T, claim string, c class, token string) {
	t.Helper()
	e.pvc(t, claim, c.name, "1Gi", c.mode(), "")
	e.pod(t, claim+"-writer", claim, c.block, c.write(token))
	e.finished(t, claim+"-writer", podWait)
	e.deletePod(t, claim+"-writer")
}
