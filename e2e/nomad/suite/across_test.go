package suite

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// Across nodes through Nomad, with the daemons'
// peer channel: a restore of this node's snapshot on the peer, and a volume
// in use on the peer moved here (docs/across-nodes.md).

// blobScript writes 8 MiB of random data and its checksum into /data.
const blobScript = "set -e; dd if=/dev/urandom of=/data/blob bs=1M count=8 2>/dev/null; cd /data && sha256sum blob > sum && sync"

// checkScript prints OK when /data/blob still has the checksum written with it.
const checkScript = "cd /data && sha256sum -c sum >/dev/null && echo OK"

// 4b. A restore of node-a's snapshot on node-b (topology node-b): pulled
// over the channel; Nomad's create is retried while the pull answers
// ABORTED, then a job on node-b finds the data byte for byte.
func testRestoreAcrossNodes(t *testing.T, e *env) {
	id := "across-src"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"128MiB"`})
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	e.runJob(t, e.workload(t, id+"-writer", id, false, blobScript), id+"-writer")
	snapID := e.snapshot(t, id, "across")

	restored := "across-restored"
	restore := e.spec(t, "volume-from-snapshot.hcl", map[string]string{`"pg-data-restore"`: `"` + restored + `"`,
		`"@NODE@:tank/csi/pg-data@nightly"`: `"` + snapID + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"128MiB"`})
	start := time.Now()
	tries := 0
	e2eutil.Eventually(t, 10*time.Minute, "the restore on "+e.peer+" to be created", func() (bool, error) {
		tries++
		_, err := run("nomad", "volume", "create", restore)
		return err == nil, err
	})
	t.Logf("restore of %s on %s: created after %d tries, %s", snapID, e.peer, tries, time.Since(start).Round(time.Second))
	node, restoredDS := dataset(t, e.volume(t, restored))
	if node != e.peer {
		t.Fatalf("the restore was made on %s, want %s", node, e.peer)
	}
	e.onNode(t, e.peer, restoredDS, true)
	e.checkRestoreAndRemove(t, restored, restoredDS, snapID, id, ds)
}

