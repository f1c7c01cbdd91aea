// Package kubernetes holds the Kubernetes manifests of zfs-csi (the *.yaml
// files beside this one, and in snapshots/ those that need the snapshot
// CRDs) and the test that parses every one of them and
// checks the fields that matter: one driver name throughout, the CSIDriver
// semantics, the sidecars' arguments and socket, and RBAC for what the
// sidecars do.
package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	driverName = "zfs.csi.dev"
	namespace  = "zfs-csi"
	socketDir  = "/var/lib/kubelet/plugins/" + driverName
	// contentPolicy names the admission policy (and its binding) that
	// refuses contents no node's csi-snapshotter would see.
	contentPolicy = "zfs-csi-snapshot-content-has-a-node"
)

// object is one parsed manifest document.
type object struct {
	file string
	doc  map[string]any
	node string // the node a template was expanded for
}

func (o object) kind() string { return str(o.doc, "kind") }
func (o object) name() string { return str(o.doc, "metadata", "name") }
func (o object) String() string {
	return fmt.Sprintf("%s %s (%s)", o.kind(), o.name(), o.file)
}

// get walks maps by key and lists by index; it returns nil when the path
// does not exist.
func get(node any, path ...any) any {
	for _, step := range path {
		switch key := step.(type) {
		case string:
			m, ok := node.(map[string]any)
			if !ok {
				return nil
			}
			node = m[key]
		case int:
			l, ok := node.([]any)
			if !ok || key >= len(l) {
				return nil
			}
			node = l[key]
		}
	}
	return node
}

func str(node any, path ...any) string {
	value, _ := get(node, path...).(string)
	return value
}

func list(node any, path ...any) []any {
	value, _ := get(node, path...).([]any)
	return value
}

func texts(node any, path ...any) []string {
	var out []string
	for _, item := range list(node, path...) {
		out = append(out, fmt.Sprint(item))
	}
	return out
}

// The manifests applied apart from this directory's, so that kubectl apply
// -f of this directory works on any cluster: snapshotDir needs the snapshot
// API (its CRDs); groupSnapshotDir the group snapshot API and
// MutatingAdmissionPolicy; encryptionDir is what a user opts into for
// encrypted volumes.
const (
	snapshotDir      = "snapshots"
	groupSnapshotDir = "groupsnapshots"
	encryptionDir    = "encryption"
	// snapshotMetadataDir is the opt-in for changed-block tracking through
	// Kubernetes: the external-snapshot-metadata sidecar.
	snapshotMetadataDir = "snapshot-metadata"
)

var optionalDirs = []string{snapshotDir, groupSnapshotDir, encryptionDir, snapshotMetadataDir}

// The SnapshotMetadataService is a template too: @CA_CERT@ is the base64 of
// the user's CA certificate (docs/changed-block-tracking.md has the sed).
// load fills in testCACert, the chart tests give the chart the same.
const (
	caCertPlaceholder = "@CA_CERT@"
	testCACert        = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCnRlc3QKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
)

// A template is applied once per node, @NODE@ replaced by the node's name
// (docs/kubernetes.md has the sed; e2e/k8s/suite runs it, in make test and
// in the GroupSnapshots scenario). load expands each for templateNodes, and
// the chart tests give the chart the same nodes.
const nodePlaceholder = "@NODE@"

var templateNodes = []string{"node-a", "node-b.example.com"}

// load parses every document of every *.yaml file here and in the optional
// directories, a template's once for each of templateNodes.
func load(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, dir := range optionalDirs {
		more, _ := filepath.Glob(dir + "/*.yaml")
		if len(more) == 0 {
			t.Fatalf("no manifests in %s/", dir)
		}
		files = append(files, more...)
	}
	var objects []object
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.ReplaceAll(data, []byte(caCertPlaceholder), []byte(testCACert))
		if !bytes.Contains(data, []byte(nodePlaceholder)) {
			objects = append(objects, decode(t, file, data)...)
			continue
		}
		for _, node := range templateNodes {
			for _, o := range decode(t, file, bytes.ReplaceAll(data, []byte(nodePlaceholder), []byte(node))) {
				o.node = node
				objects = append(objects, o)
			}
		}
	}
	return objects
}

// decodeFile parses every document of one YAML file.
func decodeFile(t *testing.T, file string) []object {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, file, data)
}

// decode parses every document of one YAML file's contents.
func decode(t *testing.T, file string, data []byte) []object {
	t.Helper()
	var objects []object
	decoder := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		err := decoder.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objects
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc != nil {
			objects = append(objects, object{file: file, doc: doc})
		}
	}
}

