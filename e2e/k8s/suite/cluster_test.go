package suite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// env is the cluster under test, from the environment suite.sh sets.
type env struct {
	cs        kubernetes.Interface
	dyn       dynamic.Interface
	node      string
	pool      string
	image     string
	manifests string
	kubectl   string
	chart     string // the chart's directory, as packaging/helm/zfs-csi
	values    string // e2e/k8s/helm-values.yaml, for helm install
	helmTool  string // the helm make helm builds
	ns        string // where the scenarios' claims and pods are
	driverNS  string // where the sidecars run: the manifests', then the chart's
}

var (
	snapshotGVR = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	contentGVR  = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

func newEnv(t *testing.T) *env {
	t.Helper()
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			t.Skipf("%s is not set: these scenarios run on the e2e-k8s node (make e2e-k8s)", k)
		}
		return v
	}
	e := &env{
		node: get("ZFS_CSI_E2E_NODE"), pool: get("ZFS_CSI_E2E_POOL"), image: get("ZFS_CSI_E2E_WORKLOAD_IMAGE"),
		manifests: get("ZFS_CSI_E2E_MANIFESTS"), kubectl: get("ZFS_CSI_E2E_KUBECTL"), chart: get("ZFS_CSI_E2E_CHART"),
		values: get("ZFS_CSI_E2E_CHART_VALUES"), helmTool: get("ZFS_CSI_E2E_HELM"),
		ns: "e2e", driverNS: driverNS,
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", get("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	if e.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// run runs a command on the node and returns its combined output.
func run(name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), err
}

func must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ctx() context.Context { return context.Background() }

