package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

const (
	pluginID        = "zfs.csi.dev"
	pluginNamespace = "zfs-csi"
)

// TestNomad runs the scenarios in order on one cluster: the plugin job first
// (the rest need it), nothing left behind last.
func TestNomad(t *testing.T) {
	e := newEnv(t)
	scenarios := []struct {
		name     string
		run      func(*testing.T, *env)
		required bool
	}{
		{"Plugin", testPlugin, true},
		{"OnlyThePluginJob", testOnlyThePluginJob, false},
		{"Routing", testRouting, false},
		{"Forwarding", testForwarding, false},
		{"Volumes", testVolumes, false},
		{"SnapshotRestoreExpand", testSnapshotRestoreExpand, false},
		{"RestoreAcrossNodes", testRestoreAcrossNodes, false},
		{"RestoreAcrossNodesSenderKilled", testRestoreAcrossNodesSenderKilled, false},
		{"RestoreAcrossNodesEncrypted", testRestoreAcrossNodesEncrypted, false},
		{"PeerFromAnotherCA", testPeerFromAnotherCA, false},
		{"ThroughputAcrossNodes", testThroughputAcrossNodes, false},
		{"MoveAcrossNodes", testMoveAcrossNodes, false},
		{"MoveStaleRound", testMoveStaleRound, false},
		{"TenantMoveFinal", testTenantMoveFinal, false},
		{"RestoreBelowLimit", testRestoreBelowLimit, false},
		{"CARotation", testCARotation, false},
		{"Adoption", testAdoption, false},
		{"Restart", testRestart, false},
		{"NothingLeft", testNothingLeft, false},
	}
	defer func() {
		t.Logf("nomad commands asked again because Nomad counted no plugin instance healthy (askedNoInstance): %d", askedAgain.Load())
	}()
	for _, s := range scenarios {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, e) }) && s.required {
			t.Fatalf("%s failed: the remaining scenarios need it", s.name)
		}
	}
}

// 1. The shipped job (zfs-csi.nomad.hcl), which suite.sh ran with docs/nomad.md's
// commands and a zfs-csi-deployer token, is healthy on both clients: each
// client's zfs-csi-nomad.service serves the daemon in its allocation.
func testPlugin(t *testing.T, e *env) {
	e.pluginHealthy(t)
}

// pluginHealthy waits for the plugin's controllers and nodes to be healthy
// on both clients.
func (e *env) pluginHealthy(t *testing.T) {
	t.Helper()
	e2eutil.Eventually(t, 5*time.Minute, "the plugin healthy on both clients", func() (bool, error) {
		var p struct {
			ControllersHealthy, ControllersExpected, NodesHealthy, NodesExpected int
		}
		out, err := run("nomad", "plugin", "status", "-json", pluginID)
		if err != nil {
			return false, err
		}
		if err := decode(out, &p); err != nil {
			return false, err
		}
		if p.ControllersHealthy == 2 && p.NodesHealthy == 2 {
			return true, nil
		}
		status, _ := run("nomad", "job", "status", "-namespace", pluginNamespace, "zfs-csi")
		return false, fmt.Errorf("controllers %d/%d, nodes %d/%d; %s", p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected, status)
	})
	t.Log(must(t, "nomad", "plugin", "status", pluginID))
}

// 2. Nomad sends each controller call to any instance of the plugin. Twenty
// creates alternating between the nodes each succeed the first time, on the
// node asked; twenty deletes too.
func testRouting(t *testing.T, e *env) {
	nodes := []string{e.node, e.peer}
	firstRun := map[string]int{}
	var ids []string
	for i := range 20 {
		node := nodes[i%2]
		id := fmt.Sprintf("route-%02d", i)
		spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + node + `"`,
			`"10GiB"`: `"64MiB"`})
		if out, err := run("nomad", "volume", "create", spec); err != nil {
			t.Errorf("create %d for %s failed on its first run: %v", i, node, err)
			continue
		} else if !strings.Contains(out, "Created") {
			t.Errorf("create %d: %s", i, out)
		}
		v := e.volume(t, id)
		got, ds := dataset(t, v)
		if got != node {
			t.Errorf("volume %s asked for %s, made on %s", id, node, got)
			continue
		}
		e.onNode(t, node, ds, true)
		firstRun[node]++
		ids = append(ids, id)
	}
	t.Logf("creates that succeeded on their first run, per node: %v (of 10 each)", firstRun)
	deleted := map[string]int{}
	for _, id := range ids {
		v := e.volume(t, id)
		node, ds := dataset(t, v)
		if _, err := run("nomad", "volume", "delete", id); err != nil {
			t.Errorf("delete of %s (on %s) failed on its first run: %v", id, node, err)
			continue
		}
		e.onNode(t, node, ds, false)
		deleted[node]++
	}
	t.Logf("deletes that succeeded on their first run, per node: %v", deleted)
	t.Logf("nomad commands asked again so far because no instance was healthy in Nomad's view: %d", askedAgain.Load())
}

