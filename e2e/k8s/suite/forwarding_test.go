package suite

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// resizerLease is the lease the csi-resizers of the driver elect their
// leader by (external-resizer: "external-resizer-" and the driver name with
// its dots as dashes).
const resizerLease = "external-resizer-zfs-csi-dev"

// Forwarding: with the daemons' peer channel (suite.sh
// configures it on both nodes) the one leader-elected csi-resizer expands
// and modifies volumes of any node through its own node's daemon. The
// leader is moved off this node first, so each call is one the other
// node's daemon forwards here; the claim is used by no pod, so the growth
// is ControllerExpandVolume's, not kubelet's (trivial mode would leave the
// claim at its old size with FileSystemResizePending).
func testForwarding(t *testing.T, e *env) {
	peer := os.Getenv("ZFS_CSI_E2E_PEER_NODE")
	if peer == "" {
		t.Fatal("ZFS_CSI_E2E_PEER_NODE is not set: forwarding needs the cluster's second node")
	}
	e.resizerLeaderOffThisNode(t)
	since := time.Now().Add(-time.Second)
	name := "forwarded"
	e.pvc(t, name, "zfs-dataset", "1Gi", corev1.PersistentVolumeFilesystem, "")
	e.pod(t, name+"-first", name, false, "echo forwarded > /data/token")
	e.finished(t, name+"-first", podWait)
	e.deletePod(t, name+"-first")
	pv := e.boundPV(t, name)
	ds := e.dataset(t, pv)

	t.Run("an unused claim grows at once", func(t *testing.T) {
		patch := []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(ctx(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e2eutil.Eventually(t, 5*time.Minute, "the unused claim to grow to 2Gi", func() (bool, error) {
			claim, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx(), name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got := claim.Status.Capacity[corev1.ResourceStorage]
			return got.Value() == 2*gib, fmt.Errorf("capacity %s, conditions %v; %s", got.String(), claim.Status.Conditions, e.events(name))
		})
		if q := strings.TrimSpace(must(t, "zfs", "get", "-Hp", "-o", "value", "refquota", ds)); q != fmt.Sprint(2*gib) {
			t.Errorf("%s has refquota %s, want %d", ds, q, 2*gib)
		}
	})

	t.Run("a VolumeAttributesClass given after creation is applied", func(t *testing.T) {
		class := &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: "forwarded-zstd"},
			DriverName: "zfs.csi.dev", Parameters: map[string]string{"zfs.compression": "zstd"}}
		if _, err := e.cs.StorageV1().VolumeAttributesClasses().Create(ctx(), class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.cs.StorageV1().VolumeAttributesClasses().Delete(ctx(), class.Name, metav1.DeleteOptions{})
		})
		patch := []byte(`{"spec":{"volumeAttributesClassName":"forwarded-zstd"}}`)
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(ctx(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e2eutil.Eventually(t, 5*time.Minute, "the claim's class to be forwarded-zstd", func() (bool, error) {
			claim, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx(), name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			current := claim.Status.CurrentVolumeAttributesClassName
			return current != nil && *current == class.Name, fmt.Errorf("current class %v, status %+v; %s",
				current, claim.Status.ModifyVolumeStatus, e.events(name))
		})
		if got := strings.TrimSpace(must(t, "zfs", "get", "-H", "-o", "value", "compression", ds)); got != "zstd" {
			t.Errorf("%s has compression %s, want zstd", ds, got)
		}
	})

	// This node's daemon answered the other node's daemon over the peer
	// channel (its log line names the calling node from its certificate).
	journal := must(t, "journalctl", "-u", "zfs-csi", "-o", "cat", "--no-pager", "--since", fmt.Sprintf("@%d", since.Unix()))
	for _, method := range []string{"ControllerExpandVolume", "ControllerModifyVolume"} {
		seen := false
		for _, line := range strings.Split(journal, "\n") {
			if strings.Contains(line, `"caller":"`+peer+`"`) && strings.Contains(line, "/csi.v1.Controller/"+method) {
				seen = true
				t.Log(line)
				break
			}
		}
		if !seen {
			t.Errorf("no %s from %s over the peer channel in this node's log since %s", method, peer, since.Format(time.TimeOnly))
		}
	}
	e.deletePVC(t, name, ds)
}

// resizerLeaderOffThisNode makes a csi-resizer on another node the leader:
// while this node's holds the lease, its sidecar pod is deleted (the
// DaemonSet starts another), until the lease names another node's pod.
func (e *env) resizerLeaderOffThisNode(t *testing.T) {
	t.Helper()
	e2eutil.Eventually(t, 5*time.Minute, "the resizer's leader on another node than "+e.node, func() (bool, error) {
		lease, err := e.cs.CoordinationV1().Leases(e.driverNS).Get(ctx(), resizerLease, metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			return false, fmt.Errorf("lease %s: %v", resizerLease, err)
		}
		holder, err := e.cs.CoreV1().Pods(e.driverNS).Get(ctx(), *lease.Spec.HolderIdentity, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the lease names %s, which is gone", *lease.Spec.HolderIdentity)
		}
		if err != nil {
			return false, err
		}
		if holder.Spec.NodeName != e.node {
			t.Logf("the resizer's leader is %s on %s", holder.Name, holder.Spec.NodeName)
			return true, nil
		}
		if holder.DeletionTimestamp == nil {
			if err := e.cs.CoreV1().Pods(e.driverNS).Delete(ctx(), holder.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return false, fmt.Errorf("the leader %s is on %s", holder.Name, e.node)
	})
}
