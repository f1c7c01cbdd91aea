package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The opt-in sidecar is wired to itself: it serves on the port the Service
// targets, with the certificate of the Secret the docs have the user make,
// on the daemon's socket; the Service reaches only its pods, on their own
// node; the SnapshotMetadataService tells clients that Service's address.
//
// long: one container's flags, mounts, port and probe, checked against each other
func TestSnapshotMetadataSidecarIsWhereItsServiceSaysItIs(t *testing.T) {
	objects := load(t)
	set := daemonSet(t, objects, snapshotMetadataName)
	pod := get(set, "spec", "template", "spec")
	container := containers(t, set)["csi-snapshot-metadata"]
	if container == nil {
		t.Fatal("no container csi-snapshot-metadata")
	}
	args := texts(container, "args")
	mounts := map[string]string{}
	for _, m := range list(container, "volumeMounts") {
		mounts[str(m, "name")] = str(m, "mountPath")
	}
	volumes := map[string]any{}
	for _, v := range list(pod, "volumes") {
		volumes[str(v, "name")] = v
	}
	if str(volumes["socket-dir"], "hostPath", "path") != socketDir || mounts["socket-dir"] != "/csi" ||
		!slices.Contains(args, "--csi-address=/csi/csi.sock") {
		t.Errorf("the socket: volume %v mounted at %q, args %v; want %s at /csi, --csi-address=/csi/csi.sock",
			volumes["socket-dir"], mounts["socket-dir"], args, socketDir)
	}
	if got := str(volumes["tls"], "secret", "secretName"); got != "zfs-csi-snapshot-metadata-tls" {
		t.Errorf("the tls volume is Secret %q, want zfs-csi-snapshot-metadata-tls (the docs' name)", got)
	}
	for _, flag := range []string{"--tls-cert=" + mounts["tls"] + "/tls.crt", "--tls-key=" + mounts["tls"] + "/tls.key"} {
		if !slices.Contains(args, flag) {
			t.Errorf("args %v lack %s (the kubernetes.io/tls Secret's keys where it is mounted)", args, flag)
		}
	}
	port := -1
	for _, p := range list(container, "ports") {
		if str(p, "name") == "grpc" {
			port, _ = get(p, "containerPort").(int)
		}
	}
	if !slices.Contains(args, fmt.Sprintf("--port=%d", port)) {
		t.Errorf("args %v do not serve on the container port grpc (%d)", args, port)
	}
	if command := texts(container, "readinessProbe", "exec", "command"); !slices.Equal(command,
		[]string{"/zfs-csi", "ctl", "--endpoint", "unix:///csi/csi.sock", "--timeout", "8s", "probe"}) {
		t.Errorf("readiness probe %v, want the other sidecars' zfs-csi ctl probe", command)
	}

	var service map[string]any
	for _, o := range only(t, objects, "Service") {
		if o.name() == snapshotMetadataName {
			service = o.doc
		}
	}
	if service == nil {
		t.Fatalf("no Service %s", snapshotMetadataName)
	}
	podLabels, _ := get(set, "spec", "template", "metadata", "labels").(map[string]any)
	selector, _ := get(service, "spec", "selector").(map[string]any)
	if len(selector) == 0 {
		t.Error("the Service selects no pods")
	}
	for key, value := range selector {
		if podLabels[key] != value {
			t.Errorf("the Service selects %s=%v, the sidecar's pods have %v", key, value, podLabels[key])
		}
	}
	if got := str(service, "spec", "internalTrafficPolicy"); got != "Local" {
		t.Errorf("internalTrafficPolicy %q, want Local (a client reaches its own node's sidecar)", got)
	}
	servicePort := get(service, "spec", "ports", 0, "port")
	if got := str(service, "spec", "ports", 0, "targetPort"); got != "grpc" {
		t.Errorf("the Service targets port %q, want the container's grpc", got)
	}

	sms := only(t, objects, "SnapshotMetadataService")
	if len(sms) != 1 || sms[0].name() != driverName {
		t.Fatalf("SnapshotMetadataServices %v, want one named %s (clients look it up by the driver's name)", sms, driverName)
	}
	want := fmt.Sprintf("%s.%s:%v", snapshotMetadataName, namespace, servicePort)
	if got := str(sms[0].doc, "spec", "address"); got != want {
		t.Errorf("address %q, want the Service's %q", got, want)
	}
	raw, err := os.ReadFile(sms[0].file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `caCert: "`+caCertPlaceholder+`"`) {
		t.Errorf("%s has no caCert %q for the docs' sed", sms[0].file, caCertPlaceholder)
	}
}

