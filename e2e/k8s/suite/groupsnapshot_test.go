package suite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

var (
	groupSnapshotGVR = schema.GroupVersionResource{Group: "groupsnapshot.storage.k8s.io", Version: "v1", Resource: "volumegroupsnapshots"}
	groupContentGVR  = schema.GroupVersionResource{Group: "groupsnapshot.storage.k8s.io", Version: "v1", Resource: "volumegroupsnapshotcontents"}
)

// optional is a directory of packaging/kubernetes that the plain manifests
// leave to the user (groupsnapshots, encryption); host.sh copies them beside
// the manifests, not into them.
func (e *env) optional(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(e.manifests), "optional", name)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("packaging/kubernetes/%s is not in the share (e2e/k8s/host.sh copies it): %v", name, err)
	}
	return dir
}

// installedDocs is docs/kubernetes.md as the package installs it on the
// node, beside the examples its commands name.
const installedDocs = "/usr/share/doc/zfs-csi/docs/kubernetes.md"

// groupSnapshotCommands are the command lines of docs/kubernetes.md that
// install group snapshots (those naming the examples' groupsnapshots/), in
// their order: the ones that use $NODE are run once per node.
func groupSnapshotCommands(doc string) []string {
	var commands []string
	for _, line := range strings.Split(doc, "\n") {
		command := strings.TrimSpace(line)
		if strings.HasPrefix(line, "    ") && strings.Contains(command, "/examples/kubernetes/groupsnapshots/") &&
			(strings.HasPrefix(command, "kubectl ") || strings.HasPrefix(command, "sed ")) {
			commands = append(commands, command)
		}
	}
	return commands
}

// policyCommands keeps, of the docs' group snapshot commands, those for a
// cluster that serves MutatingAdmissionPolicy as v1 (Kubernetes 1.36 and
// newer) or, with v1 false, only as v1beta1 (1.34 and 1.35): the docs give
// the label policy's command once for each, the v1beta1 one rewriting the
// manifest's apiVersion.
func policyCommands(commands []string, v1 bool) []string {
	var kept []string
	for _, command := range commands {
		if strings.Contains(command, "80-group-content-node.yaml") && strings.Contains(command, "beta1") == v1 {
			continue
		}
		kept = append(kept, command)
	}
	return kept
}

// servesMutatingPolicyV1 tells whether the apiserver serves
// MutatingAdmissionPolicy as admissionregistration.k8s.io/v1.
func (e *env) servesMutatingPolicyV1(t *testing.T) bool {
	t.Helper()
	list, err := e.cs.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.APIResources {
		if r.Name == "mutatingadmissionpolicies" {
			return true
		}
	}
	return false
}

// commandNodes is the nodes a docs command runs for: each of them for one
// that uses $NODE, else the first only.
func commandNodes(command string, nodes []string) []string {
	if strings.Contains(command, "$NODE") {
		return nodes
	}
	return nodes[:1]
}

// undoCommand is a docs command that applies objects turned into the one
// that removes them, as the docs say: kubectl delete --ignore-not-found -f
// in place of kubectl apply -f.
func undoCommand(command string) string {
	return strings.Replace(command, "kubectl apply -f", "kubectl delete --ignore-not-found -f", 1)
}

// runDocsCommand runs one command line of the docs as a reader pastes it
// into bash, with NODE set to node and the given directory's kubectl first on
// PATH; under pipefail, so that a sed that finds no file fails the line
// rather than only the kubectl it feeds nothing.
func runDocsCommand(command, node, kubectlDir string) (string, error) {
	cmd := exec.Command("bash", "-c", "set -o pipefail; "+command)
	cmd.Env = append(os.Environ(), "NODE="+node, "PATH="+kubectlDir+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%s (NODE=%s): %w: %s", command, node, err, strings.TrimSpace(string(out)))
	}
	return string(out), err
}

