package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// helmtool stands in for helm only while it is helm's code at the version
// the Makefile builds for make chart and make e2e-k8s.
func TestPinnedAtTheMakefilesHelmVersion(t *testing.T) {
	makefile, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^HELM_VERSION := (\S+)$`).FindSubmatch(makefile)
	got := regexp.MustCompile(`(?m)^\s+helm\.sh/helm/v3 (\S+)$`).FindSubmatch(goMod)
	if want == nil || got == nil {
		t.Fatalf("HELM_VERSION in the Makefile: %q; helm.sh/helm/v3 in packaging/checks/go.mod: %q", want, got)
	}
	if string(got[1]) != string(want[1]) {
		t.Errorf("packaging/checks/go.mod has helm %s, the Makefile builds %s", got[1], want[1])
	}
}

// chart writes a chart of the given templates into a temporary directory.
func chart(t *testing.T, templates map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "c")
	files := map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: c\nversion: 0.1.0\nappVersion: 0.1.0\n",
		"values.yaml": "size: 1\n",
		"values.schema.json": `{"$schema": "https://json-schema.org/draft-07/schema#", "type": "object",
			"additionalProperties": false, "properties": {"size": {"type": "integer", "minimum": 1}}}`,
	}
	for name, text := range templates {
		files["templates/"+name] = text
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func helmtool(args ...string) (string, error) {
	var out strings.Builder
	err := run(args, &out)
	return out.String(), err
}

const configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n  namespace: {{ .Release.Namespace }}\ndata:\n  size: \"{{ .Values.size }}\"\n  kube: \"{{ .Capabilities.KubeVersion.Version }}\"\n  snapshots: \"{{ .Capabilities.APIVersions.Has \"snapshot.storage.k8s.io/v1\" }}\"\n"

// What helm template does with each flag the tests pass: the release name
// and namespace, --values then --set over values.yaml, the Kubernetes
// version and extra APIs the templates see; the notes not printed, hooks
// printed after the manifests.
func TestTemplate(t *testing.T) {
	values, later := filepath.Join(t.TempDir(), "values.yaml"), filepath.Join(t.TempDir(), "later.yaml")
	if err := os.WriteFile(values, []byte("size: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(later, []byte("size: 6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := chart(t, map[string]string{
		"cm.yaml":   configMap,
		"NOTES.txt": "notes of {{ .Release.Name }}",
		"hook.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: hook\n  annotations:\n    helm.sh/hook: pre-install\n",
	})
	for _, test := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"name: r\n", "namespace: default\n", `size: "1"`, `kube: "v1.20.0"`, `snapshots: "false"`}},
		{[]string{"--namespace", "storage", "--values", values, "--kube-version", "1.34.0", "--api-versions", "snapshot.storage.k8s.io/v1"},
			[]string{"namespace: storage\n", `size: "5"`, `kube: "v1.34.0"`, `snapshots: "true"`}},
		{[]string{"-n=other", "-f", values, "--set", "size=7", "-a", "x/v1,snapshot.storage.k8s.io/v1"},
			[]string{"namespace: other\n", `size: "7"`, `snapshots: "true"`}},
		{[]string{"--values", values, "--values=" + later}, []string{`size: "6"`}},
	} {
		out, err := helmtool(append([]string{"template", "r", dir}, test.args...)...)
		if err != nil {
			t.Fatalf("template %v: %v", test.args, err)
		}
		for _, want := range test.want {
			if !strings.Contains(out, want) {
				t.Errorf("template %v lacks %q:\n%s", test.args, want, out)
			}
		}
		if strings.Contains(out, "notes of") {
			t.Errorf("template %v prints the notes:\n%s", test.args, out)
		}
		if cm, hook := strings.Index(out, "# Source: c/templates/cm.yaml"), strings.Index(out, "# Source: c/templates/hook.yaml"); cm < 0 || hook < cm {
			t.Errorf("template %v: the manifest and then the hook, each under its # Source:\n%s", test.args, out)
		}
	}
}

// The values schema, the release name and the chart's kubeVersion refuse a
// render, as they refuse helm install.
func TestTemplateRefuses(t *testing.T) {
	dir := chart(t, map[string]string{"cm.yaml": configMap})
	for _, args := range [][]string{
		{"template", "r", dir, "--set", "size=0"},
		{"template", "r", dir, "--set", "colour=red"},
		{"template", "R_", dir},
		{"template", "r", dir, "--kube-version", "not-a-version"},
		{"template", "r", dir, "--namespace"},
		{"template", "r"},
	} {
		if out, err := helmtool(args...); err == nil {
			t.Errorf("%v: no error\n%s", args, out)
		}
	}
	// A flag helm has and helmtool does not know is an error, not ignored.
	for _, args := range [][]string{
		{"template", "r", dir, "--include-crds", "--namespace", "x"},
		{"lint", "--quiet", dir},
		{"package", dir, "--set", "size=2"},
	} {
		if _, err := helmtool(args...); err == nil || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("%v: %v, want unknown flag", args, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: c\nversion: 0.1.0\nkubeVersion: '>=1.30.0'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := helmtool("template", "r", dir); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("a chart for >=1.30.0 rendered for the default v1.20.0: %v", err)
	}
	if _, err := helmtool("template", "r", dir, "--kube-version", "1.34.0"); err != nil {
		t.Errorf("a chart for >=1.30.0 on 1.34.0: %v", err)
	}
}

// lint fails on an error; with --strict on a warning too.
func TestLint(t *testing.T) {
	clean := chart(t, map[string]string{"cm.yaml": configMap})
	warns := chart(t, map[string]string{"cm.yaml": "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n"})
	fails := chart(t, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.size\n"})
	for _, test := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"lint", "--strict", clean}, true},
		{[]string{"lint", clean, "--set", "size=0"}, false},
		{[]string{"lint", warns}, true},
		{[]string{"lint", "--strict", warns}, false},
		{[]string{"lint", "--strict=false", warns}, true},
		{[]string{"lint", fails}, false},
	} {
		out, err := helmtool(test.args...)
		if (err == nil) != test.ok {
			t.Errorf("%v: error %v, want ok %v\n%s", test.args, err, test.ok, out)
		}
	}
}

// package sets the version and appVersion it is given; show chart reads
// them back from the archive.
func TestPackageAndShowChart(t *testing.T) {
	dir := chart(t, map[string]string{"cm.yaml": configMap})
	dest := t.TempDir()
	out, err := helmtool("package", dir, "--version", "1.2.3+git20261126.0123456789ab", "--app-version", "1.2.3+git20261126.0123456789ab", "--destination", dest)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dest, "c-1.2.3+git20261126.0123456789ab.tgz")
	if !strings.Contains(out, archive) {
		t.Fatalf("package printed %q, want it to name %s", out, archive)
	}
	out, err = helmtool("show", "chart", archive)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nversion: 1.2.3+git20261126.0123456789ab\n") || !strings.Contains(out, "appVersion: 1.2.3+git20261126.0123456789ab\n") {
		t.Errorf("show chart:\n%s", out)
	}
	if _, err := helmtool("package", dir, "--version", "one", "--destination", dest); err == nil {
		t.Error("package --version one: no error")
	}
}
