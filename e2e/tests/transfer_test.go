//go:build e2e

package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/peer"
	"github.com/zfs-csi/zfs-csi/peer/peertest"
)

// Two daemons on one pool, under parents of their own and with node IDs of
// their own, joined by the peer channel on loopback: what two nodes do,
// minus the wire (e2e/nomad runs two guests).
type peerPair struct {
	a, b             *driverProcess
	parentA, parentB string
	ca               *peertest.CA
}

// peerNodes are the node IDs the daemons of these tests take, beside
// nodeID (datasetOf accepts their volume IDs).
var peerNodes = map[string]bool{"node-a": true, "node-b": true, "node-c": true}

const (
	peerAddressA = "127.0.0.1:17441"
	peerAddressB = "127.0.0.1:17442"
)

func peerArgs(node, listen, other, otherAddress string, files peertest.Files) []string {
	return []string{"--node-id", node, "--peer-listen", listen, "--peer-cert", files.Cert, "--peer-key", files.Key,
		"--peer-ca", files.CA, "--peer", other + "=" + otherAddress, "--allow-moves"}
}

func startPeerPair(t *testing.T) *peerPair {
	t.Helper()
	parent := testParent(t)
	p := &peerPair{parentA: parent + "/a", parentB: parent + "/b", ca: peertest.NewCA(t, "cluster")}
	mustRun(t, "zfs", "create", p.parentA)
	mustRun(t, "zfs", "create", p.parentB)
	p.a = startDriver(t, p.parentA, peerArgs("node-a", peerAddressA, "node-b", peerAddressB,
		p.ca.Node(t, "node-a", peer.NodeURIPrefix+"node-a"))...)
	p.b = startDriver(t, p.parentB, peerArgs("node-b", peerAddressB, "node-a", peerAddressA,
		p.ca.Node(t, "node-b", peer.NodeURIPrefix+"node-b"))...)
	return p
}

// restoreOn makes a volume from snapshotID on d, retrying while the pull
// runs (ABORTED with its progress; UNAVAILABLE too when the sender is
// expected back), and returns it with the calls' errors.
func restoreOn(t *testing.T, d *driverProcess, req *csi.CreateVolumeRequest, within time.Duration, retryUnavailable bool) (*csi.Volume, []error, error) {
	t.Helper()
	var answers []error
	deadline := time.Now().Add(within)
	for {
		callCtx, cancel := context.WithTimeout(ctx(t), 10*time.Second)
		response, err := d.controller.CreateVolume(callCtx, req)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return response.GetVolume(), answers, nil
		case codes.Unavailable:
			if !retryUnavailable {
				return nil, answers, err
			}
			fallthrough
		case codes.Aborted, codes.DeadlineExceeded:
			answers = append(answers, err)
			if time.Now().After(deadline) {
				return nil, answers, err
			}
			time.Sleep(time.Second)
			continue
		}
		return nil, answers, err
	}
}

// fromSnapshot asks for a volume from snapshotID on node (its requisite
// topology): without it the call would go to the snapshot's node, where
// the volume is an instant clone (forwarding).
func fromSnapshot(node, name string, size int64, capability *csi.VolumeCapability, snapshotID string) *csi.CreateVolumeRequest {
	req := volumeRequest(name, size, capability, nil)
	req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{"zfs.csi.dev/node": node}}}}
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshotID}}}
	return req
}

// logLines are the daemon's log lines with the message msg, as JSON maps.
func logLines(t *testing.T, d *driverProcess, msg string) []map[string]any {
	t.Helper()
	file, err := os.Open(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var lines []map[string]any
	scanner := bufio.NewScanner(file)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		var line map[string]any
		if json.Unmarshal(scanner.Bytes(), &line) == nil && line["message"] == msg {
			lines = append(lines, line)
		}
	}
	return lines
}

// incomingLeft is what pulls left under a parent's hidden container.
func incomingLeft(t *testing.T, parent string) string {
	return strings.TrimSpace(run(t, "sh", "-c", `zfs list -H -o name -r -t all "$1/_incoming" 2>/dev/null | tail -n +2`, "sh", parent))
}