// 11. A VolumeGroupSnapshot of two claims under writing pods, through the
// policy that labels group contents with their node and the class of the
// claims' node, both installed by docs/kubernetes.md's own commands (read
// from the installed package, run as written, a class for each node): one
// ZFS transaction group for both members, and each member restored into a
// new claim that holds the data.
//
// long: one scenario on the cluster whose steps build on the volumes before them
func testGroupSnapshots(t *testing.T, e *env) {
	doc, err := os.ReadFile(installedDocs)
	if err != nil {
		t.Fatal(err)
	}
	v1 := e.servesMutatingPolicyV1(t)
	commands := policyCommands(groupSnapshotCommands(string(doc)), v1)
	if len(commands) == 0 {
		t.Fatalf("%s has no command for groupsnapshots/", installedDocs)
	}
	t.Logf("MutatingAdmissionPolicy v1 served: %v; the docs' commands for it: %q", v1, commands)
	nodes := []string{e.node}
	if peer := os.Getenv("ZFS_CSI_E2E_PEER_NODE"); peer != "" {
		nodes = append(nodes, peer)
	}
	// The policy and the classes are the cluster's, not the namespace's: left
	// behind, they would be there when scenario Chart installs the chart,
	// which makes the same policy and refuses one it does not own. Undone
	// the way the docs say, last command first.
	t.Cleanup(func() {
		for i := len(commands) - 1; i >= 0; i-- {
			for _, node := range commandNodes(commands[i], nodes) {
				undo := undoCommand(commands[i])
				if out, err := runDocsCommand(undo, node, filepath.Dir(e.kubectl)); err != nil {
					t.Error(err)
				} else {
					t.Logf("%s (NODE=%s): %s", undo, node, strings.TrimSpace(out))
				}
			}
		}
	})
	for _, command := range commands {
		for _, node := range commandNodes(command, nodes) {
			out, err := runDocsCommand(command, node, filepath.Dir(e.kubectl))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s (NODE=%s): %s", command, node, strings.TrimSpace(out))
		}
	}
	c := classes[0]
	claims := []string{"member-a", "member-b"}
	for _, claim := range claims {
		e.pvc(t, claim, c.name, "1Gi", c.mode(), "")
		patch := []byte(`{"metadata":{"labels":{"zfs-e2e-group":"g1"}}}`)
		if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Patch(ctx(), claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		// set -e: a failed write ends the pod as Failed (it never restarts).
		e.pod(t, claim+"-writer", claim, false, fmt.Sprintf(
			"set -e; echo token-of-%s > /data/token; sync; trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo $i >> /data/log; sleep 0.2; done", claim))
	}
	datasets := map[string]string{}
	for _, claim := range claims {
		e.running(t, claim+"-writer", podWait)
		datasets[claim] = e.dataset(t, e.boundPV(t, claim))
	}
	group := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "groupsnapshot.storage.k8s.io/v1",
		"kind":       "VolumeGroupSnapshot",
		"metadata":   map[string]any{"name": "group-1", "namespace": e.ns},
		"spec": map[string]any{
			"volumeGroupSnapshotClassName": "zfs-group-snapshot-" + e.node, // the class of the claims' node
			"source":                       map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"zfs-e2e-group": "g1"}}},
		},
	}}
	created, err := e.dyn.Resource(groupSnapshotGVR).Namespace(e.ns).Create(ctx(), group, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.removedIfFailed(t, func() error {
		return e.dyn.Resource(groupSnapshotGVR).Namespace(e.ns).Delete(ctx(), "group-1", metav1.DeleteOptions{})
	})
	start := time.Now()
	e2eutil.Eventually(t, 4*time.Minute, "VolumeGroupSnapshot group-1 to be ready", func() (bool, error) {
		g, err := e.dyn.Resource(groupSnapshotGVR).Namespace(e.ns).Get(ctx(), "group-1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(g.Object, "status", "readyToUse")
		msg, _, _ := unstructured.NestedString(g.Object, "status", "error", "message")
		return ready, fmt.Errorf("readyToUse %v, error %q; %s", ready, msg, e.events("group-1"))
	})
	t.Logf("group snapshot ready after %s", time.Since(start).Round(time.Second))
	members := e.groupMembers(t, created.GetUID())
	if len(members) != len(claims) {
		t.Fatalf("the group's VolumeSnapshots by claim: %v, want one for each of %v", members, claims)
	}
	// One channel program took both: their ZFS snapshots share a
	// transaction group and carry the group's mark.
	var txgs []string
	for _, claim := range claims {
		out := must(t, "zfs", "list", "-H", "-p", "-t", "snapshot", "-o", "name,createtxg,zfs.csi.dev:group", "-r", datasets[claim])
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 1 {
			t.Fatalf("%s has snapshots %q, want the group's one", datasets[claim], out)
		}
		fields := strings.Split(lines[0], "\t")
		if len(fields) != 3 || fields[2] == "-" || fields[2] == "" {
			t.Errorf("%s: the member snapshot %q carries no zfs.csi.dev:group", datasets[claim], lines[0])
		}
		if len(fields) > 1 {
			txgs = append(txgs, fields[1])
		}
	}
	if len(txgs) != 2 || txgs[0] != txgs[1] {
		t.Errorf("the members' createtxg %v: not one transaction group", txgs)
	}
	for _, claim := range claims {
		restore := claim + "-restore"
		e.pvc(t, restore, c.name, "1Gi", c.mode(), "snap:"+members[claim])
		e.pod(t, restore+"-reader", restore, false, "set -e; cat /data/token > /dev/termination-log; test -s /data/log")
	}
	for _, claim := range claims {
		restore := claim + "-restore"
		if got := e.finished(t, restore+"-reader", podWait); got != "token-of-"+claim {
			t.Errorf("%s, restored from the group's member %s, holds %q; want token-of-%s", restore, members[claim], got, claim)
		}
	}
	// Writers never failed while the group was taken.
	for _, claim := range claims {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx(), claim+"-writer", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("writer of %s: %s (%s)", claim, p.Status.Phase, e.events(p.Name))
		}
	}
	for _, claim := range claims {
		e.deletePod(t, claim+"-restore-reader")
		e.deletePVC(t, claim+"-restore", "")
	}
	e.deleteGroupSnapshot(t, "group-1", members)
	for _, claim := range claims {
		e.deletePod(t, claim+"-writer")
		e.deletePVC(t, claim, datasets[claim])
	}
}

