package suite

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func terminated(code int32, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg}}}
}

// The statuses are kubelet's: a start that runc refused (the message of the
// Latency run that lost a pod this way), a script that failed, a container
// killed, one still running.
func TestOnlyAContainerThatNeverStartedIsStartedAgain(t *testing.T) {
	runc := "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to create new parent process: namespace path: lstat /proc/0/ns/ipc: no such file or directory: unknown"
	for _, c := range []struct {
		name     string
		phase    corev1.PodPhase
		statuses []corev1.ContainerStatus
		want     bool
	}{
		{"runc refused the start", corev1.PodFailed, []corev1.ContainerStatus{terminated(128, "StartError", runc)}, true},
		{"the script failed", corev1.PodFailed, []corev1.ContainerStatus{terminated(1, "Error", "write failed")}, false},
		{"exit 128 from the script", corev1.PodFailed, []corev1.ContainerStatus{terminated(128, "Error", "")}, false},
		{"StartError with another code", corev1.PodFailed, []corev1.ContainerStatus{terminated(1, "StartError", "")}, false},
		{"one of two containers ran", corev1.PodFailed, []corev1.ContainerStatus{terminated(128, "StartError", runc), terminated(1, "Error", "")}, false},
		{"no status yet", corev1.PodFailed, nil, false},
		{"the pod has not failed", corev1.PodPending, []corev1.ContainerStatus{terminated(128, "StartError", runc)}, false},
		{"running", corev1.PodRunning, []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}, false},
	} {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: c.phase, ContainerStatuses: c.statuses}}
		msg, got := startFailed(p)
		if got != c.want {
			t.Errorf("%s: startFailed = %v, want %v", c.name, got, c.want)
		}
		if got && msg != runc {
			t.Errorf("%s: message %q, want the runtime's", c.name, msg)
		}
	}
}

func TestAPodIsMadeAgainFromItsOwnSpecAtMostTwice(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lat-ext4-05", Namespace: "e2e", UID: "u", ResourceVersion: "7", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.PodSpec{NodeName: "zfs-csi-e2e", NodeSelector: map[string]string{"kubernetes.io/hostname": "zfs-csi-e2e"}, RestartPolicy: corev1.RestartPolicyNever},
	}
	for want := 1; want <= startRetries; want++ {
		next := again(p)
		if next == nil {
			t.Fatalf("retry %d: nil, want a pod", want)
		}
		if next.Name != p.Name || next.Namespace != p.Namespace || next.Labels["a"] != "b" || next.UID != "" || next.ResourceVersion != "" {
			t.Fatalf("retry %d: metadata %+v", want, next.ObjectMeta)
		}
		if next.Spec.NodeName != "" || next.Spec.NodeSelector["kubernetes.io/hostname"] != "zfs-csi-e2e" || next.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Fatalf("retry %d: spec %+v", want, next.Spec)
		}
		if p.Spec.NodeName != "zfs-csi-e2e" {
			t.Fatal("again changed the failed pod's spec")
		}
		if got := next.Annotations[retriesAnnotation]; got != string(rune('0'+want)) {
			t.Fatalf("retry %d: annotation %q", want, got)
		}
		p = next
		p.Spec.NodeName = "zfs-csi-e2e"
	}
	if next := again(p); next != nil {
		t.Fatalf("a third retry: %+v", next.ObjectMeta)
	}
}
