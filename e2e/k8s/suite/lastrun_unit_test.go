package suite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A restarted sidecar whose previous run kubelet already removed is reported
// with the end of that run's log from the node's kept copies, and says that
// the exit itself is lost; one that never restarted adds nothing; a log in
// neither directory is named as missing, not skipped.
func TestLastRunReadsTheKeptLogOfARemovedRun(t *testing.T) {
	pods, kept := t.TempDir(), t.TempDir()
	old := podLogDirs
	podLogDirs = []string{pods, kept}
	t.Cleanup(func() { podLogDirs = old })

	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "zfs-csi", Name: "zfs-csi-sidecars-x", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "zfs-csi-e2e"}}
	if got := lastRun(p, corev1.ContainerStatus{Name: "csi-snapshotter"}); got != "" {
		t.Errorf("never restarted: %q, want nothing", got)
	}
	restarted := corev1.ContainerStatus{Name: "csi-snapshotter", RestartCount: 1}
	got := lastRun(p, restarted)
	if !strings.Contains(got, "no record of the last run's exit") || !strings.Contains(got, "zfs-csi_zfs-csi-sidecars-x_u1/csi-snapshotter/0.log is in none of") {
		t.Errorf("restarted, no termination state, no log: %q", got)
	}
	dir := plantLog(t, kept, "line 1\nLost connection to CSI driver, exiting\n")
	got = lastRun(p, restarted)
	if !strings.Contains(got, "no record of the last run's exit") || !strings.HasSuffix(got, "line 1\nLost connection to CSI driver, exiting") ||
		!strings.Contains(got, filepath.Join(dir, "0.log")) {
		t.Errorf("restarted, its log kept: %q, want the kept log's end and where it is", got)
	}
	// While kubelet still has the run, its exit and its own copy of the log
	// are what is printed.
	live := plantLog(t, pods, "kubelet's copy\n")
	restarted.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "Lost connection to CSI driver, exiting"}
	got = lastRun(p, restarted)
	if !strings.Contains(got, `exit code 1, reason "Error", message "Lost connection to CSI driver, exiting"`) ||
		!strings.HasSuffix(got, "("+filepath.Join(live, "0.log")+"):\nkubelet's copy") {
		t.Errorf("restarted, kubelet still has the run: %q, want its exit and kubelet's log", got)
	}
}

// plantLog writes the first run's log of the test pod's csi-snapshotter
// under a log directory as kubelet lays it out, and returns its directory.
func plantLog(t *testing.T, root, content string) string {
	t.Helper()
	dir := filepath.Join(root, "zfs-csi_zfs-csi-sidecars-x_u1", "csi-snapshotter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "0.log"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