// groupMembers maps each claim of a group snapshot to the VolumeSnapshot the
// snapshot-controller made for it (owned by the group).
func (e *env) groupMembers(t *testing.T, group types.UID) map[string]string {
	t.Helper()
	members := map[string]string{}
	e2eutil.Eventually(t, 2*time.Minute, "the group's VolumeSnapshots to be ready", func() (bool, error) {
		list, err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).List(ctx(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		clear(members)
		allReady := true
		for _, s := range list.Items {
			if !slices.ContainsFunc(s.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == group }) {
				continue
			}
			claim, _, _ := unstructured.NestedString(s.Object, "spec", "source", "persistentVolumeClaimName")
			members[claim] = s.GetName()
			ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse")
			allReady = allReady && ready
		}
		return len(members) > 0 && allReady, fmt.Errorf("members %v, all ready %v", members, allReady)
	})
	return members
}

// deleteGroupSnapshot deletes a VolumeGroupSnapshot and waits for its
// content and its members' VolumeSnapshots to go.
func (e *env) deleteGroupSnapshot(t *testing.T, name string, members map[string]string) {
	t.Helper()
	g, err := e.dyn.Resource(groupSnapshotGVR).Namespace(e.ns).Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	content, _, _ := unstructured.NestedString(g.Object, "status", "boundVolumeGroupSnapshotContentName")
	if err := e.dyn.Resource(groupSnapshotGVR).Namespace(e.ns).Delete(ctx(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e2eutil.Eventually(t, 4*time.Minute, "VolumeGroupSnapshotContent "+content+" and the members to go", func() (bool, error) {
		_, err := e.dyn.Resource(groupContentGVR).Get(ctx(), content, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("content: %v; %s", err, e.eventsIn("", content))
		}
		for _, s := range members {
			if _, err := e.dyn.Resource(snapshotGVR).Namespace(e.ns).Get(ctx(), s, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("member %s: %v", s, err)
			}
		}
		return true, nil
	})
}

// Without a cluster (make test): the commands scenario 11 will read from the
// installed docs/kubernetes.md, run as written against the repository's
// examples with a kubectl that records what it is given, apply the label
// policy once, under the MutatingAdmissionPolicy API of the cluster
// (v1 from Kubernetes 1.36, v1beta1 before), and, for each node, a class
// named after the node and labelled with it, the only kind of class that
// node's csi-snapshotter sees.
func TestTheDocsInstallGroupSnapshotsPerNode(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Abs("../../../packaging/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name string
		v1   bool
		api  string
	}{
		{"Kubernetes 1.36+", true, "admissionregistration.k8s.io/v1"},
		{"Kubernetes 1.34 and 1.35", false, "admissionregistration.k8s.io/v1beta1"},
	} {
		t.Run(test.name, func(t *testing.T) {
			dir := t.TempDir()
			applied, deleted := recordingKubectl(t, dir)
			commands := policyCommands(groupSnapshotCommands(string(doc)), test.v1)
			var perNode int
			for _, command := range commands {
				local := strings.ReplaceAll(command, "/usr/share/doc/zfs-csi/examples/kubernetes", examples)
				if local == command {
					t.Errorf("%q does not name the installed examples", command)
				}
				nodes := commandNodes(command, []string{"node-1", "node-2.example.com"})
				if len(nodes) > 1 {
					perNode++
				}
				for _, node := range nodes {
					if _, err := runDocsCommand(local, node, dir); err != nil {
						t.Error(err)
					}
					// What scenario GroupSnapshots runs at its end.
					if _, err := runDocsCommand(undoCommand(local), node, dir); err != nil {
						t.Error(err)
					}
				}
			}
			if perNode != 1 {
				t.Errorf("commands %q: %d use $NODE, want the one that applies a node's class", commands, perNode)
			}
			var got []string
			for _, object := range appliedObjects(t, applied) {
				got = append(got, objectKey(object))
				if strings.HasPrefix(object.GetKind(), "MutatingAdmissionPolicy") && object.GetAPIVersion() != test.api {
					t.Errorf("docs/kubernetes.md's commands %q apply %s %s as %s, want %s",
						commands, object.GetKind(), object.GetName(), object.GetAPIVersion(), test.api)
				}
			}
			slices.Sort(got)
			want := []string{
				"MutatingAdmissionPolicy zfs-csi-group-snapshot-content-node ",
				"MutatingAdmissionPolicyBinding zfs-csi-group-snapshot-content-node ",
				"VolumeGroupSnapshotClass zfs-group-snapshot-node-1 node-1",
				"VolumeGroupSnapshotClass zfs-group-snapshot-node-2.example.com node-2.example.com",
			}
			if !slices.Equal(got, want) {
				t.Errorf("docs/kubernetes.md's commands %q apply (kind, name, managed-by)\n%q\nwant\n%q", commands, got, want)
			}
			var removed []string
			for _, object := range appliedObjects(t, deleted) {
				removed = append(removed, objectKey(object))
			}
			slices.Sort(removed)
			if !slices.Equal(removed, want) {
				t.Errorf("the docs' commands undone (kubectl delete --ignore-not-found -f) remove\n%q\nwant what they apply\n%q", removed, want)
			}
		})
	}
}

// recordingKubectl writes into dir a kubectl that takes only the docs'
// two forms, apply -f FILE and delete --ignore-not-found -f FILE, and
// appends the file to the record of each form, whose paths it returns.
func recordingKubectl(t *testing.T, dir string) (applied, deleted string) {
	t.Helper()
	applied, deleted = filepath.Join(dir, "applied.yaml"), filepath.Join(dir, "deleted.yaml")
	t.Setenv("KUBECTL_APPLIED", applied)
	t.Setenv("KUBECTL_DELETED", deleted)
	fake := "#!/bin/bash\nset -euo pipefail\n" +
		"if [[ $# == 3 && $1 == apply && $2 == -f ]]; then file=$3 out=$KUBECTL_APPLIED\n" +
		"elif [[ $# == 4 && $1 == delete && $2 == --ignore-not-found && $3 == -f ]]; then file=$4 out=$KUBECTL_DELETED\n" +
		"else echo \"unexpected: kubectl $*\" >&2; exit 1; fi\n" +
		"{ cat -- \"$file\"; echo; echo ---; } >>\"$out\"\n"
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	return applied, deleted
}

// objectKey names an object the docs apply: kind, name and the node its
// csi-snapshotter label gives.
func objectKey(object unstructured.Unstructured) string {
	return object.GetKind() + " " + object.GetName() + " " + object.GetLabels()["snapshot.storage.kubernetes.io/managed-by"]
}

// appliedObjects decodes the objects a fake kubectl recorded in file, what
// the docs' commands applied (or, undone, deleted).
func appliedObjects(t *testing.T, file string) []unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objects []unstructured.Unstructured
	decoder := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var object unstructured.Unstructured
		if err := decoder.Decode(&object.Object); errors.Is(err, io.EOF) {
			return objects
		} else if err != nil {
			t.Fatalf("what the docs apply does not decode: %v\n%s", err, data)
		}
		if object.Object != nil {
			objects = append(objects, object)
		}
	}
}
