package checks

import (
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// contentPolicy reads the shipped ValidatingAdmissionPolicy that refuses
// contents no node's csi-snapshotter would see.
func contentPolicy(t *testing.T) *admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	var policy admissionv1.ValidatingAdmissionPolicy
	decodeKind(t, "../kubernetes/snapshots/60-snapshot-policy.yaml", "ValidatingAdmissionPolicy", &policy)
	return &policy
}

// evaluate runs one CEL expression of the policy with object bound as the
// apiserver binds it (the object as JSON-like maps).
func evaluate(t *testing.T, expression string, object map[string]any) bool {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
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
	out, _, err := program.Eval(map[string]any{"object": object})
	if err != nil {
		t.Fatalf("%q: %v", expression, err)
	}
	result, ok := out.Value().(bool)
	if !ok {
		t.Fatalf("%q gives %v, not a bool", expression, out)
	}
	return result
}

// The policy, run against the contents the snapshot-controller creates:
// admitted with --enable-distributed-snapshotting (the node label), refused
// without it, and never consulted for another driver's contents.
func TestSnapshotContentPolicyRefusesOnlyContentsNoNodeWouldSee(t *testing.T) {
	policy := contentPolicy(t)
	content := func(driver string, labels map[string]string) map[string]any {
		handle := "zfs-csi-node-a/tank/csi/pvc-1"
		c := &snapshotv1.VolumeSnapshotContent{
			TypeMeta:   metav1.TypeMeta{APIVersion: "snapshot.storage.k8s.io/v1", Kind: "VolumeSnapshotContent"},
			ObjectMeta: metav1.ObjectMeta{Name: "snapcontent-1", Labels: labels},
			Spec: snapshotv1.VolumeSnapshotContentSpec{
				Driver:            driver,
				DeletionPolicy:    snapshotv1.VolumeSnapshotContentDelete,
				Source:            snapshotv1.VolumeSnapshotContentSource{VolumeHandle: &handle},
				VolumeSnapshotRef: corev1.ObjectReference{Namespace: "e2e", Name: "snap-1"},
			},
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	managedBy := "snapshot.storage.kubernetes.io/managed-by"
	cases := []struct {
		name    string
		object  map[string]any
		matched bool
		allowed bool
	}{
		{"made with --enable-distributed-snapshotting", content("zfs.csi.dev", map[string]string{managedBy: "node-a"}), true, true},
		{"made without it", content("zfs.csi.dev", nil), true, false},
		{"other labels only", content("zfs.csi.dev", map[string]string{"team": "db"}), true, false},
		{"another driver's content", content("other.csi.dev", nil), false, true},
	}
	if len(policy.Spec.MatchConditions) == 0 || len(policy.Spec.Validations) == 0 {
		t.Fatal("the policy has no match condition or no validation")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			matched := true
			for _, m := range policy.Spec.MatchConditions {
				matched = matched && evaluate(t, m.Expression, c.object)
			}
			if matched != c.matched {
				t.Fatalf("matched %v, want %v", matched, c.matched)
			}
			if !matched {
				return
			}
			allowed := true
			for _, v := range policy.Spec.Validations {
				allowed = allowed && evaluate(t, v.Expression, c.object)
			}
			if allowed != c.allowed {
				t.Errorf("admitted %v, want %v", allowed, c.allowed)
			}
		})
	}
	if msg := policy.Spec.Validations[0].Message; !strings.Contains(msg, "--enable-distributed-snapshotting") {
		t.Errorf("the refusal does not name the flag: %q", msg)
	}
}
