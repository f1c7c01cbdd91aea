package kubernetes

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// grant is one permission: verb on resource in apiGroup.
type grant struct{ group, resource, verb string }

// grants collects what the rules of a Role or ClusterRole allow.
func grants(role map[string]any) map[grant]bool {
	allowed := map[grant]bool{}
	for _, rule := range list(role, "rules") {
		for _, group := range texts(rule, "apiGroups") {
			for _, resource := range texts(rule, "resources") {
				for _, verb := range texts(rule, "verbs") {
					allowed[grant{group, resource, verb}] = true
				}
			}
		}
	}
	return allowed
}

// serviceAccountGrants returns what the ServiceAccount of the named
// DaemonSet's pods holds, cluster-wide and in its own namespace, through the
// manifests' bindings.
func serviceAccountGrants(t *testing.T, objects []object, daemonSetName string) (cluster, local map[grant]bool) {
	t.Helper()
	serviceAccount := str(get(daemonSet(t, objects, daemonSetName), "spec", "template", "spec"), "serviceAccountName")
	roles := map[string]map[string]any{}
	for _, o := range objects {
		if o.kind() == "Role" || o.kind() == "ClusterRole" {
			roles[o.kind()+"/"+o.name()] = o.doc
		}
	}
	cluster, local = map[grant]bool{}, map[grant]bool{}
	for _, o := range objects {
		if o.kind() != "ClusterRoleBinding" && o.kind() != "RoleBinding" {
			continue
		}
		bound := false
		for _, subject := range list(o.doc, "subjects") {
			bound = bound || (str(subject, "kind") == "ServiceAccount" && str(subject, "name") == serviceAccount &&
				str(subject, "namespace") == namespace)
		}
		role, ok := roles[str(o.doc, "roleRef", "kind")+"/"+str(o.doc, "roleRef", "name")]
		if !bound {
			continue
		}
		if !ok {
			t.Errorf("%v refers to a role that is not in the manifests", o)
			continue
		}
		into := cluster
		if o.kind() == "RoleBinding" {
			into = local
		}
		for g := range grants(role) {
			into[g] = true
		}
	}
	return cluster, local
}

// upstreamRBAC names, for each sidecar image of the DaemonSet, the Go module
// of its repository (without the major version suffix) and the RBAC files the
// repository ships for it. The sidecars are what decide what they list and
// watch: a hand-written list of their needs went stale when they were bumped
// (csi-provisioner v6 watches VolumeSnapshots, csi-resizer v2 lists pods; the
// e2e-k8s cluster showed both as "forbidden").
var upstreamRBAC = map[string]struct {
	module string
	files  []string
}{
	"csi-provisioner": {"github.com/kubernetes-csi/external-provisioner", []string{"deploy/kubernetes/rbac.yaml"}},
	"csi-snapshotter": {"github.com/kubernetes-csi/external-snapshotter", []string{"deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml"}},
	"csi-resizer":     {"github.com/kubernetes-csi/external-resizer", []string{"deploy/kubernetes/rbac.yaml"}},
	"csi-snapshot-metadata": {"github.com/kubernetes-csi/external-snapshot-metadata",
		[]string{"deploy/snapshot-metadata-cluster-role.yaml"}},
}