// The ClusterRole a backup client binds grants what upstream's client role
// does, less the token of any ServiceAccount (the docs grant a client its
// own, by name, with a Role) and watches (the lister only gets).
func TestSnapshotMetadataClientRoleIsUpstreamsLessTokensOfOthers(t *testing.T) {
	objects := load(t)
	var role map[string]any
	for _, o := range only(t, objects, "ClusterRole") {
		if o.name() == snapshotMetadataName+"-client" {
			role = o.doc
		}
	}
	if role == nil {
		t.Fatalf("no ClusterRole %s-client", snapshotMetadataName)
	}
	ours := grants(role)
	image := str(containers(t, daemonSet(t, objects, snapshotMetadataName))["csi-snapshot-metadata"], "image")
	tag := image[strings.LastIndex(image, ":")+1:]
	upstream := upstreamGrants(t, "github.com/kubernetes-csi/external-snapshot-metadata", tag,
		[]string{"deploy/snapshot-metadata-client-cluster-role.yaml"}, func(o object, g grant) {
			if g.resource == "serviceaccounts/token" || g.verb == "watch" || ours[g] {
				return
			}
			t.Errorf("upstream %s grants %s %s (group %q); %s-client does not", o.name(), g.verb, g.resource, g.group, snapshotMetadataName)
		})
	for g := range ours {
		if !upstream[g] {
			t.Errorf("%s-client grants %v, which upstream's client role does not", snapshotMetadataName, g)
		}
		if g.resource == "serviceaccounts/token" {
			t.Errorf("%s-client grants tokens of every ServiceAccount: %v", snapshotMetadataName, g)
		}
	}
	if len(upstream) == 0 {
		t.Fatalf("upstream's client role at %s grants nothing: moved?", filepath.Join(tag, "deploy"))
	}
}

// The chart's opt-in refuses to render without the CA clients must trust,
// and its address follows the release's namespace (where the Service is).
func TestChartSnapshotMetadataNeedsItsCAAndNamesItsNamespace(t *testing.T) {
	touchInputs(t)
	out, err := exec.Command(helm(t), "template", "zfs-csi", chart, "--set", "snapshotMetadata.enabled=true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "snapshotMetadata.caCert") {
		t.Errorf("helm template without snapshotMetadata.caCert: %v, %s; want an error naming the value", err, out)
	}
	objects := render(t, "--namespace", "backup", "--values", "testdata/snapshot-metadata-values.yaml")
	sms := only(t, objects, "SnapshotMetadataService")
	if got := str(sms[0].doc, "spec", "address"); got != snapshotMetadataName+".backup:6443" {
		t.Errorf("address %q in namespace backup, want %s.backup:6443", got, snapshotMetadataName)
	}
	if got := str(sms[0].doc, "spec", "caCert"); got != testCACert {
		t.Errorf("caCert %q, want the values' %q", got, testCACert)
	}
}

// The sidecar reads the VolumeSnapshotClass of each snapshot (by name, or
// the driver's default by listing), which upstream's role does not grant.
func TestSnapshotMetadataSidecarMayReadSnapshotClasses(t *testing.T) {
	cluster, _ := serviceAccountGrants(t, load(t), snapshotMetadataName)
	for _, verb := range []string{"get", "list"} {
		if !cluster[grant{"snapshot.storage.k8s.io", "volumesnapshotclasses", verb}] {
			t.Errorf("the sidecar may not %s volumesnapshotclasses: every call would be UNAVAILABLE", verb)
		}
	}
}
