package suite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// installedMoveDocs is docs/across-nodes.md as the package installs it.
const installedMoveDocs = "/usr/share/doc/zfs-csi/docs/across-nodes.md"

// Move: Kubernetes takes over a volume moved to the other node, as
// docs/across-nodes.md says. A claim's volume on this node holds data a pod
// wrote; the pod is deleted; `zfs-csi ctl move-volume` runs two rounds and
// then --final as root on the other node (a pod there running the host's own
// binary against the daemon's sockets, what a shell on that node would run);
// the docs' own block then makes a PersistentVolume for the ID --final
// printed and a claim bound to it, and a pod on the other node reads the
// data. The old claim is deleted (its volume is gone already), and the new
// volume goes with its claim. Both daemons run with ZFS_CSI_ALLOW_MOVES
// (e2e/guest/k8s/suite.sh).
//
// long: one scenario on the cluster whose steps build on the volumes before them
func testMove(t *testing.T, e *env) {
	peer := os.Getenv("ZFS_CSI_E2E_PEER_NODE")
	if peer == "" || !peerChannel(t) {
		t.Fatalf("needs the second node (%q) and the daemons' peer channel", peer)
	}
	doc, err := os.ReadFile(installedMoveDocs)
	if err != nil {
		t.Fatal(err)
	}
	block, err := takeOverBlock(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := classes[0] // a dataset
	src, moved := "move-src", "move-dst"
	t.Cleanup(func() {
		for _, pod := range []string{src + "-writer", src + "-late", moved + "-reader"} {
			_ = e.cs.CoreV1().Pods(e.ns).Delete(ctx(), pod, metav1.DeleteOptions{})
		}
		for _, claim := range []string{moved, src} {
			_ = e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx(), claim, metav1.DeleteOptions{})
		}
	})
	e.pvc(t, src, c.name, "1Gi", c.mode(), "")
	e.pod(t, src+"-writer", src, c.block, c.writeRandom())
	e.finished(t, src+"-writer", podWait)
	e.deletePod(t, src+"-writer")
	oldPV := e.boundPV(t, src)
	ds := e.dataset(t, oldPV)
	oldID := e.volumeHandle(t, oldPV)

	start := time.Now()
	for round := 1; round <= 2; round++ {
		out, code := e.ctlOn(t, peer, fmt.Sprintf("move-round-%d", round), "move-volume", moved, oldID)
		if code == 0 || !strings.Contains(out, "Aborted") {
			t.Fatalf("round %d: exit %d, want ABORTED with what it brought:\n%s", round, code, out)
		}
		t.Logf("round %d: %s", round, strings.TrimSpace(out))
		if round == 1 {
			e.plantStaleRound(t, ds)
		}
	}
	// The workload writes again after the rounds, then stops: the final
	// round must bring these writes, not a round an earlier try left.
	e.pod(t, src+"-late", src, c.block, lateWrite)
	written := e.finished(t, src+"-late", podWait) // both writes' checksum
	e.deletePod(t, src+"-late")
	var out string
	for try := 1; ; try++ {
		var code int
		out, code = e.ctlOn(t, peer, fmt.Sprintf("move-final-%d", try), "move-volume", "--final", moved, oldID)
		if code == 0 {
			break
		}
		// A long final round answers ABORTED with its progress, and one
		// that comes while kubelet still has the volume staged on this
		// node FAILED_PRECONDITION: run it again (the docs say so).
		if try == 5 || !strings.Contains(out, "Aborted") && !strings.Contains(out, "FailedPrecondition") {
			t.Fatalf("--final, try %d: exit %d:\n%s", try, code, out)
		}
		t.Logf("--final, try %d: %s", try, strings.TrimSpace(out))
		time.Sleep(10 * time.Second)
	}
	var created struct {
		Volume struct {
			CapacityBytes json.Number       `json:"capacity_bytes"`
			VolumeID      string            `json:"volume_id"`
			VolumeContext map[string]string `json:"volume_context"`
		} `json:"volume"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || !strings.HasPrefix(created.Volume.VolumeID, peer+":") {
		t.Fatalf("--final printed %s (%v), want a volume of %s", out, err, peer)
	}
	t.Logf("moved %s to %s in %s", oldID, created.Volume.VolumeID, time.Since(start).Round(time.Second))
	e.reaped(t, ds) // the source went with the final round

	context, err := json.Marshal(created.Volume.VolumeContext)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"NEW_NAME": moved, "NEW_ID": created.Volume.VolumeID, "CONTEXT": string(context),
		"SIZE": created.Volume.CapacityBytes.String(), "NODE": peer, "CLASS": c.name, "FS_TYPE": "zfs", "NAMESPACE": e.ns,
	}
	if applied, err := runBlock(block, vars, e.kubectl); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("the docs' block: %s", strings.TrimSpace(applied))
	}
	if pv := e.boundPV(t, moved); pv != moved {
		t.Errorf("claim %s is bound to %s, want the PersistentVolume %s", moved, pv, moved)
	}
	e.checkPVNode(t, moved, peer)
	e.podOn(t, map[string]string{"kubernetes.io/hostname": peer}, moved+"-reader", moved, c.block, lateRead)
	if read := e.finished(t, moved+"-reader", podWait); read != written || len(written) != 64 {
		t.Errorf("the moved volume on %s reads sha256 %q, the source was written with %q (both writes)", peer, read, written)
	}
	e.noRoundsLeft(t, ds)
	e.deletePod(t, moved+"-reader")

	// The old claim's volume is gone: deleting the claim deletes its PV
	// (DeleteVolume of a volume that no longer exists succeeds).
	e.deletePVC(t, src, "")
	// The new claim's volume goes with it, deleted by the other node's
	// provisioner (the annotation of the docs' PersistentVolume).
	e.deletePVC(t, moved, "")
	e.peerGone(t, strings.TrimPrefix(created.Volume.VolumeID, peer+":"))
}

// lateWrite is a pod script for a dataset that writes 4 MiB more beside
// writeRandom's blob and reports the sha256 of both files; lateRead reports
// the same of what is there.
const (
	lateWrite = "set -e; dd if=/dev/urandom of=/data/late bs=1M count=4 2>/dev/null; sync; " + lateRead
	lateRead  = "set -e; cat /data/blob /data/late | sha256sum | cut -d' ' -f1 > /dev/termination-log"
)

// plantStaleRound leaves on the source what an earlier try of this move
// could have: a round snapshot marked for the same pull (the marks of the
// round the first try took), older than the writes still to come. A final
// round that took it for its own would lose those writes.
func (e *env) plantStaleRound(t *testing.T, ds string) {
	t.Helper()
	out := must(t, "zfs", "list", "-H", "-t", "snapshot", "-o", "name,zfs.csi.dev:pull-for", "-r", ds)
	var pullFor string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, mark, ok := strings.Cut(line, "\t"); ok && strings.Contains(name, "@csi-clone-pull-") && mark != "-" {
			pullFor = mark
		}
	}
	if pullFor == "" {
		t.Fatalf("no round snapshot on %s after the first round:\n%s", ds, out)
	}
	stale := ds + "@csi-clone-pull-00c0ffee00c0ffee"
	must(t, "zfs", "snapshot", "-o", "zfs.csi.dev:internal=true", "-o", "zfs.csi.dev:pull-for="+pullFor, stale)
	t.Logf("planted %s marked pull-for=%s", stale, pullFor)
}

// noRoundsLeft checks that no round snapshot of the move is left on this
// node: the source went with its rounds, the planted one among them.
func (e *env) noRoundsLeft(t *testing.T, ds string) {
	t.Helper()
	e2eutil.Eventually(t, 2*time.Minute, "no round snapshot of "+ds+" left", func() (bool, error) {
		out, err := run("zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-r", e.pool)
		return err == nil && !strings.Contains(out, ds+"@"), fmt.Errorf("snapshots: %s (%v)", out, err)
	})
}

// ctlOn runs `zfs-csi ctl ARGS` as root on node: a pod there runs the
// host's own binary (the package's, a static one) against the daemon's
// sockets in /run/zfs-csi, with its configuration file, as a shell on the
// node would. It returns what the command printed and its exit status.
func (e *env) ctlOn(t *testing.T, node, name string, args ...string) (string, int) {
	t.Helper()
	file, dir := corev1.HostPathFile, corev1.HostPathDirectory
	host := func(name, path string, kind *corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: kind}}}
	}
	// The image has no /tmp: the output goes through the shell.
	script := `out=$(/zfs-csi ctl "$@" 2>&1); code=$?; printf 'exit %s\n%s\n' "$code" "$out" >/dev/termination-log`
	zero := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name: "ctl", Image: e.image, ImagePullPolicy: corev1.PullNever,
				Command:                  append([]string{"/bin/sh", "-c", script, "sh"}, args...),
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				VolumeMounts: []corev1.VolumeMount{
					{Name: "binary", MountPath: "/zfs-csi", ReadOnly: true},
					{Name: "sockets", MountPath: "/run/zfs-csi"},
					{Name: "config", MountPath: "/etc/default/zfs-csi", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				host("binary", "/usr/sbin/zfs-csi", &file),
				host("sockets", "/run/zfs-csi", &dir),
				host("config", "/etc/default/zfs-csi", &file),
			},
		},
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(ctx(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.removedIfFailed(t, func() error { return e.cs.CoreV1().Pods(e.ns).Delete(ctx(), p.Name, metav1.DeleteOptions{}) })
	msg := e.finished(t, name, podWait+pullWait)
	e.deletePod(t, name)
	first, rest, _ := strings.Cut(msg, "\n")
	code, err := strconv.Atoi(strings.TrimPrefix(first, "exit "))
	if err != nil {
		t.Fatalf("pod %s reported %q", name, msg)
	}
	return rest, code
}

// takeOverBlock is the shell block of docs/across-nodes.md's "Moving a
// volume" that makes the PersistentVolume and claim of a moved volume (the
// one that starts with kubectl apply), without the list item's indentation.
func takeOverBlock(doc string) (string, error) {
	_, section, ok := strings.Cut(doc, "## Moving a volume")
	if !ok {
		return "", fmt.Errorf("docs/across-nodes.md has no section Moving a volume")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, m := range regexp.MustCompile("(?s)\n( *)```sh\n(.*?)\n *```").FindAllStringSubmatch(section, -1) {
		indent, body := m[1], m[2]
		var lines []string
		for _, line := range strings.Split(body, "\n") {
			lines = append(lines, strings.TrimPrefix(line, indent))
		}
		if strings.HasPrefix(lines[0], "kubectl apply -f - <<EOF") {
			return strings.Join(lines, "\n") + "\n", nil
		}
	}
	return "", fmt.Errorf("docs/across-nodes.md's Moving a volume has no block that starts with kubectl apply -f - <<EOF")
}

// runBlock runs a block of the docs as a reader pastes it into bash, with
// vars set and kubectl (the path given) first on PATH.
func runBlock(block string, vars map[string]string, kubectl string) (string, error) {
	cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+block)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("the docs' block: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Without a cluster (make test): the block scenario Move runs, run as
// written with a kubectl that records what it is given, applies a
// PersistentVolume of the moved volume pinned to its node, which the new
// node's provisioner may delete, and a claim bound to it.
func TestTheDocsTakeAMovedVolumeOver(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/across-nodes.md")
	if err != nil {
		t.Fatal(err)
	}
	block, err := takeOverBlock(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	applied := filepath.Join(dir, "applied.yaml")
	t.Setenv("KUBECTL_APPLIED", applied)
	fake := "#!/bin/bash\nset -euo pipefail\n[[ $# == 3 && $1 == apply && $2 == -f && $3 == - ]] || { echo \"unexpected: kubectl $*\" >&2; exit 1; }\n" +
		"cat >>\"$KUBECTL_APPLIED\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"NEW_NAME": "moved-data", "NEW_ID": "node-b:tank/csi/moved-data", "CONTEXT": `{"fsType":"zfs","kind":"dataset"}`,
		"SIZE": "1073741824", "NODE": "node-b", "CLASS": "zfs-dataset", "FS_TYPE": "zfs", "NAMESPACE": "apps",
	}
	if out, err := runBlock(block, vars, filepath.Join(dir, "kubectl")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	objects := appliedObjects(t, applied)
	if len(objects) != 2 || objects[0].GetKind() != "PersistentVolume" || objects[1].GetKind() != "PersistentVolumeClaim" {
		t.Fatalf("the block applies %d objects, want a PersistentVolume and a claim: %v", len(objects), objects)
	}
	var pv corev1.PersistentVolume
	var claim corev1.PersistentVolumeClaim
	for i, into := range []any{&pv, &claim} {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(objects[i].Object, into, true); err != nil {
			t.Fatalf("%s: %v", objects[i].GetKind(), err)
		}
	}
	csi := pv.Spec.CSI
	switch {
	case pv.Name != "moved-data" || pv.Annotations["pv.kubernetes.io/provisioned-by"] != driverName:
		t.Errorf("PersistentVolume %s, annotations %v", pv.Name, pv.Annotations)
	case csi == nil || csi.Driver != driverName || csi.VolumeHandle != vars["NEW_ID"] || csi.FSType != "zfs" ||
		csi.VolumeAttributes["kind"] != "dataset" || csi.VolumeAttributes["fsType"] != "zfs":
		t.Errorf("PersistentVolume's csi: %+v", csi)
	case pv.Spec.Capacity.Storage().Value() != 1<<30 || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		pv.Spec.StorageClassName != "zfs-dataset":
		t.Errorf("PersistentVolume's capacity %v, reclaim policy %s, class %s", pv.Spec.Capacity, pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.StorageClassName)
	case pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil || len(pv.Spec.NodeAffinity.Required.NodeSelectorTerms) != 1 ||
		fmt.Sprint(pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions) != fmt.Sprint([]corev1.NodeSelectorRequirement{
			{Key: topologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-b"}}}):
		t.Errorf("PersistentVolume's node affinity: %+v", pv.Spec.NodeAffinity)
	}
	if claim.Name != "moved-data" || claim.Namespace != "apps" || claim.Spec.VolumeName != "moved-data" ||
		claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName != "zfs-dataset" ||
		claim.Spec.Resources.Requests.Storage().Value() != 1<<30 {
		t.Errorf("claim %s/%s: %+v", claim.Namespace, claim.Name, claim.Spec)
	}
}