// A restore of node-a's snapshot on node-b holds its data byte for byte,
// through the peer channel; the figures are printed beside a bare
// `zfs send | zfs receive` of the same snapshot on the same host.
func TestARestoreOfAnotherNodesSnapshotHoldsItsData(t *testing.T) {
	p := startPeerPair(t)
	const mib = 128
	source, want := copySource(t, p.a, "moving", mib)
	snapshot := p.a.createSnapshot("moving-snap", source.GetVolumeId())

	started := time.Now()
	restored, answers, err := restoreOn(t, p.b, fromSnapshot("node-b", "restored", mib<<20, blockCap(), snapshot.GetSnapshotId()), 10*time.Minute, false)
	took := time.Since(started)
	if err != nil {
		t.Fatalf("restore on node-b: %v (after %d ABORTED answers)", err, len(answers))
	}
	if !strings.HasPrefix(restored.GetVolumeId(), "node-b:"+p.parentB+"/") {
		t.Errorf("restored as %s, want a volume of node-b", restored.GetVolumeId())
	}
	checkCopy(t, p.parentB, restored, mib<<20, mib, want)
	if left := incomingLeft(t, p.parentB); left != "" {
		t.Errorf("left in the hidden container: %s", left)
	}
	for _, answer := range answers {
		if status.Code(answer) == codes.Aborted && !strings.Contains(answer.Error(), "received") {
			t.Errorf("an ABORTED answer without progress: %v", answer)
		}
	}

	// The same snapshot, bare, on the same host: what the channel costs.
	_, dataset, _ := strings.Cut(snapshot.GetSnapshotId(), ":")
	bareStarted := time.Now()
	mustRun(t, "sh", "-c", `zfs send -L -e -c "$1" | zfs receive -u "$2"`, "sh", dataset, p.parentB+"/bare")
	bare := time.Since(bareStarted)
	var pulled time.Duration
	var firstByte float64
	for _, line := range logLines(t, p.b, "pull stream ended") {
		ms, _ := line["duration"].(float64)
		pulled += time.Duration(ms * float64(time.Millisecond))
	}
	for _, line := range logLines(t, p.b, "pulling") {
		firstByte, _ = line["first_byte_after"].(float64)
	}
	streamBytes, _ := strconv.ParseFloat(strings.TrimSpace(mustRun(t, "sh", "-c", `zfs send -nP -L -e -c "$1" | awk '/^size/ {print $2}'`, "sh", dataset)), 64)
	t.Logf("cross-node restore of %d MiB (stream %.0f MiB): pull %.1f s (%.1f MiB/s), whole CreateVolume retries %.1f s; bare zfs send|receive %.1f s (%.1f MiB/s); ratio %.2f; time to first byte %.0f ms",
		mib, streamBytes/(1<<20), pulled.Seconds(), streamBytes/(1<<20)/pulled.Seconds(), took.Seconds(),
		bare.Seconds(), streamBytes/(1<<20)/bare.Seconds(), pulled.Seconds()/bare.Seconds(), firstByte)
}

// The sending daemon killed mid-stream: the pull resumes from node-b's
// resume token when node-a is back, and the restore still holds the data.
func TestARestoreWhoseSenderIsKilledMidStreamResumes(t *testing.T) {
	p := startPeerPair(t)
	const mib = 256
	source, want := copySource(t, p.a, "big", mib)
	snapshot := p.a.createSnapshot("big-snap", source.GetVolumeId())
	req := fromSnapshot("node-b", "big-restore", mib<<20, blockCap(), snapshot.GetSnapshotId())

	// The first call starts the pull and answers ABORTED with its progress
	// before its deadline; on a busy guest that answer can reach the caller
	// just after it (node-b logged ABORTED at 4.7 s of 5 once, the caller
	// read DEADLINE_EXCEEDED). Either way the pull goes on without it.
	callCtx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	_, err := p.b.controller.CreateVolume(callCtx, req)
	cancel()
	if code := status.Code(err); code != codes.Aborted && code != codes.DeadlineExceeded {
		t.Fatalf("the first call: %v, want ABORTED while the pull runs", err)
	}
	// Killed before node-b holds any of the stream, the sender leaves
	// nothing to resume and node-b rightly starts over: the kill waits for
	// 16 MiB to have landed. A fixed 2 s after the dataset appeared once
	// fell before that on a loaded host.
	incoming := p.parentB + "/_incoming/big-restore"
	eventually(t, 2*time.Minute, func() string {
		used, _ := strconv.ParseInt(strings.TrimSpace(run(t, "zfs", "get", "-Hp", "-o", "value", "used", incoming)), 10, 64)
		if used < 16<<20 {
			return fmt.Sprintf("node-b holds %d bytes of the stream", used)
		}
		return ""
	})
	p.a.killHard()
	restored, _, err := restoreOn(t, p.b, req, 10*time.Minute, true)
	if err != nil {
		t.Fatalf("restore after the sender's kill: %v", err)
	}
	checkCopy(t, p.parentB, restored, mib<<20, mib, want)
	pulls := logLines(t, p.b, "pulling")
	resumed := false
	for _, line := range pulls {
		resumed = resumed || line["resumed"] == true
	}
	if !resumed {
		t.Errorf("node-b's log shows no resumed pull: %v", pulls)
	}
}

