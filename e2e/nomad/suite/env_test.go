package suite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// env is the cluster under test, from the environment suite.sh sets.
type env struct {
	specs   string // the shipped packaging/nomad files
	node    string // this host's node (and Nomad client) name
	peer    string // the other client's
	peerZFS string // where the peer publishes its `zfs list`
	// peerResults is where the peer publishes the rest (suite.sh's
	// step_publish): its properties and counts from its daemon's log.
	peerResults string
	pool        string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			t.Skipf("%s is not set: these scenarios run on the e2e-nomad cluster (make e2e-nomad)", k)
		}
		return v
	}
	return &env{specs: get("ZFS_CSI_E2E_NOMAD_SPECS"), node: get("ZFS_CSI_E2E_NODE"), peer: get("ZFS_CSI_E2E_PEER"),
		peerZFS: get("ZFS_CSI_E2E_PEER_ZFS"), peerResults: get("ZFS_CSI_E2E_PEER_RESULTS"), pool: get("ZFS_CSI_E2E_POOL")}
}

// run runs a command and returns its combined output.
func run(name string, args ...string) (string, error) {
	out, err := execute(nil, name, args...)
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out))
	}
	return out, err
}

// runAs runs a nomad command with another ACL token than the suite's.
func runAs(token, name string, args ...string) (string, error) {
	return execute([]string{"NOMAD_TOKEN=" + token}, name, args...)
}

// askedNoInstance are Nomad's answers when it sent a volume call to no
// plugin instance at all, none being healthy in its view. Nomad probes the
// plugin every 30 s with a deadline of 5 s, fixed in its code; the daemon's
// Probe runs `zpool` and `zfs list`, which on an emulated host loaded by
// other guests took up to 24 s (measured), so Nomad counts a plugin
// unhealthy for half a minute now and then. The scenarios are not about
// that: such a call is asked again once a probe passes, and counted.
var askedNoInstance = []string{"no healthy controllers for CSI plugin", "failed to find instances of controller plugin"}

// askedAgain counts the nomad commands asked again for askedNoInstance.
var askedAgain atomic.Int64

// execute runs a command with env added to the suite's and returns its
// combined output; a nomad command that reached no plugin instance
// (askedNoInstance) is run again for up to three minutes.
func execute(env []string, name string, args ...string) (string, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var out bytes.Buffer
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err == nil || name != "nomad" || time.Now().After(deadline) || !slices.ContainsFunc(askedNoInstance, func(phrase string) bool {
			return strings.Contains(out.String(), phrase)
		}) {
			return out.String(), err
		}
		askedAgain.Add(1)
		time.Sleep(5 * time.Second)
	}
}

func must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nomadJSON runs a nomad command with -json and decodes its output.
func nomadJSON(t *testing.T, into any, args ...string) {
	t.Helper()
	out := must(t, "nomad", args...)
	if err := json.Unmarshal([]byte(out), into); err != nil {
		t.Fatalf("nomad %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// spec writes a copy of a shipped volume spec with the edits docs/nomad.md tells
// a user to make (id, name, node, size, snapshot) and returns its path.
func (e *env) spec(t *testing.T, file string, edits map[string]string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.specs, file))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for from, to := range edits {
		if !strings.Contains(text, from) {
			t.Fatalf("%s has no %q to replace: the spec changed, update the scenario", file, from)
		}
		text = strings.ReplaceAll(text, from, to)
	}
	path := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// volume is what `nomad volume status -json` tells about one volume.
type volume struct {
	ID, ExternalID string
	Schedulable    bool
	Capacity       int64
	Snapshot       string
}

func (e *env) volume(t *testing.T, id string) volume {
	t.Helper()
	var v volume
	nomadJSON(t, &v, "volume", "status", "-json", id)
	return v
}

// dataset is the dataset behind a volume and the node it says it is on.
func dataset(t *testing.T, v volume) (node, ds string) {
	t.Helper()
	node, ds, ok := strings.Cut(v.ExternalID, ":")
	if !ok {
		t.Fatalf("volume %s: external ID %q is not <node>:<dataset>", v.ID, v.ExternalID)
	}
	return node, ds
}

// datasets lists what a node's pool holds: this host's with zfs, the peer's
// from what it publishes into the share every second.
func (e *env) datasets(t *testing.T, node string) []string {
	t.Helper()
	var out string
	if node == e.node {
		out = must(t, "zfs", "list", "-H", "-t", "all", "-o", "name", "-r", e.pool)
	} else {
		data, err := os.ReadFile(e.peerZFS)
		if err != nil {
			t.Fatalf("the peer's zfs list: %v", err)
		}
		out = string(data)
	}
	return strings.Fields(out)
}

// onNode waits until ds exists (want) or is gone (!want) on node.
func (e *env) onNode(t *testing.T, node, ds string, want bool) {
	t.Helper()
	e2eutil.Eventually(t, time.Minute, fmt.Sprintf("%s on %s: exists=%v", ds, node, want), func() (bool, error) {
		for _, name := range e.datasets(t, node) {
			if name == ds {
				return want, nil
			}
		}
		return !want, nil
	})
}

// decode reads the JSON a nomad command printed.
func decode(out string, into any) error { return json.Unmarshal([]byte(out), into) }

// peerCommands numbers the scripts onPeer hands the peer.
var peerCommands atomic.Int64

// onPeer runs script as root on the peer, as its operator would at its
// console (suite.sh's serve_commands runs what is put in the share for it),
// and returns its stdout; a non-zero exit status is an error carrying its
// stderr.
func (e *env) onPeer(t *testing.T, timeout time.Duration, script string) (string, error) {
	t.Helper()
	dir := filepath.Join(e.peerResults, "commands")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, fmt.Sprintf("%d-%d", os.Getpid(), peerCommands.Add(1)))
	// Renamed into place whole: the peer looks for *.sh every second.
	if err := os.WriteFile(base+".tmp", []byte(script+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(base+".tmp", base+".sh"); err != nil {
		t.Fatal(err)
	}
	var rc string
	e2eutil.Eventually(t, timeout, fmt.Sprintf("%s to run %q", e.peer, script), func() (bool, error) {
		data, err := os.ReadFile(base + ".rc")
		rc = strings.TrimSpace(string(data))
		return err == nil, err
	})
	stdout, _ := os.ReadFile(base + ".out")
	stderr, _ := os.ReadFile(base + ".err")
	if rc != "0" {
		return string(stdout), fmt.Errorf("on %s, %s: exit status %s: %s", e.peer, script, rc, strings.TrimSpace(string(stderr)))
	}
	return string(stdout), nil
}
