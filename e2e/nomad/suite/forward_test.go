package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
)

// otherNodeMarker is the phrase of a refusal for another node's volume
// (rpc.OtherNodeMarker), the one Nomad's client retries on.
const otherNodeMarker = "CSI client error (retryable)"

// 2b. Forwarding: with the peer channel configured (suite.sh
// gives both daemons certificates and each other's address), a controller
// call for node-b's volume that reaches node-a's daemon is forwarded to
// node-b and answered from there. First deterministically, node-a's daemon
// asked with zfs-csi ctl on this host; then through Nomad, which sends each
// call to either instance: every call succeeds and neither daemon refuses
// one for being another node's, so Nomad's retry on the next instance is no
// longer what routes them.
//
// long: one scenario on the cluster whose steps build on the volumes before them
func testForwarding(t *testing.T, e *env) {
	since := time.Now().Add(-time.Second)
	before := e.peerCounts(t)

	id := "fwd"
	spec := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"64MiB"`})
	must(t, "nomad", "volume", "create", spec)
	v := e.volume(t, id)
	node, ds := dataset(t, v)
	if node != e.peer {
		t.Fatalf("volume %s asked for %s, made on %s", id, e.peer, node)
	}
	e.onNode(t, e.peer, ds, true)

	t.Run("node-a's daemon expands node-b's volume", func(t *testing.T) {
		out := must(t, "zfs-csi", "ctl", "expand-volume", v.ExternalID, "--size", "128Mi")
		t.Log(strings.TrimSpace(out))
		e.peerProperty(t, ds, "refquota", "134217728")
	})
	t.Run("node-a's daemon modifies node-b's volume", func(t *testing.T) {
		must(t, "zfs-csi", "ctl", "modify-volume", v.ExternalID, "--mutable-param", "zfs.compression=zstd")
		e.peerProperty(t, ds, "compression", "zstd")
	})
	t.Run("node-a's daemon snapshots, lists and deletes node-b's snapshot", func(t *testing.T) {
		snapID := strings.TrimSpace(must(t, "zfs-csi", "ctl", "-o", "id", "create-snapshot", "fwd-snap", v.ExternalID))
		snapNode, snapshot, _ := strings.Cut(snapID, ":")
		if snapNode != e.peer || !strings.HasPrefix(snapshot, ds+"@") {
			t.Fatalf("snapshot ID %q, want one of %s on %s", snapID, ds, e.peer)
		}
		e.onNode(t, e.peer, snapshot, true)
		if listed := must(t, "zfs-csi", "ctl", "-o", "id", "list-snapshots", "--volume", v.ExternalID); !strings.Contains(listed, snapID) {
			t.Errorf("node-a lists node-b's volume's snapshots as %q, want %s among them", listed, snapID)
		}
		must(t, "zfs-csi", "ctl", "delete-snapshot", snapID)
		e.onNode(t, e.peer, snapshot, false)
	})
	t.Run("a volume of a node without an address is UNAVAILABLE, with the phrase Nomad retries on", func(t *testing.T) {
		out, err := run("zfs-csi", "ctl", "delete-volume", "node-c:"+e.pool+"/csi/nowhere")
		if err == nil || !strings.Contains(out, "Unavailable") || !strings.Contains(out, otherNodeMarker) {
			t.Errorf("delete-volume of node-c's volume: %v %s", err, out)
		}
	})

	t.Run("through Nomad every call for node-b's volume is answered, none refused", func(t *testing.T) {
		for i := range 3 {
			name := fmt.Sprintf("n%d", i)
			out := strings.Split(strings.TrimSpace(must(t, "nomad", "volume", "snapshot", "create", id, name)), "\n")
			if len(out) != 2 {
				t.Fatalf("snapshot create printed %q", out)
			}
			snapID := strings.Fields(out[1])[0]
			e.onNode(t, e.peer, strings.TrimPrefix(snapID, e.peer+":"), true)
			must(t, "nomad", "volume", "snapshot", "delete", pluginID, snapID)
			e.onNode(t, e.peer, strings.TrimPrefix(snapID, e.peer+":"), false)
		}
		grown := e.spec(t, "volume-dataset.hcl", map[string]string{`"pg-data"`: `"` + id + `"`, `"@NODE@"`: `"` + e.peer + `"`, `"10GiB"`: `"256MiB"`})
		must(t, "nomad", "volume", "create", grown)
		e.peerProperty(t, ds, "refquota", "268435456")
		must(t, "nomad", "volume", "delete", id)
		e.onNode(t, e.peer, ds, false)
	})

	// What the daemons logged meanwhile: node-a forwarded (at least the
	// five ctl calls) and refused nothing but node-c's call; node-b
	// answered node-a over the channel and refused nothing.
	journal := must(t, "journalctl", "-u", "zfs-csi", "-o", "cat", "--no-pager", "--since", "@"+strconv.FormatInt(since.Unix(), 10))
	forwarded, refused := 0, 0
	for _, line := range strings.Split(journal, "\n") {
		if strings.Contains(line, `"forwarded_to":"`+e.peer+`"`) && strings.Contains(line, `"code":"OK"`) {
			forwarded++
		}
		if strings.Contains(line, otherNodeMarker) && !strings.Contains(line, "node-c") {
			refused++
		}
	}
	t.Logf("node-a: %d calls forwarded to %s and answered OK, %d refused as another node's", forwarded, e.peer, refused)
	if forwarded < 5 || refused != 0 {
		t.Errorf("node-a forwarded %d calls (want at least 5) and refused %d (want 0)", forwarded, refused)
	}
	time.Sleep(5 * time.Second) // node-b publishes its counts every few seconds
	after := e.peerCounts(t)
	t.Logf("node-b: %d calls from node-a over the channel, %d refusals (before the scenario: %v)",
		after["forwarded-from-node-a"]-before["forwarded-from-node-a"], after["refusals"]-before["refusals"], before)
	if after["forwarded-from-node-a"]-before["forwarded-from-node-a"] < 5 || after["refusals"] != before["refusals"] {
		t.Errorf("node-b's counts went from %v to %v: want at least 5 calls from node-a and no new refusal", before, after)
	}
}

// peerProps reads the peer's published `zfs get` (suite.sh's
// zfs-props.txt): one name, property, value triple a line.
func (e *env) peerProps() ([][3]string, error) {
	data, err := os.ReadFile(filepath.Join(e.peerResults, "zfs-props.txt"))
	if err != nil {
		return nil, err
	}
	var props [][3]string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			props = append(props, [3]string{f[0], f[1], f[2]})
		}
	}
	return props, nil
}

// peerProperty waits until the peer's published `zfs get` shows value.
func (e *env) peerProperty(t *testing.T, ds, property, value string) {
	t.Helper()
	e2eutil.Eventually(t, time.Minute, fmt.Sprintf("%s=%s on %s's %s", property, value, e.peer, ds), func() (bool, error) {
		props, err := e.peerProps()
		if err != nil {
			return false, err
		}
		for _, p := range props {
			if p[0] == ds && p[1] == property {
				return p[2] == value, fmt.Errorf("%s", p[2])
			}
		}
		return false, fmt.Errorf("%s has no %s", ds, property)
	})
}

// peerCounts reads what node-b's daemon logged, as suite.sh publishes it.
func (e *env) peerCounts(t *testing.T) map[string]int {
	t.Helper()
	counts := map[string]int{}
	e2eutil.Eventually(t, 30*time.Second, "node-b's published log counts", func() (bool, error) {
		data, err := os.ReadFile(filepath.Join(e.peerResults, "driver-counts.txt"))
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if name, value, ok := strings.Cut(line, " "); ok {
				n, err := strconv.Atoi(value)
				if err != nil {
					return false, err
				}
				counts[name] = n
			}
		}
		return len(counts) == 2, fmt.Errorf("%q", data)
	})
	return counts
}
