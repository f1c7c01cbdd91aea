package suite

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// AcrossNodes: with the daemons' peer channel, a claim restored
// from a snapshot of this node's volume, whose pod is pinned to the other
// node, is made there: the other node's provisioner asks its daemon, which
// pulls the snapshot over the channel (CreateVolume answers ABORTED with the
// progress until the stream is whole; the provisioner retries). The data
// arrives byte for byte: 8 MiB of random data, checksummed where it was
// written and where it was read. Once per kind of volume: a dataset, an
// ext4 zvol, a raw block zvol.
func testAcrossNodes(t *testing.T, e *env) {
	peer := os.Getenv("ZFS_CSI_E2E_PEER_NODE")
	if peer == "" || !peerChannel(t) {
		t.Fatalf("needs the second node (%q) and the daemons' peer channel", peer)
	}
	for _, c := range classes {
		t.Run(c.name, func(t *testing.T) {
			src := "across-" + c.name
			restore := src + "-on-" + peer
			// A failure half-way leaves nothing to the next scenarios.
			t.Cleanup(func() {
				e.removeQuietly([]string{restore + "-reader", src + "-writer"}, []string{restore}, src+"-snap", src)
			})
			e.pvc(t, src, c.name, "1Gi", c.mode(), "")
			e.pod(t, src+"-writer", src, c.block, c.writeRandom())
			written := e.finished(t, src+"-writer", podWait)
			e.deletePod(t, src+"-writer")
			ds := e.dataset(t, e.boundPV(t, src))
			snap := src + "-snap"
			e.snapshot(t, snap, src)

			e.pvc(t, restore, c.name, "1Gi", c.mode(), "snap:"+snap)
			start := time.Now()
			e.podOn(t, map[string]string{"kubernetes.io/hostname": peer}, restore+"-reader", restore, c.block, c.readRandom())
			read := e.finished(t, restore+"-reader", podWait+pullWait)
			if read != written || len(written) != 64 {
				t.Errorf("the restore on %s reads sha256 %q, the source was written with %q", peer, read, written)
			}
			pv := e.boundPV(t, restore)
			e.checkPVNode(t, pv, peer)
			handle := e.volumeHandle(t, pv)
			if !strings.HasPrefix(handle, peer+":") {
				t.Errorf("the restore's volume is %s, not one of %s", handle, peer)
			}
			t.Logf("%s: the restore of %s's snapshot ran on %s after %s (volume %s); its claim's events: %s",
				c.name, e.node, peer, time.Since(start).Round(time.Second), handle, e.events(restore))
			e.deletePod(t, restore+"-reader")
			e.deletePVC(t, restore, "")
			e.peerGone(t, strings.TrimPrefix(handle, peer+":"))
			e.deleteSnapshot(t, snap)
			e.deletePVC(t, src, ds)
		})
	}
}

// writeRandom is a pod script that writes 8 MiB of random data on the
// volume durably and reports its sha256 as the termination message;
// readRandom reports the sha256 of what is there.
func (c class) writeRandom() string {
	if c.block {
		return "set -e; dd if=/dev/urandom of=/dev/xvda bs=1M count=8 conv=fsync 2>/dev/null; " +
			"head -c 8388608 /dev/xvda | sha256sum | cut -d' ' -f1 > /dev/termination-log"
	}
	return "set -e; dd if=/dev/urandom of=/data/blob bs=1M count=8 2>/dev/null; sync; sha256sum /data/blob | cut -d' ' -f1 > /dev/termination-log"
}

func (c class) readRandom() string {
	if c.block {
		return "set -e; head -c 8388608 /dev/xvda | sha256sum | cut -d' ' -f1 > /dev/termination-log"
	}
	return "set -e; sha256sum /data/blob | cut -d' ' -f1 > /dev/termination-log"
}

// volumeHandle is a PV's CSI volume ID.
func (e *env) volumeHandle(t *testing.T, pv string) string {
	t.Helper()
	v, err := e.cs.CoreV1().PersistentVolumes().Get(ctx(), pv, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Spec.CSI == nil {
		t.Fatalf("PV %s is not a CSI volume", pv)
	}
	return v.Spec.CSI.VolumeHandle
}

// peerGone waits until the other node's published `zfs list` no longer
// shows ds.
func (e *env) peerGone(t *testing.T, ds string) {
	t.Helper()
	e2eutil.Eventually(t, 3*time.Minute, fmt.Sprintf("%s gone from the other node", ds), func() (bool, error) {
		data, err := os.ReadFile(os.Getenv("ZFS_CSI_E2E_PEER_ZFS"))
		if err != nil {
			return false, err
		}
		for _, name := range strings.Fields(string(data)) {
			if name == ds {
				return false, fmt.Errorf("still listed")
			}
		}
		return true, nil
	})
}
