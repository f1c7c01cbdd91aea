package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// The opt-in of packaging/kubernetes/snapshot-metadata/, as it installs:
// the sidecar's DaemonSet and Service (in the manifests' namespace), and the
// name clients reach the Service by (the SnapshotMetadataService's address).
const (
	snapshotMetadataDS      = "zfs-csi-snapshot-metadata"
	snapshotMetadataHost    = snapshotMetadataDS + "." + driverNS
	snapshotMetadataTLS     = "zfs-csi-snapshot-metadata-tls"
	changedBlocksDocs       = "/usr/share/doc/zfs-csi/docs/changed-block-tracking.md"
	changedBlocksClientRole = "zfs-csi-snapshot-metadata-client"
	backupAccount           = "cbt-backup" // the backup application's ServiceAccount
)

// The writes of scenario ChangedBlocks, in bytes, on a 1 GiB raw block
// volume of class zfs-block (volblocksize 16 KiB): each a whole number of
// blocks, so that ZFS's answers can be exact. The second rewrites part of
// the first (changed) and writes where nothing was (changed); everything
// else is untouched by it.
var (
	firstWrites  = []extent{{0, 1 << 20}, {64 << 20, 1 << 20}, {512 << 20, 256 << 10}}
	secondWrites = []extent{{32 << 20, 1 << 20}, {64<<20 + 256<<10, 16 << 10}, {100 << 20, 48 << 10}}
)

