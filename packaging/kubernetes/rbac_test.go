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

// serviceAccountGrants returns what the sidecars' ServiceAccount holds,
// cluster-wide and in its own namespace, through the manifests' bindings.
func serviceAccountGrants(t *testing.T, objects []object) (cluster, local map[grant]bool) {
	t.Helper()
	serviceAccount := str(get(only(t, objects, "DaemonSet")[0].doc, "spec", "template", "spec"), "serviceAccountName")
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
}

// notNeeded are the upstream grants the DaemonSet does without, with why.
var notNeeded = map[string]map[grant]string{
	"csi-provisioner": {
		{"apps", "replicasets", "get"}: "its CSIStorageCapacity objects are owned by its pod (--capacity-ownerref-level=0), not by a ReplicaSet",
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
// granted to the DaemonSet's ServiceAccount: cluster-wide where upstream says
// ClusterRole, in the namespace (or wider) where it says Role.
func TestRBACCoversWhatTheSidecarsOwnRBACAsksFor(t *testing.T) {
	objects := load(t)
	cluster, local := serviceAccountGrants(t, objects)
	for name, container := range containers(t, only(t, objects, "DaemonSet")[0].doc) {
		image := str(container, "image")
		tag := image[strings.LastIndex(image, ":")+1:]
		t.Run(name+"@"+tag, func(t *testing.T) {
			src, ok := upstreamRBAC[name]
			if !ok {
				t.Fatalf("no upstream RBAC known for sidecar %s (%s): add its repository to upstreamRBAC", name, image)
			}
			major := strings.SplitN(tag, ".", 2)[0]
			module := src.module
			if major != "v0" && major != "v1" {
				module += "/" + major
			}
			dir := moduleDir(t, module, tag)
			upstream := map[grant]bool{}
			for _, file := range src.files {
				for _, o := range decodeFile(t, filepath.Join(dir, file)) {
					if o.kind() != "ClusterRole" && o.kind() != "Role" {
						continue
					}
					for g := range grants(o.doc) {
						upstream[g] = true
						if _, ok := notNeeded[name][g]; ok || cluster[g] || (o.kind() == "Role" && local[g]) {
							continue
						}
						t.Errorf("upstream %s %s grants %s %s (group %q); the manifests do not", o.kind(), o.name(), g.verb, g.resource, g.group)
					}
				}
			}
			for g, why := range notNeeded[name] {
				if !upstream[g] {
					t.Errorf("notNeeded lists %v (%s), which upstream no longer grants: drop it", g, why)
				}
			}
		})
	}
}