// pvc makes a claim of class sc. mode is Filesystem or Block; from names a
// VolumeSnapshot ("snap:NAME") or a PVC ("pvc:NAME") to fill it from.
func (e *env) pvc(t *testing.T, name, sc, size string, mode corev1.PersistentVolumeMode, from string) {
	t.Helper()
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc,
			VolumeMode:       &mode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if kind, src, ok := strings.Cut(from, ":"); ok {
		switch kind {
		case "snap":
			group := "snapshot.storage.k8s.io"
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: src}
		case "pvc":
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: src}
		}
	}
	if _, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Create(ctx(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.removedIfFailed(t, func() error {
		return e.cs.CoreV1().PersistentVolumeClaims(e.ns).Delete(ctx(), name, metav1.DeleteOptions{})
	})
}

// removedIfFailed deletes, without waiting or failing, what a test made
// when that test fails before its own checked deletion: so one failed
// scenario leaves nothing for NothingLeft to report under its name.
// Cleanups run last made first: pods, then claims made from a snapshot,
// then the snapshot, then its source.
func (e *env) removedIfFailed(t *testing.T, remove func() error) {
	t.Cleanup(func() {
		if t.Failed() {
			_ = remove()
		}
	})
}

// pod starts a busybox pod using claim at /data (Filesystem) or /dev/xvda
// (Block) that runs script with sh -c, on the node whose ZFS the scenarios
// read (the cluster has two). Never restarted: a failing write shows as a
// failed pod (a container the runtime could not start is made again:
// restartIfNeverStarted).
func (e *env) pod(t *testing.T, name, claim string, block bool, script string) {
	t.Helper()
	e.podOn(t, map[string]string{"kubernetes.io/hostname": e.node}, name, claim, block, script)
}

// podOn is pod with the node selector given (nil: where the scheduler puts
// it).
func (e *env) podOn(t *testing.T, nodeSelector map[string]string, name, claim string, block bool, script string) {
	t.Helper()
	c := corev1.Container{
		Name: "c", Image: e.image, ImagePullPolicy: corev1.PullNever,
		Command:                  []string{"/bin/sh", "-c", script},
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
	if block {
		c.VolumeDevices = []corev1.VolumeDevice{{Name: "v", DevicePath: "/dev/xvda"}}
	} else {
		c.VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/data"}}
	}
	zero := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  nodeSelector,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(ctx(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.removedIfFailed(t, func() error { return e.cs.CoreV1().Pods(e.ns).Delete(ctx(), name, metav1.DeleteOptions{}) })
}

// podWait is how long a scenario waits for one of its pods to run or to
// finish, or for kubelet to act on its volume: scheduling, the driver's
// stage and publish, the sandbox, the container, the status kubelet reports.
// On the TCG nodes a v1.37.2 kubelet with a scenario's pods at work took
// more than 5 minutes for pods whose driver calls took seconds: its /healthz
// answered in 8-14 s through the apiserver, and an idle node spent 1.7 of
// its 2 vCPUs on kubelet, containerd, the sidecars and short-lived
// processes. A pod that never runs still fails its scenario, later.
const podWait = 10 * time.Minute

// pullWait is added to podWait where the pod's volume first comes from the
// other node over the peer channel, or the scheduler may try the other node
// first.
const pullWait = 5 * time.Minute

// finished waits for a run-to-completion pod and returns its termination
// message (what the script wrote to /dev/termination-log); a failed pod fails
// the test with that message and the pod's events.
func (e *env) finished(t *testing.T, name string, timeout time.Duration) string {
	t.Helper()
	var p *corev1.Pod
	e2eutil.Eventually(t, timeout, "pod "+name+" to finish", func() (bool, error) {
		var err error
		if p, err = e.currentPod(t, name); err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, fmt.Errorf("phase %s; %s", p.Status.Phase, e.events(name))
	})
	msg := ""
	if cs := p.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Terminated != nil {
		msg = strings.TrimSpace(cs[0].State.Terminated.Message)
	}
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s failed: %q; events: %s", name, msg, e.events(name))
	}
	return msg
}

// running waits for a pod to run and returns it.
func (e *env) running(t *testing.T, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	e2eutil.Eventually(t, timeout, "pod "+name+" to run", func() (bool, error) {
		var err error
		if p, err = e.currentPod(t, name); err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("pod %s ended (%s) instead of running; events: %s", name, p.Status.Phase, e.events(name))
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s; %s", p.Status.Phase, e.events(name))
	})
	return p
}

// events summarises the events of one object of the test namespace, for
// failure messages.
func (e *env) events(name string) string { return e.eventsIn(e.ns, name) }

func (e *env) eventsIn(ns, name string) string {
	list, err := e.cs.CoreV1().Events(ns).List(ctx(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, ev := range list.Items {
		fmt.Fprintf(&b, "[%s %s: %s] ", ev.Type, ev.Reason, ev.Message)
	}
	return b.String()
}

// deletePod deletes a pod and waits until it is gone (its volumes unpublished).
func (e *env) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := e.cs.CoreV1().Pods(e.ns).Delete(ctx(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	e2eutil.Eventually(t, 3*time.Minute, "pod "+name+" to be gone", func() (bool, error) {
		_, err := e.cs.CoreV1().Pods(e.ns).Get(ctx(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// boundPV waits for the claim to be bound and returns its PV's name.
func (e *env) boundPV(t *testing.T, claim string) string {
	t.Helper()
	var pv string
	e2eutil.Eventually(t, 3*time.Minute, "PVC "+claim+" to be bound", func() (bool, error) {
		c, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx(), claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pv = c.Spec.VolumeName
		return c.Status.Phase == corev1.ClaimBound, fmt.Errorf("phase %s; %s", c.Status.Phase, e.events(claim))
	})
	return pv
}

// dataset returns the ZFS dataset behind a PV (its CSI volume handle's
// dataset, as the driver names it: the PV's volumeAttributes or zfs list).
func (e *env) dataset(t *testing.T, pv string) string {
	t.Helper()
	out := must(t, "zfs", "list", "-H", "-o", "name,zfs.csi.dev:pv-name", "-t", "filesystem,volume", "-r", e.pool)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) == 2 && f[1] == pv {
			return f[0]
		}
	}
	t.Fatalf("no dataset of %s carries the PV name %s:\n%s", e.pool, pv, out)
	return ""
}

// namespace makes the namespace the scenarios work in and waits for its
// default service account, without which no pod is admitted.
func (e *env) namespace(t *testing.T) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	e2eutil.Eventually(t, 2*time.Minute, "the default service account of "+e.ns, func() (bool, error) {
		_, err := e.cs.CoreV1().ServiceAccounts(e.ns).Get(ctx(), "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// gonePV waits for a PV to be deleted (reclaim policy Delete).
func (e *env) gonePV(t *testing.T, name string) {
	t.Helper()
	e2eutil.Eventually(t, 3*time.Minute, "PV "+name+" to go", func() (bool, error) {
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx(), name, metav1.GetOptions{})
		if err == nil {
			return false, fmt.Errorf("phase %s; %s", pv.Status.Phase, e.eventsIn("", name))
		}
		return apierrors.IsNotFound(err), err
	})
}