// notNeeded are the upstream grants the DaemonSet does without, with why.
var notNeeded = map[string]map[grant]string{
	"csi-provisioner": {
		{"apps", "replicasets", "get"}: "its CSIStorageCapacity objects are owned by its pod (--capacity-ownerref-level=0), not by a ReplicaSet",
	},
	// v0.2.0 only creates reviews (pkg/internal/authn, authz) and only gets
	// the driver's SnapshotMetadataService, for the audience
	// (pkg/internal/server/grpc/auth.go); it never reads a review back nor
	// writes, lists or watches that object.
	"csi-snapshot-metadata": {
		{"authentication.k8s.io", "tokenreviews", "get"}:             "a review is created, never read back",
		{"authorization.k8s.io", "subjectaccessreviews", "get"}:      "a review is created, never read back",
		{"cbt.storage.k8s.io", "snapshotmetadataservices", "list"}:   "the sidecar gets the driver's object by name",
		{"cbt.storage.k8s.io", "snapshotmetadataservices", "watch"}:  "the sidecar gets the driver's object by name",
		{"cbt.storage.k8s.io", "snapshotmetadataservices", "create"}: "the user applies the object; the sidecar never writes it",
		{"cbt.storage.k8s.io", "snapshotmetadataservices", "update"}: "the user applies the object; the sidecar never writes it",
		{"cbt.storage.k8s.io", "snapshotmetadataservices", "patch"}:  "the user applies the object; the sidecar never writes it",
		{"cbt.storage.k8s.io", "snapshotmetadataservices", "delete"}: "the user applies the object; the sidecar never writes it",
	},
}

// moduleDir downloads module@version through the module proxy (as make
// e2e-k8s does to build the sidecars) and returns its directory.
func moduleDir(t *testing.T, module, version string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir() // outside this module: no go.mod to consult or change
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jsonErr := json.Unmarshal(out, &info); err != nil || jsonErr != nil || info.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s %s (the test reads the sidecar's own RBAC from the module proxy)", module, version, err, info.Error, out)
	}
	return info.Dir
}

// Every rule the sidecars' own repositories ship for the pinned versions is
// granted to their DaemonSet's ServiceAccount: cluster-wide where upstream
// says ClusterRole, in the namespace (or wider) where it says Role.
func TestRBACCoversWhatTheSidecarsOwnRBACAsksFor(t *testing.T) {
	objects := load(t)
	for _, set := range []string{sidecarsName, snapshotMetadataName} {
		cluster, local := serviceAccountGrants(t, objects, set)
		for name, container := range containers(t, daemonSet(t, objects, set)) {
			image := str(container, "image")
			tag := image[strings.LastIndex(image, ":")+1:]
			t.Run(name+"@"+tag, func(t *testing.T) { checkUpstreamRBAC(t, name, tag, cluster, local) })
		}
	}
}

// checkUpstreamRBAC compares what the sidecar name's repository grants at
// tag with what its DaemonSet holds.
func checkUpstreamRBAC(t *testing.T, name, tag string, cluster, local map[grant]bool) {
	t.Helper()
	src, ok := upstreamRBAC[name]
	if !ok {
		t.Fatalf("no upstream RBAC known for sidecar %s@%s: add its repository to upstreamRBAC", name, tag)
	}
	upstream := upstreamGrants(t, src.module, tag, src.files, func(o object, g grant) {
		if _, ok := notNeeded[name][g]; ok || cluster[g] || (o.kind() == "Role" && local[g]) {
			return
		}
		t.Errorf("upstream %s %s grants %s %s (group %q); the manifests do not", o.kind(), o.name(), g.verb, g.resource, g.group)
	})
	for g, why := range notNeeded[name] {
		if !upstream[g] {
			t.Errorf("notNeeded lists %v (%s), which upstream no longer grants: drop it", g, why)
		}
	}
}

// upstreamGrants reads the Roles and ClusterRoles of files in module@tag
// (the major version suffix added for v2 and later), calls each for every
// grant of each, and returns them all.
func upstreamGrants(t *testing.T, module, tag string, files []string, each func(object, grant)) map[grant]bool {
	t.Helper()
	if major := strings.SplitN(tag, ".", 2)[0]; major != "v0" && major != "v1" {
		module += "/" + major
	}
	dir := moduleDir(t, module, tag)
	upstream := map[grant]bool{}
	for _, file := range files {
		for _, o := range decodeFile(t, filepath.Join(dir, file)) {
			if o.kind() != "ClusterRole" && o.kind() != "Role" {
				continue
			}
			for g := range grants(o.doc) {
				upstream[g] = true
				each(o, g)
			}
		}
	}
	return upstream
}