func only(t *testing.T, objects []object, kind string) []object {
	t.Helper()
	var found []object
	for _, o := range objects {
		if o.kind() == kind {
			found = append(found, o)
		}
	}
	if len(found) == 0 {
		t.Fatalf("no %s among the manifests", kind)
	}
	return found
}

func TestEveryManifestIsAWellFormedObject(t *testing.T) {
	clusterScoped := []string{"Namespace", "CSIDriver", "StorageClass", "VolumeSnapshotClass", "VolumeGroupSnapshotClass", "ClusterRole",
		"ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
		"MutatingAdmissionPolicyBinding", "SnapshotMetadataService"}
	for _, o := range load(t) {
		t.Run(o.String(), func(t *testing.T) {
			if str(o.doc, "apiVersion") == "" || o.kind() == "" || o.name() == "" {
				t.Fatalf("apiVersion, kind and metadata.name are required: %v", o.doc)
			}
			namespaced := !slices.Contains(clusterScoped, o.kind())
			if got := str(o.doc, "metadata", "namespace"); namespaced && got != namespace {
				t.Errorf("namespace = %q, want %q", got, namespace)
			} else if !namespaced && got != "" {
				t.Errorf("a cluster-scoped object has namespace %q", got)
			}
		})
	}
}

func TestCSIDriver(t *testing.T) {
	drivers := only(t, load(t), "CSIDriver")
	if len(drivers) != 1 {
		t.Fatalf("%d CSIDrivers, want 1", len(drivers))
	}
	driver := drivers[0].doc
	tests := []struct {
		name  string
		field string
		got   any
		want  any
	}{
		{"it is named after the driver", "metadata.name", get(driver, "metadata", "name"), driverName},
		{"nothing is attached: volumes are node-local", "spec.attachRequired", get(driver, "spec", "attachRequired"), false},
		{"kubelet applies fsGroup to the filesystems", "spec.fsGroupPolicy", get(driver, "spec", "fsGroupPolicy"), "File"},
		{"the scheduler uses the published capacity", "spec.storageCapacity", get(driver, "spec", "storageCapacity"), true},
		{"the driver needs no pod information", "spec.podInfoOnMount", get(driver, "spec", "podInfoOnMount"), false},
		{"volumes are persistent only", "spec.volumeLifecycleModes", strings.Join(texts(driver, "spec", "volumeLifecycleModes"), ","), "Persistent"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if test.got != test.want {
				t.Errorf("%s = %v, want %v", test.field, test.got, test.want)
			}
		})
	}
}

func TestStorageClasses(t *testing.T) {
	classes := map[string]map[string]any{}
	for _, o := range only(t, load(t), "StorageClass") {
		classes[o.name()] = o.doc
		t.Run(o.name()+" binds late, expands and uses the driver", func(t *testing.T) {
			if got := str(o.doc, "provisioner"); got != driverName {
				t.Errorf("provisioner = %q", got)
			}
			if got := str(o.doc, "volumeBindingMode"); got != "WaitForFirstConsumer" {
				t.Errorf("volumeBindingMode = %q: node-local volumes need the pod's node first", got)
			}
			if get(o.doc, "allowVolumeExpansion") != true {
				t.Error("allowVolumeExpansion is not true")
			}
		})
	}
	tests := []struct {
		name, class, parameter, want string
	}{
		{"the dataset class mounts ZFS itself", "zfs-dataset", "csi.storage.k8s.io/fstype", "zfs"},
		{"the ext4 class formats a zvol with ext4", "zfs-ext4", "csi.storage.k8s.io/fstype", "ext4"},
		{"the block class only fits zvols", "zfs-block", "volblocksize", "16384"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			class, ok := classes[test.class]
			if !ok {
				t.Fatalf("no StorageClass %s", test.class)
			}
			if got := str(class, "parameters", test.parameter); got != test.want {
				t.Errorf("%s = %q, want %q", test.parameter, got, test.want)
			}
		})
	}
}

func TestVolumeSnapshotClassesUseTheDriver(t *testing.T) {
	objects := load(t)
	for _, o := range append(only(t, objects, "VolumeSnapshotClass"), only(t, objects, "VolumeGroupSnapshotClass")...) {
		if got := str(o.doc, "driver"); got != driverName {
			t.Errorf("%v: driver = %q", o, got)
		}
	}
}

