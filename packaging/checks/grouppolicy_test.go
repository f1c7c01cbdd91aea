package checks

import (
	"os"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	groupsnapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	admissionv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

const managedBy = "snapshot.storage.kubernetes.io/managed-by"

// labelPolicy reads the shipped MutatingAdmissionPolicy that labels group
// snapshot contents with their node.
func labelPolicy(t *testing.T) *admissionv1beta1.MutatingAdmissionPolicy {
	t.Helper()
	var policy admissionv1beta1.MutatingAdmissionPolicy
	decodeKind(t, "../kubernetes/groupsnapshots/80-group-content-node.yaml", "MutatingAdmissionPolicy", &policy)
	return &policy
}

// decodeKind strictly decodes the first document of kind in a manifest file
// into object.
func decodeKind(t *testing.T, file, kind string, object any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var head struct {
			Kind string `json:"kind"`
		}
		if yaml.Unmarshal([]byte(doc), &head) == nil && head.Kind == kind {
			if err := yaml.UnmarshalStrict([]byte(doc), object); err != nil {
				t.Fatalf("%s: %s: %v", file, kind, err)
			}
			return
		}
	}
	t.Fatalf("no %s in %s", kind, file)
}

// evaluateWith runs one CEL expression with object and variables bound as
// the apiserver binds them, and Kubernetes' string extensions (split).
func evaluateWith(t *testing.T, expression string, object map[string]any, variables map[string]any) any {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("variables", cel.DynType), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	ast, issues := env.Compile(expression)
	if issues.Err() != nil {
		t.Fatalf("%q: %v", expression, issues.Err())
	}
	program, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := program.Eval(map[string]any{"object": object, "variables": variables})
	if err != nil {
		t.Fatalf("%q: %v", expression, err)
	}
	return out.Value()
}

func unstructured(t *testing.T, object runtime.Object) map[string]any {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(object)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// groupContent is a VolumeGroupSnapshotContent as the snapshot-controller
// makes it for a VolumeGroupSnapshot (external-snapshotter v8.7.0,
// createGroupSnapshotContent): no labels.
func groupContent(t *testing.T, driver string, labels map[string]string, handles ...string) map[string]any {
	return unstructured(t, &groupsnapshotv1.VolumeGroupSnapshotContent{
		TypeMeta:   metav1.TypeMeta{APIVersion: "groupsnapshot.storage.k8s.io/v1", Kind: "VolumeGroupSnapshotContent"},
		ObjectMeta: metav1.ObjectMeta{Name: "groupsnapcontent-1", Labels: labels},
		Spec: groupsnapshotv1.VolumeGroupSnapshotContentSpec{
			Driver:                 driver,
			DeletionPolicy:         snapshotv1.VolumeSnapshotContentDelete,
			Source:                 groupsnapshotv1.VolumeGroupSnapshotContentSource{VolumeHandles: handles},
			VolumeGroupSnapshotRef: corev1.ObjectReference{Namespace: "e2e", Name: "group-1"},
		},
	})
}

// memberContent is a member VolumeSnapshotContent as the snapshot-controller
// makes it for a group's snapshot (buildVolumeSnapshotContentSpecForGroupSnapshot):
// the group's handle as an annotation, the volume's handle, no labels.
func memberContent(t *testing.T, volumeHandle string) map[string]any {
	return unstructured(t, &snapshotv1.VolumeSnapshotContent{
		TypeMeta: metav1.TypeMeta{APIVersion: "snapshot.storage.k8s.io/v1", Kind: "VolumeSnapshotContent"},
		ObjectMeta: metav1.ObjectMeta{Name: "snapcontent-member-1",
			Annotations: map[string]string{"groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle": "node-a:tank#group-1"}},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			Driver:            "zfs.csi.dev",
			DeletionPolicy:    snapshotv1.VolumeSnapshotContentDelete,
			Source:            snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &volumeHandle},
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: "e2e", Name: "snapshot-member-1"},
		},
	})
}

// The label policy, run against what the snapshot-controller creates for a
// group: it matches this driver's group contents and their members only,
// unlabelled, and names the node the volumes' IDs start with; the validating
// policy then admits what it labelled and refuses an unlabelled group content
// with a reason that names the label policy.
func TestGroupContentsAreLabelledWithTheirNode(t *testing.T) {
	policy := labelPolicy(t)
	single := unstructured(t, &snapshotv1.VolumeSnapshotContent{
		TypeMeta: metav1.TypeMeta{APIVersion: "snapshot.storage.k8s.io/v1", Kind: "VolumeSnapshotContent"},
		Spec:     snapshotv1.VolumeSnapshotContentSpec{Driver: "zfs.csi.dev", Source: snapshotv1.VolumeSnapshotContentSource{VolumeHandle: new("node-a:tank/csi/pvc-1")}},
	})
	cases := []struct {
		name    string
		object  map[string]any
		matched bool
		node    string
	}{
		{"a group's content", groupContent(t, "zfs.csi.dev", nil, "node-a:tank/csi/pvc-1", "node-a:tank/csi/pvc-2"), true, "node-a"},
		{"a group's content with other labels", groupContent(t, "zfs.csi.dev", map[string]string{"team": "db"}, "node-b.example:tank/k8s/pvc-1"), true, "node-b.example"},
		{"a member content", memberContent(t, "node-a:tank/csi/pvc-2"), true, "node-a"},
		{"a group's content labelled already", groupContent(t, "zfs.csi.dev", map[string]string{managedBy: "node-a"}, "node-a:tank/csi/pvc-1"), false, ""},
		{"another driver's group content", groupContent(t, "other.csi.dev", nil, "vol-1"), false, ""},
		{"a single snapshot's content (the snapshot-controller's flag labels those)", single, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			matched := true
			for _, m := range policy.Spec.MatchConditions {
				matched = matched && evaluateWith(t, m.Expression, c.object, nil) == true
			}
			if matched != c.matched {
				t.Fatalf("matched %v, want %v", matched, c.matched)
			}
			if !matched {
				return
			}
			variables := map[string]any{}
			for _, v := range policy.Spec.Variables {
				variables[v.Name] = evaluateWith(t, v.Expression, c.object, variables)
			}
			if variables["node"] != c.node {
				t.Errorf("labels it with node %q, want %q", variables["node"], c.node)
			}
		})
	}
	validating := contentPolicy(t)
	admitted := func(object map[string]any) (bool, string) {
		for _, v := range validating.Spec.Validations {
			if !evaluate(t, v.Expression, object) {
				return false, v.Message
			}
		}
		return true, ""
	}
	if ok, msg := admitted(groupContent(t, "zfs.csi.dev", nil, "node-a:tank/csi/pvc-1")); ok || !strings.Contains(msg, policy.Name) {
		t.Errorf("an unlabelled group content: admitted %v (%q); want refused, naming %s", ok, msg, policy.Name)
	}
	for _, labelled := range []map[string]any{
		groupContent(t, "zfs.csi.dev", map[string]string{managedBy: "node-a"}, "node-a:tank/csi/pvc-1"),
		memberWithLabel(t, memberContent(t, "node-a:tank/csi/pvc-1")),
	} {
		if ok, msg := admitted(labelled); !ok {
			t.Errorf("a labelled %s is refused: %q", labelled["kind"], msg)
		}
	}
}

func memberWithLabel(t *testing.T, content map[string]any) map[string]any {
	t.Helper()
	content["metadata"].(map[string]any)["labels"] = map[string]any{managedBy: "node-a"}
	return content
}
