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

// Only the plugin job reaches the daemon (docs/security.md, "Nomad": who can reach the
// daemon). An ordinary user, with the "write" policy in namespace default,
// cannot submit the plugin job or a copy of it; a copy that a management
// token runs in namespace default gets no socket from the bridge while the
// real plugin stays healthy; the plugin's own task runs as nobody without
// capabilities and cannot open its socket directory; no client offers a host
// volume "zfs-csi".
//
// long: one scenario on the cluster whose steps build on the volumes before them
func testOnlyThePluginJob(t *testing.T, e *env) {
	ordinary := e.ordinaryToken(t)
	imposter := e.spec(t, "zfs-csi.nomad.hcl", map[string]string{`namespace = "zfs-csi"`: `namespace = "default"`})
	hostVolume := e.hostVolumeJob(t)

	t.Run("an ordinary user's token cannot submit the plugin job, a copy of it, or a job asking for host volume zfs-csi", func(t *testing.T) {
		for what, path := range map[string]string{"the plugin job": filepath.Join(e.specs, "zfs-csi.nomad.hcl"),
			"the copy in namespace default": imposter, "the host volume job": hostVolume} {
			out, err := runAs(ordinary, "nomad", "job", "run", "-detach", path)
			t.Logf("%s, as an ordinary user: %v", what, strings.TrimSpace(out))
			if err == nil || !strings.Contains(out, "Permission denied") {
				t.Errorf("%s was not refused: %v", what, err)
			}
		}
	})

	t.Run("no client offers a host volume zfs-csi", func(t *testing.T) {
		out, _ := run("nomad", "job", "plan", hostVolume)
		t.Logf("nomad job plan of a job asking for host volume zfs-csi:\n%s", out)
		if !strings.Contains(out, "missing compatible host volumes") {
			t.Errorf("the plan does not say that no client has the volume")
		}
	})

	t.Run("a copy of the plugin job in namespace default gets no socket", func(t *testing.T) {
		must(t, "nomad", "job", "run", "-detach", imposter)
		defer must(t, "nomad", "job", "stop", "-purge", "-namespace", "default", "zfs-csi")
		var here alloc
		e2eutil.Eventually(t, 5*time.Minute, "the copy running on "+e.node, func() (bool, error) {
			var allocs []alloc
			out, err := run("nomad", "job", "allocs", "-namespace", "default", "-json", "zfs-csi")
			if err != nil || decode(out, &allocs) != nil {
				return false, fmt.Errorf("%v %s", err, out)
			}
			for _, a := range allocs {
				if a.NodeName == e.node && a.ClientStatus == "running" {
					here = a
					return true, nil
				}
			}
			return false, fmt.Errorf("allocs %+v", allocs)
		})
		dir := filepath.Join("/opt/nomad/data/client/csi/plugins", here.ID)
		// The bridge looks every 2 s; Nomad probes every 5 s.
		e2eutil.Eventually(t, time.Minute, "the bridge's refusal of "+here.ID, func() (bool, error) {
			out, err := run("journalctl", "-u", "zfs-csi-nomad", "--no-pager", "-o", "cat")
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, here.ID) && strings.Contains(line, "allocation refused") {
					t.Logf("zfs-csi-nomad: %s", line)
					return true, nil
				}
			}
			return false, err
		})
		time.Sleep(10 * time.Second)
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			t.Errorf("Nomad's socket directory for the copy: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "csi.sock")); !os.IsNotExist(err) {
			t.Errorf("%s/csi.sock exists (%v): the copy reaches the daemon", dir, err)
		}
		// The real plugin is untouched by the copy. (Nomad counts plugin
		// instances per client, so this cannot tell whether the copy
		// registered: the missing socket above does.)
		var plugin struct{ ControllersHealthy, NodesHealthy int }
		nomadJSON(t, &plugin, "plugin", "status", "-json", pluginID)
		if plugin.ControllersHealthy != 2 || plugin.NodesHealthy != 2 {
			t.Errorf("the plugin: controllers %d, nodes %d healthy, want 2 and 2", plugin.ControllersHealthy, plugin.NodesHealthy)
		}
		status, _ := run("nomad", "alloc", "status", "-namespace", "default", here.ID)
		t.Logf("the copy's allocation on %s:\n%s", e.node, status)
	})

	t.Run("the plugin's task runs as nobody without capabilities and cannot open its socket directory", func(t *testing.T) {
		var allocs []alloc
		nomadJSON(t, &allocs, "job", "allocs", "-namespace", pluginNamespace, "-json", "zfs-csi")
		var id string
		for _, a := range allocs {
			if a.NodeName == e.node && a.ClientStatus == "running" {
				id = a.ID
			}
		}
		if id == "" {
			t.Fatalf("no running plugin allocation on %s: %+v", e.node, allocs)
		}
		out, err := run("nomad", "alloc", "exec", "-namespace", pluginNamespace, "-task", "plugin", id, "/bin/sh", "-c", "id -u; grep CapEff /proc/self/status; ls /csi")
		t.Logf("nomad alloc exec into the plugin task: %v\n%s", err, out)
		if !strings.HasPrefix(out, "65534\n") || !strings.Contains(out, "CapEff:\t0000000000000000") ||
			!strings.Contains(out, "Permission denied") || err == nil {
			t.Errorf("want uid 65534, no effective capability and ls refused")
		}
	})
}

// ordinaryToken makes a token with the "write" policy in namespace default,
// the rights of a team that runs its jobs there.
func (e *env) ordinaryToken(t *testing.T) string {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "ordinary.policy.hcl")
	rules := "namespace \"default\" {\n  policy = \"write\"\n}\n"
	if err := os.WriteFile(policy, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, "nomad", "acl", "policy", "apply", "e2e-ordinary", policy)
	return strings.TrimSpace(must(t, "nomad", "acl", "token", "create", "-name", "e2e-ordinary", "-policy", "e2e-ordinary", "-t", "{{ .SecretID }}"))
}

// hostVolumeJob is an ordinary job asking for the host volume the daemon's
// socket directory used to be.
func (e *env) hostVolumeJob(t *testing.T) string {
	t.Helper()
	hcl := `job "wants-the-socket" {
  type = "batch"
  group "g" {
    volume "socket" {
      type   = "host"
      source = "zfs-csi"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
      volume_mount {
        volume      = "socket"
        destination = "/run/zfs-csi"
      }
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`
	path := filepath.Join(t.TempDir(), "wants-the-socket.nomad.hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