// workload is a batch job that claims a volume and runs script in a shell,
// under the exec driver.
func (e *env) workload(t *testing.T, job, vol string, block bool, script string) string {
	t.Helper()
	attachment, dest := "file-system", "/data"
	if block {
		attachment, dest = "block-device", "/dev/xvda"
	}
	hcl := fmt.Sprintf(`job %q {
  type = "batch"
  group "g" {
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = %q
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "exec"
      user   = "root"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      volume_mount {
        volume      = "data"
        destination = %q
      }
      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}
`, job, vol, attachment, script, dest)
	path := filepath.Join(t.TempDir(), job+".nomad.hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// alloc is what `nomad job allocs -json` tells about an allocation.
type alloc struct {
	ID, NodeName, ClientStatus, ClientDescription string
	TaskStates                                    map[string]struct {
		Restarts int
		Failed   bool
	}
}

// runJob runs a batch job to completion and returns its node and output.
func (e *env) runJob(t *testing.T, path, job string) (node, stdout string) {
	t.Helper()
	must(t, "nomad", "job", "run", "-detach", path)
	var a alloc
	e2eutil.Eventually(t, 5*time.Minute, "job "+job+" to complete", func() (bool, error) {
		var allocs []alloc
		out, err := run("nomad", "job", "allocs", "-json", job)
		if err != nil {
			return false, err
		}
		if err := decode(out, &allocs); err != nil || len(allocs) == 0 {
			return false, fmt.Errorf("allocs: %v %s", err, out)
		}
		a = allocs[0]
		if a.ClientStatus == "failed" {
			status, _ := run("nomad", "alloc", "status", a.ID)
			stdout, _ := run("nomad", "alloc", "logs", a.ID)
			stderr, _ := run("nomad", "alloc", "logs", "-stderr", a.ID)
			t.Fatalf("job %s failed: stdout %q, stderr %q\n%s", job, stdout, stderr, status)
		}
		return a.ClientStatus == "complete", fmt.Errorf("alloc %s: %s", a.ID, a.ClientStatus)
	})
	stdout = strings.TrimSpace(must(t, "nomad", "alloc", "logs", a.ID))
	must(t, "nomad", "job", "stop", "-purge", job)
	return a.NodeName, stdout
}

// 3. Each shipped volume spec: a job claiming the volume is placed on its
// node, writes, and a second job there reads it back; the volume deletes.
func testVolumes(t *testing.T, e *env) {
	for _, c := range []struct {
		file, id, size string
		block          bool
	}{
		{"volume-dataset.hcl", "pg-data", "10GiB", false},
		{"volume-ext4.hcl", "mysql-data", "20GiB", false},
		{"volume-block.hcl", "vm-disk", "8GiB", true},
	} {
		t.Run(strings.TrimSuffix(c.file, ".hcl"), func(t *testing.T) {
			if c.block {
				e.blockVolume(t, c.file, c.id, c.size)
				return
			}
			node := e.peer // the other host: placement must follow the volume
			id := "vol-" + c.id
			spec := e.spec(t, c.file, map[string]string{`"` + c.id + `"`: `"` + id + `"`, `"@NODE@"`: `"` + node + `"`,
				`"` + c.size + `"`: `"256MiB"`})
			must(t, "nomad", "volume", "create", spec)
			_, ds := dataset(t, e.volume(t, id))
			token := "token-of-" + id
			write, read := "echo "+token+" > /data/token && sync", "cat /data/token"
			placed, _ := e.runJob(t, e.workload(t, id+"-writer", id, c.block, write), id+"-writer")
			if placed != node {
				t.Errorf("the writer ran on %s, the volume is on %s", placed, node)
			}
			placed, got := e.runJob(t, e.workload(t, id+"-reader", id, c.block, read), id+"-reader")
			if placed != node || got != token {
				t.Errorf("the reader on %s read %q, want %q on %s", placed, got, token, node)
			}
			must(t, "nomad", "volume", "delete", id)
			e.onNode(t, node, ds, false)
		})
	}
}

// blockVolume checks a raw block volume through Nomad. Tasks under exec
// cannot open the device (its cgroup allows no block devices), so the jobs
// only hold the claim, on this host, and the test writes and reads the
// device Nomad published for each allocation.
func (e *env) blockVolume(t *testing.T, file, specID, size string) {
	id := "vol-" + specID
	spec := e.spec(t, file, map[string]string{`"` + specID + `"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"` + size + `"`: `"256MiB"`})
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	token := "token-of-" + id
	for i, job := range []string{id + "-writer", id + "-reader"} {
		path := e.workload(t, job, id, true, "trap 'exit 0' TERM; while true; do sleep 1; done")
		a := e.running(t, path, job)
		if a.NodeName != e.node {
			t.Errorf("%s ran on %s, the volume is on %s", job, a.NodeName, e.node)
		}
		devices, _ := filepath.Glob(filepath.Join("/opt/nomad/data/client/csi/monolith", pluginID, "per-alloc", a.ID, id, "*"))
		if len(devices) != 1 {
			t.Fatalf("%s: published devices %v, want one", job, devices)
		}
		if i == 0 {
			must(t, "sh", "-c", "printf '%s\n' "+token+" | dd of="+devices[0]+" bs=4096 conv=sync,fsync 2>/dev/null")
		} else if got := strings.TrimSpace(must(t, "head", "-n", "1", devices[0])); got != token {
			t.Errorf("the second claim's device holds %q, want %q", got, token)
		}
		e.stopService(t, job, id)
	}
	e2eutil.Eventually(t, 3*time.Minute, "the volume's claims to be released", func() (bool, error) {
		_, err := run("nomad", "volume", "delete", id)
		return err == nil, err
	})
	e.onNode(t, e.node, ds, false)
}

// running makes a batch job a service, runs it and waits for its allocation
// to run.
func (e *env) running(t *testing.T, path, job string) alloc {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(text), `type = "batch"`, `type = "service"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, "nomad", "job", "run", "-detach", path)
	var a alloc
	e2eutil.Eventually(t, 5*time.Minute, job+" to run", func() (bool, error) {
		var allocs []alloc
		out, err := run("nomad", "job", "allocs", "-json", job)
		if err != nil || decode(out, &allocs) != nil || len(allocs) == 0 {
			return false, fmt.Errorf("%v %s", err, out)
		}
		a = allocs[0]
		if a.ClientStatus == "failed" {
			status, _ := run("nomad", "alloc", "status", a.ID)
			t.Fatalf("%s failed:\n%s", job, status)
		}
		return a.ClientStatus == "running", fmt.Errorf("%s", a.ClientStatus)
	})
	return a
}

// stopService stops and purges a service job that claims volume vol, and
// waits until no allocation holds the volume. Detached: Nomad 1.6's `job
// stop` monitors the job's deployment, which the stop cancels, and then
// exits 1 although the job stopped.
func (e *env) stopService(t *testing.T, job, vol string) {
	t.Helper()
	must(t, "nomad", "job", "stop", "-detach", "-purge", job)
	e2eutil.Eventually(t, 3*time.Minute, "no allocation to hold volume "+vol, func() (bool, error) {
		var v struct{ ReadAllocs, WriteAllocs map[string]any }
		out, err := run("nomad", "volume", "status", "-json", vol)
		if err != nil || decode(out, &v) != nil {
			return false, fmt.Errorf("%v %s", err, out)
		}
		return len(v.ReadAllocs)+len(v.WriteAllocs) == 0, fmt.Errorf("readers %d, writers %d", len(v.ReadAllocs), len(v.WriteAllocs))
	})
}

// 4. Snapshot, a volume from it, expansion, deletion (on this host, where
// the test reads the ZFS properties).
func testSnapshotRestoreExpand(t *testing.T, e *env) {
	id := "snapped"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"256MiB"`})
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	e.runJob(t, e.workload(t, "snapped-writer", id, false, "echo snapped > /data/token && sync"), "snapped-writer")

	// A table: "Snapshot ID  Volume ID  Size  Create Time  Ready?".
	out := strings.Split(strings.TrimSpace(must(t, "nomad", "volume", "snapshot", "create", id, "nightly")), "\n")
	if len(out) != 2 || !strings.HasPrefix(out[0], "Snapshot ID") {
		t.Fatalf("snapshot create printed %q", out)
	}
	snapID := strings.Fields(out[1])[0]
	if want := e.node + ":" + ds + "@nightly"; snapID != want {
		t.Errorf("snapshot ID %s, want %s", snapID, want)
	}
	restore := e.spec(t, "volume-from-snapshot.hcl", map[string]string{`"pg-data-restore"`: `"snapped-restore"`,
		`"@NODE@:tank/csi/pg-data@nightly"`: `"` + snapID + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"256MiB"`})
	must(t, "nomad", "volume", "create", restore)
	if _, got := e.runJob(t, e.workload(t, "restore-reader", "snapped-restore", false, "cat /data/token"), "restore-reader"); got != "snapped" {
		t.Errorf("the volume from the snapshot holds %q, want %q", got, "snapped")
	}

	// Expansion: the same spec again with a larger size (Nomad ≥ 1.6).
	grown := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"512MiB"`})
	if out, err := run("nomad", "volume", "create", grown); err != nil {
		t.Errorf("expanding by creating again with a larger size: %v %s", err, out)
	} else if q := strings.TrimSpace(must(t, "zfs", "get", "-Hp", "-o", "value", "refquota", ds)); q != "536870912" {
		t.Errorf("after the expansion %s has refquota %s, want 536870912", ds, q)
	}

	must(t, "nomad", "volume", "delete", "snapped-restore")
	must(t, "nomad", "volume", "snapshot", "delete", pluginID, snapID)
	must(t, "nomad", "volume", "delete", id)
	e.onNode(t, e.node, ds, false)
}

// 5. Restarting zfs-csi, its Nomad bridge and the Nomad agent while a job
// writes: the job keeps running and its data, the plugin stays healthy.
func testRestart(t *testing.T, e *env) {
	id := "busy"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.node + `"`, `"10GiB"`: `"256MiB"`})
	must(t, "nomad", "volume", "create", spec)
	_, ds := dataset(t, e.volume(t, id))
	path := e.workload(t, "busy-writer", id, false, "set -e; i=0; while true; do i=$((i+1)); echo $i >> /data/log; sleep 0.2; done")
	a := e.running(t, path, "busy-writer")
	mount := mountOf(t, ds)
	lines := func() int {
		data, err := os.ReadFile(filepath.Join(mount, "log"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(data), "\n")
	}
	for _, unit := range []string{"zfs-csi", "zfs-csi-nomad", "nomad"} {
		before := lines()
		must(t, "systemctl", "restart", unit)
		e2eutil.Eventually(t, 3*time.Minute, "the agent's API after restarting "+unit, func() (bool, error) {
			_, err := run("nomad", "node", "status", "-self")
			return err == nil, err
		})
		time.Sleep(15 * time.Second)
		// The plugin stays healthy: Nomad needs it to unpublish the
		// volume when the job stops.
		e2eutil.Eventually(t, 2*time.Minute, "the plugin healthy after restarting "+unit, func() (bool, error) {
			var p struct{ ControllersHealthy, NodesHealthy int }
			out, err := run("nomad", "plugin", "status", "-json", pluginID)
			if err != nil || decode(out, &p) != nil {
				return false, fmt.Errorf("%v %s", err, out)
			}
			return p.ControllersHealthy == 2 && p.NodesHealthy == 2, fmt.Errorf("controllers %d, nodes %d healthy", p.ControllersHealthy, p.NodesHealthy)
		})
		var now alloc
		nomadJSON(t, &now, "alloc", "status", "-json", a.ID)
		if now.ClientStatus != "running" || now.TaskStates["t"].Restarts != 0 {
			t.Errorf("after restarting %s: the writer is %s (%s), %d restarts", unit, now.ClientStatus, now.ClientDescription, now.TaskStates["t"].Restarts)
		}
		if after := lines(); after <= before {
			t.Errorf("after restarting %s the writer stopped writing: %d lines, then %d", unit, before, after)
		}
	}
	e.stopService(t, "busy-writer", id)
	e2eutil.Eventually(t, 3*time.Minute, "the volume's claim to be released", func() (bool, error) {
		_, err := run("nomad", "volume", "delete", id)
		return err == nil, err
	})
	e.onNode(t, e.node, ds, false)
}

// mountOf finds where a dataset is mounted on this host.
func mountOf(t *testing.T, ds string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == ds && f[2] == "zfs" {
			return f[1]
		}
	}
	t.Fatalf("%s is not mounted", ds)
	return ""
}

// 6. Nothing is left on either node, and no volume in Nomad.
func testNothingLeft(t *testing.T, e *env) {
	for _, node := range []string{e.node, e.peer} {
		e2eutil.Eventually(t, 4*time.Minute, "nothing under "+e.pool+"/csi on "+node, func() (bool, error) {
			var left []string
			for _, ds := range e.datasets(t, node) {
				// The container of pulls under way (controller.IncomingContainer)
				// stays; anything in it would be listed and count.
				if ds != e.pool && ds != e.pool+"/csi" && ds != e.pool+"/csi/_incoming" {
					left = append(left, ds)
				}
			}
			return len(left) == 0, fmt.Errorf("left: %v", left)
		})
	}
	if out := strings.TrimSpace(must(t, "nomad", "volume", "status", "-type", "csi")); !strings.Contains(out, "No CSI volumes") && out != "" {
		t.Errorf("volumes left in Nomad:\n%s", out)
	}
}
