package checks

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	cbtv1alpha1 "github.com/kubernetes-csi/external-snapshot-metadata/client/apis/snapshotmetadataservice/v1alpha1"
	groupsnapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	admissionv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/yaml"
)

// typed is the API type of each kind the manifests and the chart hold;
// ScrapeConfig (prometheus-operator) is checked only for its apiVersion.
func typed(kind string) any {
	switch kind {
	case "Namespace":
		return &corev1.Namespace{}
	case "ServiceAccount":
		return &corev1.ServiceAccount{}
	case "CSIDriver":
		return &storagev1.CSIDriver{}
	case "StorageClass":
		return &storagev1.StorageClass{}
	case "ClusterRole":
		return &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	case "Role":
		return &rbacv1.Role{}
	case "RoleBinding":
		return &rbacv1.RoleBinding{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	case "VolumeSnapshotClass":
		return &snapshotv1.VolumeSnapshotClass{}
	case "ConfigMap":
		return &corev1.ConfigMap{}
	case "ValidatingAdmissionPolicy":
		return &admissionv1.ValidatingAdmissionPolicy{}
	case "ValidatingAdmissionPolicyBinding":
		return &admissionv1.ValidatingAdmissionPolicyBinding{}
	case "VolumeGroupSnapshotClass":
		return &groupsnapshotv1.VolumeGroupSnapshotClass{}
	case "MutatingAdmissionPolicy":
		return &admissionv1beta1.MutatingAdmissionPolicy{}
	case "MutatingAdmissionPolicyBinding":
		return &admissionv1beta1.MutatingAdmissionPolicyBinding{}
	case "Service":
		return &corev1.Service{}
	case "SnapshotMetadataService":
		return &cbtv1alpha1.SnapshotMetadataService{}
	}
	return nil
}

// strictly decodes every document of a YAML stream into its API type,
// refusing unknown fields.
func strictly(t *testing.T, source string, stream []byte) int {
	t.Helper()
	count := 0
	for _, doc := range strings.Split(string(stream), "\n---") {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Errorf("%s: %v", source, err)
			continue
		}
		if head.Kind == "" {
			continue // comments only
		}
		count++
		target := typed(head.Kind)
		if target == nil {
			operator := head.Kind == "ScrapeConfig" && head.APIVersion == "monitoring.coreos.com/v1alpha1" ||
				head.Kind == "PrometheusRule" && head.APIVersion == "monitoring.coreos.com/v1"
			if !operator {
				t.Errorf("%s: %s %s has no API type to check", source, head.APIVersion, head.Kind)
			}
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
			t.Errorf("%s: %s: %v", source, head.Kind, err)
		}
	}
	return count
}

func TestManifestsAndChartDecodeStrictlyByTheAPITypes(t *testing.T) {
	// helm reads the chart; reading it here too tells go test's cache that
	// the result depends on it.
	if err := filepath.WalkDir("../helm", func(path string, entry os.DirEntry, err error) error {
		if err == nil && !entry.IsDir() {
			_, err = os.ReadFile(path)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../kubernetes/*.yaml")
	for _, dir := range []string{"snapshots", "groupsnapshots", "encryption", "snapshot-metadata"} {
		more, _ := filepath.Glob("../kubernetes/" + dir + "/*.yaml")
		if len(more) == 0 {
			t.Errorf("no manifests in packaging/kubernetes/%s", dir)
		}
		files = append(files, more...)
	}
	total := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// The SnapshotMetadataService's template, as the docs' sed fills
		// it in: caCert is base64.
		data = bytes.ReplaceAll(data, []byte("@CA_CERT@"), []byte("Y2E="))
		total += strictly(t, file, data)
	}
	if total < 12 {
		t.Errorf("only %d objects in the plain manifests", total)
	}
	helm := helmBinary(t)
	snapshotAPI := []string{"--api-versions", "snapshot.storage.k8s.io/v1", "--kube-version", "1.34.0"}
	groupAPI := append([]string{"--api-versions", "groupsnapshot.storage.k8s.io/v1", "--api-versions",
		"admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy", "--values", "../kubernetes/testdata/encryption-values.yaml",
		"--values", "../kubernetes/testdata/snapshot-metadata-values.yaml",
		"--set", "groupSnapshots.nodes={node-1,node-2}"}, snapshotAPI...)
	// metrics.enabled and alertRules render their objects only where
	// prometheus-operator's kinds are served.
	monitoringAPI := []string{"--api-versions", "monitoring.coreos.com/v1/PrometheusRule", "--api-versions", "monitoring.coreos.com/v1alpha1/ScrapeConfig"}
	withValues := append(append([]string{"--values", "../kubernetes/testdata/helm-values.yaml"}, snapshotAPI...), monitoringAPI...)
	for _, args := range [][]string{nil, snapshotAPI, withValues, groupAPI} {
		var stderr bytes.Buffer
		cmd := exec.Command(helm, append([]string{"template", "zfs-csi", "../helm/zfs-csi"}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
		}
		if n := strictly(t, "helm template "+strings.Join(args, " "), out); n < 10 {
			t.Errorf("helm template %v rendered only %d objects", args, n)
		}
	}
}

// helmBinary is $HELM (make test and make release set it to helmtool),
// else the helmtool or helm binary make left in out/tools.
func helmBinary(t *testing.T) string {
	t.Helper()
	if helm := os.Getenv("HELM"); helm != "" {
		return helm
	}
	found, _ := filepath.Glob("../../out/tools/helm*")
	if len(found) == 0 {
		t.Fatal("no helm: run make helmtool, or set HELM")
	}
	absolute, err := filepath.Abs(found[len(found)-1])
	if err != nil {
		t.Fatal(err)
	}
	return absolute
}
