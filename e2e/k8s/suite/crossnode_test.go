package suite

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// peerCA is the CA file of this node's peer channel (e2e/guest/k8s/suite.sh).
const peerCA = "/etc/zfs-csi/peer/ca.pem"

// needPeer is the other node's name, for scenarios that need the daemons'
// peer channel.
func needPeer(t *testing.T) string {
	t.Helper()
	peer := os.Getenv("ZFS_CSI_E2E_PEER_NODE")
	if peer == "" || !peerChannel(t) {
		t.Fatalf("needs the second node (%q) and the daemons' peer channel", peer)
	}
	return peer
}

// TenantMoveRefused: a tenant's StorageClass with sourceMode=move-final,
// cloning a claim of this node, is refused: moves are the operator's
// (zfs-csi ctl on the host), never a parameter a CO caller sets. The source
// stays live and unmarked, its data there, and the other node received
// nothing. The class binds at once: with late binding the scheduler waits
// for the class's published capacity, which GetCapacity refuses for the
// same parameter, and the claim's events would never say why.
func testTenantMoveRefused(t *testing.T, e *env) {
	needPeer(t)
	c := classes[0]
	src, stolen, sc := "victim", "stolen", "tenant-move-final"
	t.Cleanup(func() {
		e.removeQuietly([]string{src + "-reader"}, []string{stolen}, "", src)
		_ = e.cs.StorageV1().StorageClasses().Delete(ctx(), sc, metav1.DeleteOptions{})
	})
	token := "token-of-" + src
	e.written(t, src, c, token)
	ds := e.dataset(t, e.boundPV(t, src))
	class, err := e.cs.StorageV1().StorageClasses().Get(ctx(), c.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	class = class.DeepCopy()
	class.ObjectMeta = metav1.ObjectMeta{Name: sc}
	class.Parameters["sourceMode"] = "move-final"
	immediate := storagev1.VolumeBindingImmediate
	class.VolumeBindingMode = &immediate
	if _, err := e.cs.StorageV1().StorageClasses().Create(ctx(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.pvc(t, stolen, sc, "1Gi", c.mode(), "pvc:"+src)
	e2eutil.Eventually(t, 4*time.Minute, "the provisioner to report the refusal", func() (bool, error) {
		ev := e.events(stolen)
		return strings.Contains(ev, "moves are not a CSI parameter"), fmt.Errorf("events: %s", ev)
	})
	t.Logf("refused as: %s", e.events(stolen))
	claim, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx(), stolen, metav1.GetOptions{})
	if err != nil || claim.Status.Phase != corev1.ClaimPending {
		t.Errorf("the tenant's claim: %v (%v), want Pending", claim.Status.Phase, err)
	}
	if got := e.props(t, ds, "zfs.csi.dev:deleted", "zfs.csi.dev:managed"); got[0] != "-" || got[1] != "true" {
		t.Errorf("the source %s after the refusal: deleted=%s managed=%s, want - and true", ds, got[0], got[1])
	}
	e.peerReceivedNothing(t)
	e.pod(t, src+"-reader", src, c.block, c.read())
	if got := e.finished(t, src+"-reader", podWait); got != token {
		t.Errorf("the source reads %q after the refusal, want %q", got, token)
	}
	e.deletePod(t, src+"-reader")
	e.deletePVC(t, stolen, "")
	e.deletePVC(t, src, ds)
}

// eventCount adds up how often an event of reason whose message holds one
// of the phrases was recorded for an object of the test namespace: a
// recorder folds repeats into one event and counts them.
func (e *env) eventCount(name, reason string, phrases ...string) (int, error) {
	list, err := e.cs.CoreV1().Events(e.ns).List(ctx(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ev := range list.Items {
		if ev.Reason != reason || !slices.ContainsFunc(phrases, func(p string) bool { return strings.Contains(ev.Message, p) }) {
			continue
		}
		count := max(int(ev.Count), 1)
		if ev.Series != nil {
			count = max(count, int(ev.Series.Count))
		}
		n += count
	}
	return n, nil
}

// peerReceivedNothing checks the other node's zfs list for a pull's
// dataset under _incoming.
func (e *env) peerReceivedNothing(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(os.Getenv("ZFS_CSI_E2E_PEER_ZFS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Fields(string(data)) {
		if strings.Contains(name, "/_incoming/") {
			t.Errorf("the other node received %s", name)
		}
	}
}

// SmallRestoreAcrossNodes: a claim on the other node restored from a
// snapshot larger than it asks for is refused each time the provisioner
// tries, and the other node receives nothing. (Kubernetes' csi-provisioner
// sends no limit_bytes and refuses a request below the snapshot's
// restoreSize itself; the driver's own OUT_OF_RANGE for a pulled restore
// beyond limit_bytes is Nomad's capacity_max, in make e2e-nomad and e2e/tests.)
func testSmallRestoreAcrossNodes(t *testing.T, e *env) {
	peer := needPeer(t)
	c := classes[0]
	src, small := "big-source", "small-restore"
	snap := src + "-snap"
	t.Cleanup(func() { e.removeQuietly([]string{small + "-reader"}, []string{small}, snap, src) })
	e.written(t, src, c, "token-of-"+src)
	ds := e.dataset(t, e.boundPV(t, src))
	e.snapshot(t, snap, src)
	e.pvc(t, small, c.name, "512Mi", c.mode(), "snap:"+snap)
	e.podOn(t, map[string]string{"kubernetes.io/hostname": peer}, small+"-reader", small, c.block, c.read())
	e2eutil.Eventually(t, 8*time.Minute, "two refusals of the small restore", func() (bool, error) {
		n, err := e.eventCount(small, "ProvisioningFailed", "less than the size", "OutOfRange")
		return n >= 2, fmt.Errorf("%d refusals (%v); events: %s", n, err, e.events(small))
	})
	n, _ := e.eventCount(small, "ProvisioningFailed", "less than the size", "OutOfRange")
	t.Logf("refused %d times: %s", n, e.events(small))
	e.peerReceivedNothing(t)
	e.deletePod(t, small+"-reader")
	e.deletePVC(t, small, "")
	e.deleteSnapshot(t, snap)
	e.deletePVC(t, src, ds)
}

// CARotation: shutting a node out takes effect on connections already
// open. A restore on the other node pulls from this one (the other node's
// daemon keeps its connection to this one); this node's peer CA file is
// then replaced by a new CA's, as docs/across-nodes.md rotates it; the
// next restore is refused on that same connection (this node checks the
// caller's certificate on every call against the file as it is), and once
// the file is back the same claim is provisioned and reads the data.
func testCARotation(t *testing.T, e *env) {
	peer := needPeer(t)
	c := classes[0]
	src, first, second := "rotation-source", "rotation-first", "rotation-second"
	snap := src + "-snap"
	original, err := os.ReadFile(peerCA)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(peerCA, original, 0o600); err != nil {
			t.Errorf("restoring %s: %v", peerCA, err)
		}
		e.removeQuietly([]string{first + "-reader", second + "-reader"}, []string{first, second}, snap, src)
	})
	token := "token-of-" + src
	e.written(t, src, c, token)
	ds := e.dataset(t, e.boundPV(t, src))
	e.snapshot(t, snap, src)
	onPeer := map[string]string{"kubernetes.io/hostname": peer}

	e.pvc(t, first, c.name, "1Gi", c.mode(), "snap:"+snap)
	e.podOn(t, onPeer, first+"-reader", first, c.block, c.read())
	if got := e.finished(t, first+"-reader", podWait+pullWait); got != token {
		t.Fatalf("the restore before the rotation reads %q, want %q", got, token)
	}
	open := peerConnections(t)
	if len(open) == 0 {
		t.Fatal("no peer connection into this node after a pull from it")
	}

	rotated := time.Now()
	if err := os.WriteFile(peerCA+".new", newCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, "mv", peerCA+".new", peerCA) // one rename, as an operator's tooling would
	e.pvc(t, second, c.name, "1Gi", c.mode(), "snap:"+snap)
	e.podOn(t, onPeer, second+"-reader", second, c.block, c.read())
	e2eutil.Eventually(t, 3*time.Minute, "the other node's pull to be refused", func() (bool, error) {
		ev := e.events(second)
		return strings.Contains(ev, "no longer accepted"), fmt.Errorf("events: %s", ev)
	})
	t.Logf("refused %s after the rotation: %s", time.Since(rotated).Round(time.Second), e.events(second))
	still := peerConnections(t)
	var kept []string
	for _, conn := range open {
		if slices.Contains(still, conn) {
			kept = append(kept, conn)
		}
	}
	if len(kept) == 0 {
		t.Errorf("the connection open before the rotation (%v) is gone: the refusal did not come on it (now: %v)", open, still)
	} else {
		t.Logf("refused on connection(s) open before the rotation: %v", kept)
	}
	e.peerReceivedNothing(t)

	if err := os.WriteFile(peerCA, original, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := e.finished(t, second+"-reader", podWait+pullWait); got != token {
		t.Errorf("the restore after the CA came back reads %q, want %q", got, token)
	}
	for _, claim := range []string{first, second} {
		handle := e.volumeHandle(t, e.boundPV(t, claim))
		e.deletePod(t, claim+"-reader")
		e.deletePVC(t, claim, "")
		e.peerGone(t, strings.TrimPrefix(handle, peer+":"))
	}
	e.deleteSnapshot(t, snap)
	e.deletePVC(t, src, ds)
}

// peerConnections lists the established connections into this node's peer
// port, as "local peer" address pairs.
func peerConnections(t *testing.T) []string {
	t.Helper()
	var conns []string
	for _, line := range strings.Split(strings.TrimSpace(must(t, "ss", "-Htn", "state", "established", "( sport = :7443 )")), "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			conns = append(conns, f[len(f)-2]+" "+f[len(f)-1])
		}
	}
	return conns
}

// newCA is the PEM of a self-signed CA that signed nothing the nodes hold.
func newCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "rotated peer CA"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
