package suite

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A restarted sidecar whose previous run kubelet already removed is reported
// as such, not as a bare restart count; one that never restarted adds nothing.
func TestLastRunSaysWhenKubeletKeptNoRecord(t *testing.T) {
	p := corev1.Pod{}
	if got := lastRun(p, corev1.ContainerStatus{Name: "csi-snapshotter"}); got != "" {
		t.Errorf("never restarted: %q, want nothing", got)
	}
	got := lastRun(p, corev1.ContainerStatus{Name: "csi-snapshotter", RestartCount: 1})
	if !strings.Contains(got, "no record of the last run") {
		t.Errorf("restarted, no termination state: %q, want it to say kubelet kept no record", got)
	}
}
