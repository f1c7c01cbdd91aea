package suite

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// helm runs the helm tool against the cluster, with its own caches, and
// returns what it printed.
func (e *env) helm(t *testing.T, args ...string) string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(e.helmTool, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// podNodes says which node each pod is on, for failure messages.
func podNodes(pods []corev1.Pod) []string {
	var where []string
	for _, p := range pods {
		where = append(where, p.Name+"@"+p.Spec.NodeName)
	}
	return where
}

// withoutDaemon makes node one that runs no zfs-csi: its daemon stopped
// and the label kubelet gave the node at registration removed (kubelet
// keeps it when a plugin goes). daemonBack, or the test's end, undoes it.
func (e *env) withoutDaemon(t *testing.T, node string) {
	t.Helper()
	t.Cleanup(func() {
		if e.hasDaemonLabel(t, node) {
			return
		}
		if out, code := e.hostOn(t, node, "start-zfs-csi", "systemctl start zfs-csi"); code != 0 {
			t.Errorf("starting zfs-csi again on %s: exit %d: %s", node, code, out)
		}
	})
	if out, code := e.hostOn(t, node, "stop-zfs-csi", "systemctl stop zfs-csi"); code != 0 {
		t.Fatalf("stopping zfs-csi on %s: exit %d: %s", node, code, out)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.cs.CoreV1().Nodes().Get(ctx(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		delete(n.Labels, topologyKey)
		_, err = e.cs.CoreV1().Nodes().Update(ctx(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// daemonBack starts zfs-csi on node again and waits for kubelet to label
// the node at its registration.
func (e *env) daemonBack(t *testing.T, node string) {
	t.Helper()
	if out, code := e.hostOn(t, node, "start-zfs-csi", "systemctl start zfs-csi"); code != 0 {
		t.Fatalf("starting zfs-csi on %s: exit %d: %s", node, code, out)
	}
	e2eutil.Eventually(t, 3*time.Minute, "kubelet to label "+node+" again", func() (bool, error) {
		return e.hasDaemonLabel(t, node), nil
	})
}

func (e *env) hasDaemonLabel(t *testing.T, node string) bool {
	n, err := e.cs.CoreV1().Nodes().Get(ctx(), node, metav1.GetOptions{})
	return err == nil && n.Labels[topologyKey] == node
}

// hostOn runs a shell command as root in node's own root file system
// (a privileged pod in the host's PID namespace, through /proc/1/root), as
// a shell on that node would, and returns its output and exit status.
func (e *env) hostOn(t *testing.T, node, name, command string) (string, int) {
	t.Helper()
	script := `out=$(chroot /proc/1/root /bin/sh -c "$1" 2>&1); code=$?; printf 'exit %s\n%s\n' "$code" "$out" >/dev/termination-log`
	yes, zero := true, int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &zero,
			HostPID:                       true,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "host", Image: e.image, ImagePullPolicy: corev1.PullNever,
				Command:                  []string{"/bin/sh", "-c", script, "sh", command},
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				SecurityContext:          &corev1.SecurityContext{Privileged: &yes},
			}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(ctx(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.removedIfFailed(t, func() error { return e.cs.CoreV1().Pods(e.ns).Delete(ctx(), p.Name, metav1.DeleteOptions{}) })
	msg := e.finished(t, name, podWait)
	e.deletePod(t, name)
	first, rest, _ := strings.Cut(msg, "\n")
	code, err := strconv.Atoi(strings.TrimPrefix(first, "exit "))
	if err != nil {
		t.Fatalf("pod %s reported %q", name, msg)
	}
	return rest, code
}