// managedBy is the label a node's csi-snapshotter (--node-deployment)
// selects its contents and, for groups, its VolumeGroupSnapshotClasses by.
const managedBy = "snapshot.storage.kubernetes.io/managed-by"

// csi-snapshotter v8.7.0 on a node sees only the VolumeGroupSnapshotClasses
// labelled with that node (cmd/csi-snapshotter/main.go takes their informer
// from its label-filtered factory), so the shipped class is a template: for
// each node, a class named after it and labelled with it. None is a default:
// the snapshot-controller refuses to choose among several.
func TestGroupSnapshotClassesArePerNode(t *testing.T) {
	var got, want []string
	for _, o := range only(t, load(t), "VolumeGroupSnapshotClass") {
		got = append(got, o.name()+" "+managedBy+"="+str(o.doc, "metadata", "labels", managedBy))
		if isDefault := get(o.doc, "metadata", "annotations", "groupsnapshot.storage.kubernetes.io/is-default-class"); isDefault != nil {
			t.Errorf("%v is marked default (%v): with a class per node the snapshot-controller finds several defaults", o, isDefault)
		}
	}
	for _, node := range templateNodes {
		want = append(want, "zfs-group-snapshot-"+node+" "+managedBy+"="+node)
	}
	if !slices.Equal(got, want) {
		t.Errorf("group snapshot classes for nodes %v:\n got %q\nwant %q", templateNodes, got, want)
	}
}

// containers maps the DaemonSet's containers by name.
func containers(t *testing.T, daemonSet map[string]any) map[string]map[string]any {
	t.Helper()
	byName := map[string]map[string]any{}
	for _, c := range list(daemonSet, "spec", "template", "spec", "containers") {
		container, _ := c.(map[string]any)
		byName[str(container, "name")] = container
	}
	return byName
}

// envFrom reports the fieldRef path an environment variable comes from.
func envFrom(container map[string]any, name string) string {
	for _, e := range list(container, "env") {
		if str(e, "name") == name {
			return str(e, "valueFrom", "fieldRef", "fieldPath")
		}
	}
	return ""
}

// The DaemonSets: the sidecars that every installation runs, and the
// opt-in external-snapshot-metadata sidecar (snapshot-metadata/).
const (
	sidecarsName         = "zfs-csi-sidecars"
	snapshotMetadataName = "zfs-csi-snapshot-metadata"
)

// daemonSet is the DaemonSet of that name among objects.
func daemonSet(t *testing.T, objects []object, name string) map[string]any {
	t.Helper()
	for _, o := range only(t, objects, "DaemonSet") {
		if o.name() == name {
			return o.doc
		}
	}
	t.Fatalf("no DaemonSet %s", name)
	return nil
}

