package guest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runtimeProblems runs config.sh's runtime_problems on a planted containerd
// source tree: its RELEASES.md holds the matrix rows given, its
// script/setup/runc-version the runc release given ("" leaves the file out).
func runtimeProblems(t *testing.T, rows, runcVersion, k8s, containerd, runc string) string {
	t.Helper()
	src := t.TempDir()
	releases := "# Releases\n\n| Kubernetes Version | containerd Version | CRI Version |\n" +
		"|--------------------|--------------------|-------------|\n" + rows
	if err := os.WriteFile(filepath.Join(src, "RELEASES.md"), []byte(releases), 0o644); err != nil {
		t.Fatal(err)
	}
	if runcVersion != "" {
		if err := os.MkdirAll(filepath.Join(src, "script/setup"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "script/setup/runc-version"), []byte(runcVersion+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "-c", `source ../k8s/config.sh && runtime_problems "$1"`, "bash", src)
	cmd.Env = append(os.Environ(), "K8S_VERSION="+k8s, "CONTAINERD_VERSION="+containerd, "RUNC_VERSION="+runc)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("runtime_problems: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// The nodes' containerd and runc must be ones containerd's own matrix gives
// for the cluster's Kubernetes: Debian 12's containerd 1.6.20 ran v1.37.2
// nodes, a pair no release supports, and nothing said so.
func TestTheNodesRuntimeIsHeldToContainerdsMatrix(t *testing.T) {
	const matrix = "| 1.36 | 2.3.0+, 2.2.1+ | v1 |\n" +
		"| 1.37 | 2.4.0+, 2.3.2+ | v1 |\n" +
		"| 1.34 | 2.1.3+, 2.0.6+, 1.7.28+, 1.6.39+ | v1 |\n"
	cases := []struct {
		name, rows, runcVersion, k8s, containerd, runc string
		want                                           string // "" when the pair is fine, else a piece of the line
	}{
		{"the newest line the row lists", matrix, "v1.5.2", "v1.37.2", "v2.4.2", "v1.5.2", ""},
		{"an older line the row lists, at its patch", matrix, "v1.5.2", "v1.37.2", "v2.3.2", "v1.5.2", ""},
		{"a line newer than the row's", matrix, "v1.5.2", "v1.34.4", "v2.4.2", "v1.5.2", ""},
		{"runc newer than containerd's CI's", matrix, "v1.5.2", "v1.36.3", "v2.3.0", "v1.6.0", ""},
		{"an older line the row lists, below its patch", matrix, "v1.5.2", "v1.37.2", "v2.3.1", "v1.5.2",
			"containerd v2.3.1 does not support Kubernetes 1.37: its RELEASES.md asks for 2.4.0+, 2.3.2+"},
		{"a line older than the row's", matrix, "v1.5.2", "v1.37.2", "v1.7.30", "v1.5.2",
			"containerd v1.7.30 does not support Kubernetes 1.37"},
		{"Debian 12's containerd on 1.34", matrix, "v1.5.2", "v1.34.4", "v1.6.20", "v1.5.2",
			"asks for 2.1.3+, 2.0.6+, 1.7.28+, 1.6.39+"},
		{"a Kubernetes the matrix does not know", matrix, "v1.5.2", "v1.38.0", "v2.4.2", "v1.5.2",
			"lists no containerd for Kubernetes 1.38"},
		{"a minor that only prefixes a row's", "| 1.3 | 2.4.0+ | v1 |\n", "v1.5.2", "v1.37.2", "v2.4.2", "v1.5.2",
			"lists no containerd for Kubernetes 1.37"},
		{"runc older than containerd's CI's", matrix, "v1.5.2", "v1.37.2", "v2.4.2", "v1.1.5",
			"runc v1.1.5 is older than v1.5.2"},
		{"no runc release named", matrix, "", "v1.37.2", "v2.4.2", "v1.5.2", "names no runc release"},
		{"not a Kubernetes release", matrix, "v1.5.2", "latest", "v2.4.2", "v1.5.2", "is not a Kubernetes release"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := runtimeProblems(t, c.rows, c.runcVersion, c.k8s, c.containerd, c.runc)
			switch {
			case c.want == "" && got != "":
				t.Errorf("the pair should run %s, got:\n%s", c.k8s, got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("want a line with %q, got:\n%s", c.want, got)
			}
		})
	}
}

// The pinned containerd and runc are held to the real matrix of that
// containerd (downloaded from the module proxy, as make e2e-k8s does) for the
// harness's default Kubernetes and the newest it runs.
func TestThePinnedRuntimeRunsEveryKubernetesTheHarnessRuns(t *testing.T) {
	script := `source ../k8s/config.sh
dir="$(mod_field "github.com/containerd/containerd/v2@$CONTAINERD_VERSION")"
[[ -d $dir ]] || { echo "go mod download of containerd $CONTAINERD_VERSION gave no directory"; exit 1; }
for K8S_VERSION in "$K8S_VERSION" v1.37.2; do runtime_problems "$dir"; done`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "CONTAINERD_VERSION=", "RUNC_VERSION=", "K8S_VERSION=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("the pinned containerd and runc do not run every Kubernetes the harness runs:\n%s", s)
	}
}