// 4c. A volume in use on node-b moves here: rounds while its job writes
// (each run answers ABORTED, exit status 1), the job stopped, its data's
// checksum read on node-b, the final round; the moved volume registered in
// Nomad as docs/across-nodes.md says, and a job here finds the same data.
func testMoveAcrossNodes(t *testing.T, e *env) {
	id := "move-src"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"128MiB"`})
	must(t, "nomad", "volume", "create", spec)
	source := e.volume(t, id)
	_, sourceDS := dataset(t, source)
	writer := e.workload(t, id+"-writer", id, false,
		"set -e; i=0; while true; do i=$((i+1)); echo $i >> /data/log; dd if=/dev/urandom of=/data/blob-$((i % 4)) bs=64k count=4 2>/dev/null; sleep 0.5; done")
	a := e.running(t, writer, id+"-writer")
	if a.NodeName != e.peer {
		t.Fatalf("the writer runs on %s, the volume is on %s", a.NodeName, e.peer)
	}
	moved := "move-dst"
	for round := 1; round <= 2; round++ {
		out, err := run("zfs-csi", "ctl", "move-volume", moved, source.ExternalID)
		if err == nil || !strings.Contains(out, "Aborted") {
			t.Fatalf("round %d while the volume is in use: %v %s (want ABORTED with its progress)", round, err, out)
		}
		t.Logf("round %d: %s", round, strings.TrimSpace(out))
		time.Sleep(3 * time.Second)
	}
	// A service job: stopped detached, as stopService says why.
	e.stopService(t, id+"-writer", id)
	// What the volume holds once its writer stopped, read where it is.
	sums := "cd /data && cat log blob-* | sha256sum | cut -d' ' -f1"
	_, before := e.runJob(t, e.workload(t, id+"-sum", id, false, sums), id+"-sum")
	e.released(t, id)

	var final struct {
		Volume struct {
			VolumeID      string            `json:"volume_id"`
			VolumeContext map[string]string `json:"volume_context"`
		} `json:"volume"`
	}
	var out string
	e2eutil.Eventually(t, 5*time.Minute, "the final round", func() (bool, error) {
		var err error
		out, err = run("zfs-csi", "ctl", "move-volume", "--final", moved, source.ExternalID)
		return err == nil, err
	})
	if err := json.Unmarshal([]byte(out), &final); err != nil || !strings.HasPrefix(final.Volume.VolumeID, e.node+":") {
		t.Fatalf("the final round printed %s (%v): want a volume on %s", out, err, e.node)
	}
	_, movedDS, _ := strings.Cut(final.Volume.VolumeID, ":")
	e.onNode(t, e.peer, sourceDS, false)
	e.onNode(t, e.node, movedDS, true)

	// Nomad takes the moved volume over: registered with the ID the final
	// round printed, on this node; the old one goes from Nomad.
	// Its claims are released already (-force would ask to confirm).
	must(t, "nomad", "volume", "deregister", id)
	register := e.registerSpec(t, moved, final.Volume.VolumeID, final.Volume.VolumeContext, e.node)
	must(t, "nomad", "volume", "register", register)
	placed, after := e.runJob(t, e.workload(t, moved+"-sum", moved, false, sums), moved+"-sum")
	if placed != e.node || after != before || before == "" {
		t.Errorf("the moved volume on %s sums to %q, the source had %q (want the same, on %s)", placed, after, before, e.node)
	}
	must(t, "nomad", "volume", "delete", moved)
	e.onNode(t, e.node, movedDS, false)
}

// registerSpec is a `nomad volume register` spec for an existing volume of
// node, as docs/across-nodes.md tells a user to write it.
func (e *env) registerSpec(t *testing.T, id, externalID string, context map[string]string, node string) string {
	t.Helper()
	var lines []string
	for key, value := range context {
		lines = append(lines, fmt.Sprintf("  %q = %q", key, value))
	}
	hcl := fmt.Sprintf(`id          = %q
name        = %q
type        = "csi"
plugin_id   = %q
external_id = %q

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

context = {
%s
}

topology_request {
  required {
    topology {
      segments {
        "zfs.csi.dev/node" = %q
      }
    }
  }
}
`, id, id, pluginID, externalID, strings.Join(lines, "\n"), node)
	path := filepath.Join(t.TempDir(), id+".volume.hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// released waits until no allocation claims volume id.
func (e *env) released(t *testing.T, id string) {
	t.Helper()
	e2eutil.Eventually(t, 3*time.Minute, "the claims of "+id+" to be released", func() (bool, error) {
		var v struct{ ReadAllocs, WriteAllocs map[string]any }
		out, err := run("nomad", "volume", "status", "-json", id)
		if err != nil || decode(out, &v) != nil {
			return false, fmt.Errorf("%v %s", err, out)
		}
		return len(v.WriteAllocs)+len(v.ReadAllocs) == 0, fmt.Errorf("claims %v %v", v.WriteAllocs, v.ReadAllocs)
	})
}

// checkRestoreAndRemove runs a job on the peer that checks the restored
// volume's data (checkScript), then deletes the restore, the snapshot and
// its source volume and waits for their datasets to go on both nodes.
func (e *env) checkRestoreAndRemove(t *testing.T, restored, restoredDS, snapID, source, sourceDS string) {
	t.Helper()
	placed, got := e.runJob(t, e.workload(t, restored+"-reader", restored, false, checkScript), restored+"-reader")
	if placed != e.peer || got != "OK" {
		t.Errorf("the reader on %s printed %q, want OK on %s", placed, got, e.peer)
	}
	must(t, "nomad", "volume", "delete", restored)
	e.onNode(t, e.peer, restoredDS, false)
	must(t, "nomad", "volume", "snapshot", "delete", pluginID, snapID)
	must(t, "nomad", "volume", "delete", source)
	e.onNode(t, e.node, sourceDS, false)
}