// An encrypted volume travels raw: node-b's restore is encrypted, its key
// not loaded, and stages with the volume's secrets.
func TestAnEncryptedRestoreOnAnotherNodeOpensWithTheVolumesSecrets(t *testing.T) {
	p := startPeerPair(t)
	secrets := map[string]string{"encryptionPassphrase": e2ePassphrase}
	req := volumeRequest("secret", 64<<20, mountCap(""), map[string]string{"encryption": "aes-256-gcm"})
	req.Secrets = secrets
	volume := p.a.createVolume(req)
	dir := mountDataset(t, datasetOf(t, volume.GetVolumeId()))
	mustRun(t, "sh", "-c", `echo sealed > "$1/data" && sync`, "sh", dir)
	snapshot := p.a.createSnapshot("secret-snap", volume.GetVolumeId())

	restored, _, err := restoreOn(t, p.b, fromSnapshot("node-b", "secret-restore", 64<<20, mountCap(""), snapshot.GetSnapshotId()), 5*time.Minute, false)
	if err != nil {
		t.Fatalf("restore on node-b: %v", err)
	}
	dataset := datasetOf(t, restored.GetVolumeId())
	for property, want := range map[string]string{"encryption": "aes-256-gcm", "keystatus": "unavailable", "encryptionroot": dataset, "keylocation": "prompt"} {
		if got := zfsGet(t, property, dataset); got != want {
			t.Errorf("%s of the restore is %q, want %q", property, got, want)
		}
	}
	staging := filepath.Join(t.TempDir(), "staging")
	mustRun(t, "mkdir", staging)
	if _, err := p.b.node.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: restored.GetVolumeId(), StagingTargetPath: staging,
		VolumeCapability: mountCap(""), VolumeContext: restored.GetVolumeContext(), Secrets: secrets}); err != nil {
		t.Fatalf("staging the restore with the volume's secrets: %v", err)
	}
	if got := strings.TrimSpace(mustRun(t, "cat", filepath.Join(staging, "data"))); got != "sealed" {
		t.Errorf("the restore reads %q", got)
	}
	if _, err := p.b.node.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: restored.GetVolumeId(), StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
}

// A daemon whose certificate comes from another CA gets nothing: node-a
// refuses the handshake, node-c's restore fails, nothing is received.
func TestAPeerWithAnotherCAsCertificateIsRefused(t *testing.T) {
	p := startPeerPair(t)
	volume := p.a.createVolume(volumeRequest("guarded", 64<<20, mountCap(""), nil))
	snapshot := p.a.createSnapshot("guarded-snap", volume.GetVolumeId())
	other := peertest.NewCA(t, "other")
	parentC := strings.TrimSuffix(p.parentA, "/a") + "/c"
	mustRun(t, "zfs", "create", parentC)
	c := startDriver(t, parentC, peerArgs("node-c", "127.0.0.1:17443", "node-a", peerAddressA,
		other.Node(t, "node-c", peer.NodeURIPrefix+"node-c"))...)
	_, _, err := restoreOn(t, c, fromSnapshot("node-c", "stolen", 64<<20, mountCap(""), snapshot.GetSnapshotId()), 5*time.Minute, false)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("node-c's restore: %v, want UNAVAILABLE for the refused certificate", err)
	}
	if left := incomingLeft(t, parentC); strings.Contains(left, "@") {
		t.Errorf("node-c received something: %s", left)
	}
}

// moveCommands are docs/across-nodes.md's move, verbatim (the root
// package's test holds the two together): two rounds while the workload
// writes, the last once it stopped.
const moveCommands = `zfs-csi ctl move-volume "$NEW_NAME" "$OLD_VOLUME_ID"
zfs-csi ctl move-volume "$NEW_NAME" "$OLD_VOLUME_ID"
zfs-csi ctl move-volume --final "$NEW_NAME" "$OLD_VOLUME_ID"`