// long: subtests on one shared fixture, one behaviour each
func TestSidecarDaemonSet(t *testing.T) {
	var names []string
	for _, o := range only(t, load(t), "DaemonSet") {
		names = append(names, o.name())
	}
	if want := []string{sidecarsName, snapshotMetadataName}; !slices.Equal(names, want) {
		t.Fatalf("DaemonSets %v, want %v", names, want)
	}
	daemonSet := daemonSet(t, load(t), sidecarsName)
	pod := get(daemonSet, "spec", "template", "spec")
	byName := containers(t, daemonSet)

	t.Run("the socket directory is the daemon's kubelet plugin directory", func(t *testing.T) {
		found := false
		for _, volume := range list(pod, "volumes") {
			if str(volume, "name") == "socket-dir" {
				found = true
				if got := str(volume, "hostPath", "path"); got != socketDir {
					t.Errorf("hostPath = %q, want %q", got, socketDir)
				}
			}
		}
		if !found {
			t.Fatal("no socket-dir volume")
		}
	})

	t.Run("only the three upstream sidecars run: the daemon is on the host", func(t *testing.T) {
		var names []string
		for name := range byName {
			names = append(names, name)
		}
		slices.Sort(names)
		if want := []string{"csi-provisioner", "csi-resizer", "csi-snapshotter"}; !slices.Equal(names, want) {
			t.Errorf("containers = %v, want %v", names, want)
		}
	})

	for name, container := range byName {
		t.Run(name+" reaches the socket at /csi with a pinned upstream image", func(t *testing.T) {
			if !slices.Contains(texts(container, "args"), "--csi-address=/csi/csi.sock") {
				t.Errorf("args = %v: no --csi-address=/csi/csi.sock", texts(container, "args"))
			}
			mounted := false
			for _, mount := range list(container, "volumeMounts") {
				mounted = mounted || (str(mount, "name") == "socket-dir" && str(mount, "mountPath") == "/csi")
			}
			if !mounted {
				t.Error("socket-dir is not mounted at /csi")
			}
			image := str(container, "image")
			tag := image[strings.LastIndexByte(image, ':')+1:]
			if !strings.HasPrefix(image, "registry.k8s.io/sig-storage/"+name+":v") || strings.Count(tag, ".") != 2 {
				t.Errorf("image = %q: want registry.k8s.io/sig-storage/%s:vX.Y.Z", image, name)
			}
		})
	}

	tests := []struct {
		name      string
		container string
		args      []string
		notArgs   []string
		env       map[string]string
	}{
		{
			name: "the provisioner serves its own node and publishes its capacity", container: "csi-provisioner",
			args:    []string{"--node-deployment=true", "--extra-create-metadata", "--enable-capacity", "--capacity-ownerref-level=0"},
			notArgs: []string{"--leader-election"},
			env:     map[string]string{"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name", "NAMESPACE": "metadata.namespace"},
		},
		{
			name: "the snapshotter serves its own node", container: "csi-snapshotter",
			args:    []string{"--node-deployment=true"},
			notArgs: []string{"--leader-election"},
			env:     map[string]string{"NODE_NAME": "spec.nodeName"},
		},
		{
			name: "one resizer is active in the cluster", container: "csi-resizer",
			args:    []string{"--leader-election", "--leader-election-namespace=$(NAMESPACE)"},
			notArgs: []string{"--node-deployment=true"},
			env:     map[string]string{"NAMESPACE": "metadata.namespace"},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			container, ok := byName[test.container]
			if !ok {
				t.Fatalf("no container %s", test.container)
			}
			args := texts(container, "args")
			for _, arg := range test.args {
				if !slices.Contains(args, arg) {
					t.Errorf("args %v lack %s", args, arg)
				}
			}
			for _, arg := range test.notArgs {
				if slices.Contains(args, arg) {
					t.Errorf("args %v have %s", args, arg)
				}
			}
			for variable, field := range test.env {
				if got := envFrom(container, variable); got != field {
					t.Errorf("env %s from %q, want fieldRef %s", variable, got, field)
				}
			}
		})
	}
}

// The content policy is bound (a policy without a binding does nothing), in
// Deny mode, to creations of this driver's contents only; what its CEL says is
// checked in packaging/checks against the objects the snapshot-controller makes.
func TestSnapshotContentPolicyIsBoundAndOnlyForThisDriver(t *testing.T) {
	objects := load(t)
	policy := only(t, objects, "ValidatingAdmissionPolicy")[0].doc
	binding := only(t, objects, "ValidatingAdmissionPolicyBinding")[0].doc
	if str(policy, "metadata", "name") != contentPolicy || str(binding, "spec", "policyName") != contentPolicy {
		t.Errorf("policy %q, binding's policyName %q, want %q", str(policy, "metadata", "name"), str(binding, "spec", "policyName"), contentPolicy)
	}
	if got := get(binding, "spec", "validationActions"); !reflect.DeepEqual(got, []any{"Deny"}) {
		t.Errorf("validationActions %v, want [Deny]: anything else leaves the snapshot waiting silently", got)
	}
	rule := get(policy, "spec", "matchConstraints", "resourceRules", 0)
	if !reflect.DeepEqual(get(rule, "operations"), []any{"CREATE"}) || !reflect.DeepEqual(get(rule, "resources"), []any{"volumesnapshotcontents"}) {
		t.Errorf("resource rule %v, want CREATE of volumesnapshotcontents only", rule)
	}
	if cond := str(policy, "spec", "matchConditions", 0, "expression"); !strings.Contains(cond, "'"+driverName+"'") {
		t.Errorf("match condition %q does not limit the policy to %s", cond, driverName)
	}
	if str(policy, "spec", "failurePolicy") != "Ignore" {
		t.Error("failurePolicy is not Ignore: a policy that cannot be evaluated would block every snapshot")
	}
}

