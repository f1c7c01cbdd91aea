package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What the driver refuses across nodes before a byte moves, asked through
// Nomad: a move asked for as a CSI parameter by a tenant, and a restore on
// the other node whose limit is below its snapshot's size.

// tenantNamespace is the namespace of TenantMoveFinal's tenant.
const tenantNamespace = "e2e-tenant"

// 4i. A tenant whose token may write volumes in its own namespace asks
// Nomad for a clone of another volume of node-a on node-b with
// parameters { sourceMode = "move-final" }: a move as a CSI parameter, which
// would delete the source (docs/across-nodes.md: refused whoever asks).
// The create fails with the plugin's INVALID_ARGUMENT; the source keeps its
// data and is not marked deleted, no round was taken of it, and nothing
// was received on node-b.
func testTenantMoveFinal(t *testing.T, e *env) {
	id := "tenant-victim"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"64MiB"`})
	must(t, "nomad", "volume", "create", spec)
	source := e.volume(t, id)
	_, ds := dataset(t, source)
	e.runJob(t, e.workload(t, id+"-writer", id, false, blobScript), id+"-writer")
	e.released(t, id)
	snapshotsBefore := strings.Fields(must(t, "zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", ds))

	token := e.tenantToken(t)
	moved := "tenant-moved"
	request := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + moved + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"64MiB"`,
		"capacity_min": "clone_id = \"" + source.ExternalID + "\"\n\ncapacity_min",
		"\"zfs.compression\" = \"lz4\"\n  \"zfs.recordsize\"  = \"16384\"": "sourceMode = \"move-final\""})
	out, err := runAs(token, "nomad", "volume", "create", "-namespace", tenantNamespace, request)
	t.Logf("the tenant's create: %v\n%s", err, strings.TrimSpace(out))
	switch {
	case err == nil:
		t.Errorf("the tenant's create of a move-final clone succeeded")
	case !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "sourceMode=move-final"):
		t.Errorf("the create failed, but not with the plugin's INVALID_ARGUMENT refusal of sourceMode=move-final")
	}

	if deleted := strings.TrimSpace(must(t, "zfs", "get", "-H", "-o", "value", "zfs.csi.dev:deleted", ds)); deleted != "-" {
		t.Errorf("the source %s has zfs.csi.dev:deleted=%s", ds, deleted)
	}
	if after := strings.Fields(must(t, "zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", ds)); strings.Join(after, " ") != strings.Join(snapshotsBefore, " ") {
		t.Errorf("the source's snapshots were %v, now %v", snapshotsBefore, after)
	}
	time.Sleep(3 * time.Second) // node-b publishes its zfs list every second
	for _, name := range e.datasets(t, e.peer) {
		if strings.Contains(name, moved) || strings.HasPrefix(name, e.pool+"/csi/_incoming/") {
			t.Errorf("%s holds %s after the refused create", e.peer, name)
		}
	}
	if out, err := run("nomad", "volume", "status", "-namespace", tenantNamespace, moved); err == nil {
		t.Errorf("Nomad registered the refused volume:\n%s", out)
	}
	if placed, got := e.runJob(t, e.workload(t, id+"-check", id, false, checkScript), id+"-check"); placed != e.node || got != "OK" {
		t.Errorf("the source's check on %s printed %q, want OK on %s", placed, got, e.node)
	}
	e.released(t, id)
	must(t, "nomad", "volume", "delete", id)
	e.onNode(t, e.node, ds, false)
}

// tenantToken makes a namespace for a tenant and a token that may create,
// read and list volumes there (csi-write-volume; a create also needs to
// read the plugin), nothing else. All three go when the test ends.
func (e *env) tenantToken(t *testing.T) string {
	t.Helper()
	must(t, "nomad", "namespace", "apply", "-description", "a tenant of the e2e scenarios", tenantNamespace)
	t.Cleanup(func() { _, _ = run("nomad", "namespace", "delete", tenantNamespace) })
	rules := fmt.Sprintf("namespace %q {\n  capabilities = [\"csi-write-volume\", \"csi-read-volume\", \"csi-list-volume\"]\n}\n\nplugin {\n  policy = \"read\"\n}\n", tenantNamespace)
	policy := filepath.Join(t.TempDir(), "tenant.policy.hcl")
	if err := os.WriteFile(policy, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, "nomad", "acl", "policy", "apply", "e2e-tenant", policy)
	t.Cleanup(func() { _, _ = run("nomad", "acl", "policy", "delete", "e2e-tenant") })
	accessor, secret, _ := strings.Cut(strings.TrimSpace(must(t, "nomad", "acl", "token", "create", "-name", "e2e-tenant", "-policy", "e2e-tenant",
		"-t", "{{ .AccessorID }} {{ .SecretID }}")), " ")
	t.Cleanup(func() { _, _ = run("nomad", "acl", "token", "delete", accessor) })
	return secret
}

// 4j. A restore on node-b of node-a's snapshot of a 128 MiB volume, asked
// with capacity_max (limit_bytes) below the snapshot's size: OUT_OF_RANGE,
// checked before a byte moves (docs/across-nodes.md, "Restores and clones
// on another node"), and again on a second try: nothing received on
// node-b, no volume in Nomad.
func testRestoreBelowLimit(t *testing.T, e *env) {
	id := "limit-src"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"128MiB"`})
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	e.runJob(t, e.workload(t, id+"-writer", id, false, blobScript), id+"-writer")
	table := strings.TrimSpace(must(t, "nomad", "volume", "snapshot", "create", id, "limit"))
	lines := strings.Split(table, "\n")
	if len(lines) != 2 {
		t.Fatalf("snapshot create printed %q", table)
	}
	snapID := strings.Fields(lines[1])[0]
	t.Logf("the snapshot:\n%s", table)

	restored := "limit-restore"
	restore := e.spec(t, "volume-from-snapshot.hcl", map[string]string{`"pg-data-restore"`: `"` + restored + `"`,
		`"@NODE@:tank/csi/pg-data@nightly"`: `"` + snapID + `"`, `"@NODE@"`: `"` + e.peer + `"`,
		`capacity_min = "10GiB"`: `capacity_min = "32MiB"`, `capacity_max = "10GiB"`: `capacity_max = "64MiB"`})
	for try := 1; try <= 2; try++ {
		out, err := run("nomad", "volume", "create", restore)
		t.Logf("try %d: %v", try, err)
		if err == nil || !strings.Contains(err.Error(), "OutOfRange") {
			t.Errorf("try %d of a restore limited to 64 MiB of a 128 MiB volume's snapshot: %v %s (want OUT_OF_RANGE)", try, err, out)
		}
	}
	time.Sleep(3 * time.Second) // node-b publishes its zfs list every second
	for _, name := range e.datasets(t, e.peer) {
		if strings.Contains(name, restored) || strings.HasPrefix(name, e.pool+"/csi/_incoming/") {
			t.Errorf("%s holds %s after the refused restores", e.peer, name)
		}
	}
	if out, err := run("nomad", "volume", "status", restored); err == nil {
		t.Errorf("Nomad registered the refused restore:\n%s", out)
	}
	must(t, "nomad", "volume", "snapshot", "delete", pluginID, snapID)
	must(t, "nomad", "volume", "delete", id)
	e.onNode(t, e.node, ds, false)
}