// A volume in use moves to node-b in rounds, run as the docs show them on
// node-b: each round brings what the workload wrote, the last one after it
// stopped makes the volume and deletes the source.
func TestAVolumeInUseMovesInRoundsAsTheDocsShow(t *testing.T) {
	p := startPeerPair(t)
	old := p.a.createVolume(volumeRequest("workload", 128<<20, mountCap(""), nil))
	source := datasetOf(t, old.GetVolumeId())
	dir := t.TempDir()
	mustRun(t, "mount", "-t", "zfs", source, dir)
	env := append(os.Environ(), "PATH="+filepath.Dir(os.Getenv("ZFS_CSI_BINARY"))+":"+os.Getenv("PATH"),
		"CSI_ENDPOINT=unix://"+p.b.socket, "NEW_NAME=workload-moved", "OLD_VOLUME_ID="+old.GetVolumeId())
	ctlRun := func(line string) (string, error) {
		cmd := exec.Command("sh", "-c", line)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	lines := strings.Split(moveCommands, "\n")
	for round, line := range lines[:2] {
		mustRun(t, "sh", "-c", `head -c 16M /dev/urandom > "$1/file-$2" && sync`, "sh", dir, strconv.Itoa(round))
		out, err := ctlRun(line)
		if err == nil || !strings.Contains(out, "Aborted") || !strings.Contains(out, fmt.Sprintf("round %d received", round+1)) {
			t.Fatalf("round %d (%s): %v\n%s", round+1, line, err, out)
		}
		t.Logf("round %d: %s", round+1, strings.TrimSpace(out))
		if exists(t, p.parentB+"/workload-moved") {
			t.Fatalf("the volume is visible on node-b after round %d", round+1)
		}
	}
	// What an earlier try could have left on the source: a CSI snapshot
	// named as the final round once was. The final round must not take it
	// for its own, or the last writes below would be lost.
	p.a.createSnapshot("zfs-csi-pull-node-b-workload-moved-3", old.GetVolumeId())
	mustRun(t, "sh", "-c", `head -c 4M /dev/urandom > "$1/last" && sync`, "sh", dir)
	want := mustRun(t, "sh", "-c", `cd "$1" && sha256sum file-0 file-1 last`, "sh", dir)
	mustRun(t, "umount", dir) // the workload stops
	out, err := ctlRun(lines[2])
	if err != nil {
		t.Fatalf("the final round: %v\n%s", err, out)
	}
	var created struct {
		Volume struct {
			VolumeID string `json:"volume_id"`
		} `json:"volume"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || !strings.HasPrefix(created.Volume.VolumeID, "node-b:") {
		t.Fatalf("the final round printed %s (%v)", out, err)
	}
	moved := mountDataset(t, datasetOf(t, created.Volume.VolumeID))
	if got := mustRun(t, "sh", "-c", `cd "$1" && sha256sum file-0 file-1 last`, "sh", moved); got != want {
		t.Errorf("the moved volume's files:\n%s\nwant:\n%s", got, want)
	}
	eventually(t, time.Minute, func() string {
		if exists(t, source) && zfsGet(t, "zfs.csi.dev:deleted", source) == "-" {
			return "the source volume is still live on node-a"
		}
		// The planted CSI snapshot stays (a CO's; it keeps the source,
		// marked deleted); no round does.
		left := strings.TrimSpace(run(t, "zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", p.parentA, p.parentB))
		// (Its component is the name cut and hashed: too long to keep.)
		if strings.Contains(left, "\n") || !strings.HasPrefix(left, source+"@zfs-csi-pull-") {
			return "snapshots left: " + left
		}
		return ""
	})
}

// A CO caller cannot move a volume: sourceMode=move-final is refused, and
// the source is left as it was, even where the operator allows moves.
func TestATenantsSourceModeMoveFinalIsRefusedAndTheSourceIntact(t *testing.T) {
	p := startPeerPair(t)
	victim := p.a.createVolume(volumeRequest("victim", 64<<20, mountCap(""), nil))
	req := volumeRequest("stolen", 64<<20, mountCap(""), map[string]string{"sourceMode": "move-final"})
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: victim.GetVolumeId()}}}
	req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{"zfs.csi.dev/node": "node-b"}}}}
	_, err := p.b.controller.CreateVolume(ctx(t), req)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a tenant's move: %v, want INVALID_ARGUMENT", err)
	}
	source := datasetOf(t, victim.GetVolumeId())
	if !exists(t, source) || zfsGet(t, "zfs.csi.dev:deleted", source) != "-" {
		t.Errorf("the victim volume %s went or was marked deleted", source)
	}
	if left := incomingLeft(t, p.parentB); left != "" {
		t.Errorf("node-b received something: %s", left)
	}
}

// A restore pulled across nodes is held to limit_bytes as a local one is:
// OUT_OF_RANGE before a byte moves, the same on a retry, nothing received.
func TestARestoreAcrossNodesBeyondItsLimitIsOutOfRangeTwice(t *testing.T) {
	p := startPeerPair(t)
	volume := p.a.createVolume(volumeRequest("big", 64<<20, mountCap(""), nil))
	snapshot := p.a.createSnapshot("big-snap", volume.GetVolumeId())
	req := fromSnapshot("node-b", "too-small", 32<<20, mountCap(""), snapshot.GetSnapshotId())
	req.CapacityRange.LimitBytes = 48 << 20
	for try := 1; try <= 2; try++ {
		if _, err := p.b.controller.CreateVolume(ctx(t), req); status.Code(err) != codes.OutOfRange {
			t.Errorf("try %d: %v, want OUT_OF_RANGE (the snapshot holds a 64 MiB volume)", try, err)
		}
	}
	if left := incomingLeft(t, p.parentB); left != "" {
		t.Errorf("node-b received something: %s", left)
	}
}
