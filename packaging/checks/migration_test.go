package checks

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kindAndName lists "Kind/namespace/name" of every object of a YAML stream.
func kindAndName(t *testing.T, stream []byte) []string {
	t.Helper()
	var keys []string
	for _, doc := range strings.Split(string(stream), "\n---") {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		if head.Kind != "" {
			keys = append(keys, head.Kind+"/"+head.Metadata.Namespace+"/"+head.Metadata.Name)
		}
	}
	slices.Sort(keys)
	return keys
}

// docs/kubernetes.md's move from the plain manifests to the chart is one
// helm install --take-ownership of the chart the package installs: it must
// name, in the manifests' namespace, every object kubectl apply made of
// the manifests' directory and snapshots/ (less the Namespace, which the
// chart does not own and helm uninstall must leave), so that none is left
// behind unmanaged, nor an object the chart makes collide with one it does
// not take. The command runs as written, with the chart where the package
// puts it, on a cluster with the snapshot API.
func TestMovingFromTheManifestsToTheChartTakesEveryObject(t *testing.T) {
	text, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n## From the plain manifests to the chart\n")
	if !ok {
		t.Fatal("docs/kubernetes.md has no section From the plain manifests to the chart")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?ms)^```sh\n(.*?)^```$").FindAllStringSubmatch(section, -1)
	if len(blocks) != 1 || !strings.HasPrefix(blocks[0][1], "helm install ") || !strings.Contains(blocks[0][1], "--take-ownership") {
		t.Fatalf("the section's commands are %q; this test runs one helm install --take-ownership: update it with the document", blocks)
	}
	command := strings.TrimSpace(blocks[0][1])

	root := t.TempDir()
	helmDir := filepath.Join(root, "usr/share/zfs-csi/helm")
	if out, err := exec.Command(helmBinary(t), "package", "../helm/zfs-csi", "--version", "0.1.0", "--app-version", "0.1.0", "--destination", helmDir).CombinedOutput(); err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	charted := kindAndName(t, []byte(runInstalled(t, root, command, "--api-versions", "snapshot.storage.k8s.io/v1")))

	var applied []byte
	for _, pattern := range []string{"../kubernetes/*.yaml", "../kubernetes/snapshots/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			applied = append(append(applied, data...), "\n---\n"...)
		}
	}
	var want []string
	for _, key := range kindAndName(t, applied) {
		if !strings.HasPrefix(key, "Namespace/") {
			want = append(want, key)
		}
	}
	for _, key := range want {
		if !slices.Contains(charted, key) {
			t.Errorf("%s leaves %s to kubectl: the chart does not render it", command, key)
		}
	}
	for _, key := range charted {
		if !slices.Contains(want, key) {
			t.Errorf("%s makes %s, which the manifests did not", command, key)
		}
	}
}
