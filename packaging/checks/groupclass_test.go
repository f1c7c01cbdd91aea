package checks

import (
	"os"
	"strings"
	"testing"

	groupsnapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

const groupClassTemplate = "../kubernetes/groupsnapshots/70-groupsnapshotclass.yaml"

// admissible is what the apiserver checks of a custom resource's metadata
// before anything else (apiextensions-apiserver, customresource/validator.go:
// ValidateObjectMetaAccessor with NameIsDNSSubdomain): its name and labels.
func admissible(class *groupsnapshotv1.VolumeGroupSnapshotClass) field.ErrorList {
	return validation.ValidateObjectMetaAccessor(class, false, validation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

// The per-node class template: with a node's name filled in (what the sed of
// docs/kubernetes.md does) the apiserver admits it, named and labelled for
// that node; applied as it is (kubectl apply -f of its directory) it is
// refused, not created as a class that no node's csi-snapshotter sees.
func TestGroupSnapshotClassTemplateIsAdmittedOnlyForANode(t *testing.T) {
	data, err := os.ReadFile(groupClassTemplate)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"node-1", "worker-3.example.com"} {
		var class groupsnapshotv1.VolumeGroupSnapshotClass
		if err := yaml.UnmarshalStrict([]byte(strings.ReplaceAll(string(data), "@NODE@", node)), &class); err != nil {
			t.Fatal(err)
		}
		if errs := admissible(&class); len(errs) > 0 {
			t.Errorf("for node %s: refused: %v", node, errs.ToAggregate())
		}
		if class.Name != "zfs-group-snapshot-"+node || class.Labels[managedBy] != node {
			t.Errorf("for node %s: class %s labelled %v, want zfs-group-snapshot-%s with %s=%s", node, class.Name, class.Labels, node, managedBy, node)
		}
	}
	var template groupsnapshotv1.VolumeGroupSnapshotClass
	if err := yaml.UnmarshalStrict(data, &template); err != nil {
		t.Fatal(err)
	}
	if errs := admissible(&template); len(errs) == 0 {
		t.Errorf("the template itself, %s labelled %v, would be admitted", template.Name, template.Labels)
	}
}