// kubectl apply -f of this directory must work on a cluster without the
// snapshot CRDs (docs/kubernetes.md calls snapshots optional): whatever names the
// snapshot API is in snapshotDir, applied once the CRDs are there; whatever
// names the group snapshot API or MutatingAdmissionPolicy (GA from 1.36,
// beta and off by default before) is in groupSnapshotDir.
func TestOnlyTheSnapshotDirectoriesNeedTheSnapshotAPIs(t *testing.T) {
	for _, o := range load(t) {
		apiVersion := str(o.doc, "apiVersion")
		needsGroups := strings.HasPrefix(apiVersion, "groupsnapshot.storage.k8s.io/") || strings.HasPrefix(o.kind(), "MutatingAdmissionPolicy")
		needsSnapshots := !needsGroups && (strings.HasPrefix(apiVersion, "snapshot.storage.k8s.io/") ||
			strings.Contains(fmt.Sprint(o.doc["spec"]), "snapshot.storage.k8s.io"))
		dir := filepath.Dir(o.file)
		switch {
		case needsGroups && dir != groupSnapshotDir:
			t.Errorf("%v needs the group snapshot API or MutatingAdmissionPolicy: move it to %s/", o, groupSnapshotDir)
		case needsSnapshots && dir != snapshotDir:
			t.Errorf("%v needs the snapshot API: move it to %s/", o, snapshotDir)
		case dir == snapshotDir && !needsSnapshots && o.kind() != "ValidatingAdmissionPolicyBinding":
			t.Errorf("%v is in %s/ but works without the snapshot API", o, snapshotDir)
		case dir == groupSnapshotDir && !needsGroups:
			t.Errorf("%v is in %s/ but works without the group snapshot API", o, groupSnapshotDir)
		}
	}
}

// The readiness probe asks the daemon itself, through the socket the
// sidecars use, with the package's binary: a pod that stays ready while the
// daemon is down would hide it.
func TestSidecarsAreReadyOnlyWhileTheDaemonAnswers(t *testing.T) {
	pod := get(daemonSet(t, load(t), sidecarsName), "spec", "template", "spec")
	probe := get(containers(t, daemonSet(t, load(t), sidecarsName))["csi-provisioner"], "readinessProbe")
	command := texts(probe, "exec", "command")
	if !reflect.DeepEqual(command, []string{"/zfs-csi", "ctl", "--endpoint", "unix:///csi/csi.sock", "--timeout", "8s", "probe"}) {
		t.Errorf("csi-provisioner's readiness probe runs %v, want zfs-csi ctl probe on the socket", command)
	}
	if timeout, _ := get(probe, "timeoutSeconds").(int); timeout <= 8 {
		t.Errorf("timeoutSeconds %v: kubelet would kill the probe before ctl's own 8 s deadline", get(probe, "timeoutSeconds"))
	}
	found := false
	for _, volume := range list(pod, "volumes") {
		if str(volume, "name") == "zfs-csi-binary" {
			found = true
			if str(volume, "hostPath", "path") != "/usr/sbin/zfs-csi" || str(volume, "hostPath", "type") != "File" {
				t.Errorf("the probe's binary is %v, want the package's /usr/sbin/zfs-csi (a File)", get(volume, "hostPath"))
			}
		}
	}
	if !found {
		t.Error("no zfs-csi-binary volume for the probe")
	}
}

// The group snapshot contents' label policy is bound, mutates only this
// driver's group contents and their members at creation, and fails closed
// (a group nobody labels would wait forever; the validating policy then
// names the cause).
func TestGroupContentLabelPolicyIsBoundAndOnlyForThisDriversGroups(t *testing.T) {
	objects := load(t)
	policy := only(t, objects, "MutatingAdmissionPolicy")[0].doc
	binding := only(t, objects, "MutatingAdmissionPolicyBinding")[0].doc
	name := str(policy, "metadata", "name")
	if str(binding, "spec", "policyName") != name {
		t.Errorf("binding's policyName %q, policy %q", str(binding, "spec", "policyName"), name)
	}
	for _, rule := range list(policy, "spec", "matchConstraints", "resourceRules") {
		if !reflect.DeepEqual(get(rule, "operations"), []any{"CREATE"}) {
			t.Errorf("resource rule %v mutates more than creations", rule)
		}
	}
	if cond := str(policy, "spec", "matchConditions", 0, "expression"); !strings.Contains(cond, "'"+driverName+"'") {
		t.Errorf("first match condition %q does not limit the policy to %s", cond, driverName)
	}
}

// One priority class for the sidecars, the chart's default too.
func TestSidecarsHaveTheNodeCriticalPriority(t *testing.T) {
	pod := get(daemonSet(t, load(t), sidecarsName), "spec", "template", "spec")
	if got := str(pod, "priorityClassName"); got != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", got)
	}
}
