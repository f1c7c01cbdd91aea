package suite

import (
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The scenarios' pods are never restarted (a failing script shows as a
// failed pod), so one container the runtime could not start would fail a
// scenario that has nothing to do with it. On TCG nodes under load,
// containerd's CRI sometimes starts a container before it knows its
// sandbox's pid and runc answers "namespace path: lstat /proc/0/ns/ipc"
// (containerd/containerd#9160, open); kubelet then reports the container
// terminated with exit code 128 and reason StartError, and the script never
// ran. Such a pod, and only such a pod, is made again from its own spec, at
// most startRetries times, and the log says so.
const (
	startErrorReason   = "StartError" // containerd's CRI, errorStartReason
	startErrorExitCode = 128          // containerd's CRI, errorStartExitCode
	startRetries       = 2
	retriesAnnotation  = "zfs-csi.e2e/start-retries"
)

// startFailed returns the runtime's message when every container of the
// failed pod p ended without having run: the runtime could not start it.
func startFailed(p *corev1.Pod) (string, bool) {
	if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) == 0 {
		return "", false
	}
	msg := ""
	for _, cs := range p.Status.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil || term.Reason != startErrorReason || term.ExitCode != startErrorExitCode {
			return "", false
		}
		msg = term.Message
	}
	return msg, true
}

// again is the pod to create in place of p, whose container the runtime
// could not start: p's spec, scheduled afresh, with its retries counted; nil
// once p has used its retries.
func again(p *corev1.Pod) *corev1.Pod {
	n, _ := strconv.Atoi(p.Annotations[retriesAnnotation])
	if n >= startRetries {
		return nil
	}
	annotations := map[string]string{}
	for k, v := range p.Annotations {
		annotations[k] = v
	}
	annotations[retriesAnnotation] = strconv.Itoa(n + 1)
	spec := *p.Spec.DeepCopy()
	spec.NodeName = ""
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Annotations: annotations},
		Spec:       spec,
	}
}

// restartIfNeverStarted makes p again when the runtime could not start its
// container and p has retries left, and says whether it did; the waits call
// it on every failed pod before they judge it.
func (e *env) restartIfNeverStarted(t *testing.T, p *corev1.Pod) bool {
	t.Helper()
	msg, ok := startFailed(p)
	if !ok {
		return false
	}
	next := again(p)
	if next == nil {
		return false
	}
	t.Logf("the runtime could not start pod %s's container (%s); making the pod again (%s=%s)", p.Name, msg, retriesAnnotation, next.Annotations[retriesAnnotation])
	e.deletePod(t, p.Name)
	if _, err := e.cs.CoreV1().Pods(p.Namespace).Create(ctx(), next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return true
}

// currentPod gets the pod of this name for a wait, and answers an error
// (keep waiting) when it had to make the pod again.
func (e *env) currentPod(t *testing.T, name string) (*corev1.Pod, error) {
	t.Helper()
	p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if e.restartIfNeverStarted(t, p) {
		return nil, fmt.Errorf("pod %s made again", name)
	}
	return p, nil
}