// Changed-block tracking through Kubernetes: the external-snapshot-metadata
// sidecar installed by docs/changed-block-tracking.md's own commands (read
// from the installed package, run as written, with a certificate made here
// for the Service's name), and upstream's snapshot-metadata-lister as the
// backup application, on each node (the Service's traffic stays on the
// client's node; the other node's daemon relays through the peer channel).
// Between VolumeSnapshots A and B of a raw block claim, GetMetadataDelta
// lists the blocks of the second write and nothing else;
// GetMetadataAllocated(B) lists both writes.
//
// long: one scenario on the cluster whose steps build on the volumes before them
func testChangedBlocks(t *testing.T, e *env) {
	doc, err := os.ReadFile(changedBlocksDocs)
	if err != nil {
		t.Fatal(err)
	}
	install, client, err := changedBlocksCommands(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", changedBlocksDocs, err)
	}
	lister := os.Getenv("ZFS_CSI_E2E_LISTER_IMAGE")
	if lister == "" {
		t.Fatal("ZFS_CSI_E2E_LISTER_IMAGE is not set (e2e/guest/k8s/suite.sh passes the lister's image)")
	}
	dir := t.TempDir()
	if err := writeCertificates(dir, snapshotMetadataHost); err != nil {
		t.Fatal(err)
	}
	docsEnv := []string{"NAMESPACE=" + e.ns, "SERVICE_ACCOUNT=" + backupAccount}
	t.Cleanup(func() { e.removeSnapshotMetadata(t) })
	for _, block := range []string{install, client} {
		out, err := runDocsBlock(block, dir, filepath.Dir(e.kubectl), docsEnv)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", strings.TrimSpace(out))
	}
	e.snapshotMetadataReady(t)

	claim := "cbt"
	c := class{"zfs-block", true}
	e.pvc(t, claim, c.name, "1Gi", c.mode(), "")
	made := []string{"pvc/" + claim} // kubectl's names of what the scenario makes in e.ns
	t.Cleanup(func() {
		// After a failure: what the scenario made goes, so that
		// NothingLeft reports the failure's cause, not its leftovers.
		if t.Failed() {
			slices.Reverse(made)
			_, _ = run(e.kubectl, append([]string{"-n", e.ns, "delete", "--ignore-not-found", "--wait=false"}, made...)...)
		}
	})
	for i, writes := range [][]extent{firstWrites, secondWrites} {
		writer, snapshot := fmt.Sprintf("%s-write-%d", claim, i+1), fmt.Sprintf("%s-%c", claim, 'a'+i)
		made = append(made, "pod/"+writer, "volumesnapshot/"+snapshot)
		e.pod(t, writer, claim, true, writeExtents(writes))
		e.finished(t, writer, podWait)
		e.deletePod(t, writer)
		e.snapshot(t, snapshot, claim)
	}
	ds := e.dataset(t, e.boundPV(t, claim))
	block, err := strconv.ParseInt(e.props(t, ds, "volblocksize")[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{e.node}
	if peer := os.Getenv("ZFS_CSI_E2E_PEER_NODE"); peer != "" {
		nodes = append(nodes, peer)
	}
	service, err := e.cs.CoreV1().Services(driverNS).Get(ctx(), snapshotMetadataDS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string][]string{
		"delta":     {"-n", e.ns, "-s", claim + "-b", "-p", claim + "-a", "-o", "json"},
		"allocated": {"-n", e.ns, "-s", claim + "-b", "-o", "json"},
	}
	want := map[string][]extent{"delta": secondWrites, "allocated": append(append([]extent{}, firstWrites...), secondWrites...)}
	var pods []string
	for i, node := range nodes {
		for call, args := range calls {
			name := fmt.Sprintf("cbt-%s-%d", call, i)
			made = append(made, "pod/"+name)
			e.listerPod(t, name, node, lister, service.Spec.ClusterIP, args)
			pods = append(pods, name)
		}
	}
	for i, node := range nodes {
		for call := range calls {
			name := fmt.Sprintf("cbt-%s-%d", call, i)
			out := e.listerOutput(t, name)
			got, capacity, err := parseListerJSON(out)
			if err != nil {
				t.Errorf("%s on %s: %v", call, node, err)
				continue
			}
			if capacity != 1<<30 {
				t.Errorf("%s on %s: volume_capacity_bytes %d, want 1 GiB", call, node, capacity)
			}
			if err := coversOnly(got, want[call], block); err != nil {
				t.Errorf("%s from node %s's sidecar: %v", call, node, err)
			} else {
				t.Logf("%s from node %s's sidecar: %v", call, node, got)
			}
		}
	}
	e.snapshotMetadataLogsClean(t)
	for _, p := range pods {
		e.deletePod(t, p)
	}
	e.deleteSnapshot(t, claim+"-b")
	e.deleteSnapshot(t, claim+"-a")
	e.deletePVC(t, claim, ds)
}

// changedBlocksCommands returns the two command blocks of
// docs/changed-block-tracking.md's Kubernetes section: the install (the
// cluster's, in a directory holding ca.pem, server.pem and server.key) and
// a backup application's ServiceAccount (with NAMESPACE and SERVICE_ACCOUNT
// set).
func changedBlocksCommands(doc string) (install, client string, err error) {
	_, section, ok := strings.Cut(doc, "\n## Through Kubernetes\n")
	if !ok {
		return "", "", fmt.Errorf("no section ## Through Kubernetes")
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 2 {
		return "", "", fmt.Errorf("the Kubernetes section has %d sh blocks, want 2 (the install, a client's account)", len(blocks))
	}
	return blocks[0][1], blocks[1][1], nil
}

// runDocsBlock runs a block of the docs as a reader pastes it into bash
// (each line stops the block if it fails), in dir, with env added and the
// given directory's kubectl first on PATH.
func runDocsBlock(block, dir, kubectlDir string, env []string) (string, error) {
	return runIn(dir, "set -euo pipefail\n"+block, append(env, "PATH="+kubectlDir+":"+os.Getenv("PATH")))
}

// snapshotMetadataReady waits for the sidecar's pod to be ready on every node.
func (e *env) snapshotMetadataReady(t *testing.T) {
	t.Helper()
	nodes, err := e.cs.CoreV1().Nodes().List(ctx(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.daemonSetReady(t, driverNS, snapshotMetadataDS, int32(len(nodes.Items)))
}

// listerPod runs upstream's snapshot-metadata-lister with args on node, as
// the backup application's ServiceAccount. The cluster has no DNS: the
// pod's /etc/hosts maps the SnapshotMetadataService's host name to the
// Service's cluster IP, which kube-proxy on the pod's node sends to that
// node's sidecar.
func (e *env) listerPod(t *testing.T, name, node, image, serviceIP string, args []string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeSelector:       map[string]string{"kubernetes.io/hostname": node},
			RestartPolicy:      corev1.RestartPolicyNever,
			ServiceAccountName: backupAccount,
			HostAliases:        []corev1.HostAlias{{IP: serviceIP, Hostnames: []string{snapshotMetadataHost}}},
			Containers: []corev1.Container{{
				Name: "lister", Image: image, ImagePullPolicy: corev1.PullNever, Args: args,
			}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(ctx(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.removedIfFailed(t, func() error { return e.cs.CoreV1().Pods(e.ns).Delete(ctx(), p.Name, metav1.DeleteOptions{}) })
}

// listerOutput waits for a lister pod to end and returns its log; a failed
// one fails the test with its log and events.
func (e *env) listerOutput(t *testing.T, name string) string {
	t.Helper()
	var phase corev1.PodPhase
	e2eutil.Eventually(t, podWait, "pod "+name+" to finish", func() (bool, error) {
		p, err := e.currentPod(t, name)
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, fmt.Errorf("phase %s; %s", phase, e.events(name))
	})
	log, err := e.cs.CoreV1().Pods(e.ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx())
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod %s failed: %s; events: %s", name, strings.TrimSpace(string(log)), e.events(name))
	}
	return string(log)
}

// snapshotMetadataLogsClean fails on every RBAC or watch error in the
// sidecar's logs (read through the API: its pods run on both nodes).
func (e *env) snapshotMetadataLogsClean(t *testing.T) {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(driverNS).List(ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + snapshotMetadataDS})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		log, err := e.cs.CoreV1().Pods(driverNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx())
		if err != nil {
			t.Errorf("logs of %s: %v", p.Name, err)
			continue
		}
		for _, line := range strings.Split(string(log), "\n") {
			if sidecarErrors.MatchString(line) {
				t.Errorf("%s (%s): %s", p.Name, p.Spec.NodeName, line)
			}
		}
	}
}

// removeSnapshotMetadata undoes what the docs' commands made, whether or
// not the scenario got that far.
func (e *env) removeSnapshotMetadata(t *testing.T) {
	dir := e.optional(t, "snapshot-metadata")
	for _, args := range [][]string{
		{"delete", "snapshotmetadataservice", driverName, "--ignore-not-found"},
		{"delete", "-f", filepath.Join(dir, "20-sidecar.yaml"), "-f", filepath.Join(dir, "10-rbac.yaml"), "--ignore-not-found", "--wait=true"},
		{"-n", driverNS, "delete", "secret", snapshotMetadataTLS, "--ignore-not-found"},
		{"delete", "clusterrolebinding", "zfs-csi-snapshot-metadata-" + e.ns + "-" + backupAccount, "--ignore-not-found"},
		{"-n", e.ns, "delete", "rolebinding,role", backupAccount + "-token", "--ignore-not-found"},
		{"-n", e.ns, "delete", "serviceaccount", backupAccount, "--ignore-not-found"},
	} {
		if out, err := run(e.kubectl, args...); err != nil {
			t.Errorf("clean-up: %v: %s", err, out)
		}
	}
	e2eutil.Eventually(t, 3*time.Minute, "the sidecar's pods to go", func() (bool, error) {
		pods, err := e.cs.CoreV1().Pods(driverNS).List(ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + snapshotMetadataDS})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && len(pods.Items) == 0, fmt.Errorf("%d pods, %v", len(pods.Items), err)
	})
}
