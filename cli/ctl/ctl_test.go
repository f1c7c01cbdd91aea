package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/node/nodetest"
	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// ctlHarness is a daemon on a fake pool and a fake host, served on a real
// socket, for ctl to call.
type ctlHarness struct {
	t        *testing.T
	fixture  *wiringtest.Fixture
	mounter  *nodetest.FakeMounter
	endpoint string
}

func newCtlHarness(t *testing.T) *ctlHarness {
	t.Helper()
	f := wiringtest.New(t)
	mounter := nodetest.NewFakeMounter()
	return &ctlHarness{t: t, fixture: f, mounter: mounter, endpoint: f.Serve(mounter)}
}

// ctl runs `zfs-csi ctl` and decodes its JSON output.
func (h *ctlHarness) ctl(args ...string) map[string]any {
	h.t.Helper()
	var stdout, stderr bytes.Buffer
	if err := Run(append([]string{"--endpoint", h.endpoint}, args...), &stdout, &stderr); err != nil {
		h.t.Fatalf("ctl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var out map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		h.t.Fatalf("ctl %s printed no JSON object: %v\n%s", strings.Join(args, " "), err, stdout.String())
	}
	return out
}

// field walks a decoded JSON object: field(out, "volume", "volume_id").
func field(value any, path ...string) any {
	for _, key := range path {
		object, _ := value.(map[string]any)
		value = object[key]
	}
	return value
}

func TestCtlDrivesAVolumeThroughItsLife(t *testing.T) {
	h := newCtlHarness(t)
	created := h.ctl("create-volume", "pvc-1", "--size", "2Gi", "--param", "zfs.compression=zstd")
	volumeID, _ := field(created, "volume", "volume_id").(string)
	if volumeID != wiringtest.NodeID+":tank/csi/pvc-1" || field(created, "volume", "capacity_bytes") != "2147483648" ||
		field(created, "volume", "volume_context", "kind") != "dataset" {
		t.Fatalf("create-volume printed %v", created)
	}
	snapshot := h.ctl("create-snapshot", "snap-1", volumeID)
	snapshotID, _ := field(snapshot, "snapshot", "snapshot_id").(string)
	if snapshotID == "" || field(snapshot, "snapshot", "ready_to_use") != true {
		t.Fatalf("create-snapshot printed %v", snapshot)
	}
	clone := h.ctl("create-volume", "pvc-2", "--from-snapshot", snapshotID)
	if field(clone, "volume", "content_source", "snapshot", "snapshot_id") != snapshotID {
		t.Errorf("the clone does not name its source: %v", clone)
	}
	if entries, _ := field(h.ctl("list-volumes"), "entries").([]any); len(entries) != 2 {
		t.Errorf("list-volumes lists %d volumes, want 2", len(entries))
	}
	if entries, _ := field(h.ctl("list-snapshots", "--volume", volumeID), "entries").([]any); len(entries) != 1 {
		t.Errorf("list-snapshots --volume lists %d snapshots, want 1", len(entries))
	}
	if expanded := h.ctl("expand-volume", volumeID, "--size", "3G"); field(expanded, "capacity_bytes") != "3000000000" {
		t.Errorf("expand-volume printed %v", expanded)
	}

	staging, target := filepath.Join(t.TempDir(), "staging"), filepath.Join(t.TempDir(), "target")
	h.ctl("stage", volumeID, staging)
	h.ctl("publish", volumeID, target, "--staging-path", staging, "--readonly")
	mounts := map[string]node.MountInfo{}
	for _, mount := range h.mounter.MountTable() {
		mounts[mount.MountPoint] = mount
	}
	if mounts[staging].Source != "tank/csi/pvc-1" || mounts[target].Source != "tank/csi/pvc-1" || !mounts[target].ReadOnly() {
		t.Errorf("after stage and publish --readonly the mounts are %+v", h.mounter.MountTable())
	}
	h.ctl("unpublish", volumeID, target)
	h.ctl("unstage", volumeID, staging)
	if table := h.mounter.MountTable(); len(table) != 0 {
		t.Errorf("mounts left after unpublish and unstage: %+v", table)
	}

	h.ctl("delete-snapshot", snapshotID)
	h.ctl("delete-volume", volumeID)
	if entries, _ := field(h.ctl("list-volumes"), "entries").([]any); len(entries) != 1 {
		t.Errorf("after delete-volume list-volumes lists %d volumes, want the clone alone", len(entries))
	}
}

func TestCtlStagesARawBlockVolumeFromTheKindTheControllerGives(t *testing.T) {
	h := newCtlHarness(t)
	volumeID, _ := field(h.ctl("create-volume", "blk", "--size", "64M", "--block"), "volume", "volume_id").(string)
	h.mounter.AddDevice("/dev/zvol/tank/csi/blk", 64<<20)
	staging := filepath.Join(t.TempDir(), "staging")
	h.ctl("stage", volumeID, staging)
	for _, mount := range h.mounter.MountTable() {
		if strings.HasPrefix(mount.MountPoint, staging) && mount.FSType == "devtmpfs" {
			return
		}
	}
	t.Errorf("no device node bound under %s: %+v", staging, h.mounter.MountTable())
}

func TestCtlInfoAndProbeDescribeThePlugin(t *testing.T) {
	h := newCtlHarness(t)
	info := h.ctl("info")
	if field(info, "plugin_info", "name") != "zfs.csi.dev" || field(info, "node_info", "node_id") != wiringtest.NodeID {
		t.Errorf("info printed %v", info)
	}
	if capabilities, _ := field(info, "controller_capabilities", "capabilities").([]any); len(capabilities) == 0 {
		t.Errorf("info shows no controller capabilities: %v", info)
	}
	if probe := h.ctl("probe"); field(probe, "ready") != true {
		t.Errorf("probe printed %v", probe)
	}
}

func TestCtlWithOutputIDPrintsBareIDsForShellScripts(t *testing.T) {
	h := newCtlHarness(t)
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := Run(append([]string{"--endpoint", h.endpoint, "-o", "id"}, args...), &stdout, &stderr); err != nil {
			t.Fatalf("ctl -o id %s: %v", strings.Join(args, " "), err)
		}
		return stdout.String()
	}
	volumeID := strings.TrimSpace(run("create-volume", "v1", "--size", "1G"))
	snapshotID := strings.TrimSpace(run("create-snapshot", "s1", volumeID))
	cloneID := strings.TrimSpace(run("create-volume", "v2", "--from-snapshot", snapshotID))
	tests := []struct {
		name, got, want string
	}{
		{"create-volume prints the volume ID", volumeID, wiringtest.NodeID + ":tank/csi/v1"},
		{"create-snapshot prints the snapshot ID", snapshotID, wiringtest.NodeID + ":tank/csi/v1@s1"},
		{"list-volumes prints one ID a line", run("list-volumes"), volumeID + "\n" + cloneID + "\n"},
		{"list-snapshots prints one ID a line", run("list-snapshots"), snapshotID + "\n"},
		{"an empty response prints nothing", run("delete-volume", cloneID), ""},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if test.got != test.want {
				t.Errorf("printed %q, want %q", test.got, test.want)
			}
		})
	}
}

func TestCtlRefusesWhatItCannotSend(t *testing.T) {
	h := newCtlHarness(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"an unknown command", []string{"explode"}, "unknown command"},
		{"too few arguments", []string{"create-snapshot", "snap"}, "takes 2 arguments"},
		{"a size that is no size", []string{"create-volume", "v", "--size", "big"}, "size \"big\""},
		{"block and a filesystem at once", []string{"create-volume", "v", "--block", "--fs-type", "ext4"}, "exclude each other"},
		{"an unknown access mode", []string{"create-volume", "v", "--access-mode", "everyone"}, "single-node-writer"},
		{"publish without the staging path", []string{"publish", "n:tank/csi/v", "/mnt"}, "--staging-path is required"},
		{"a call the driver refuses, with its code", []string{"delete-volume", ""}, "InvalidArgument"},
		{"IDs of a response that has none", []string{"-o", "id", "info"}, "carries no volume or snapshot ID"},
		{"a move where the operator has not allowed moves", []string{"move-volume", "m", "node-z:tank/csi/v"}, "FailedPrecondition"},
		{"a move through the CSI socket's parameters", []string{"create-volume", "m", "--from-volume", "node-z:tank/csi/v", "--param", "sourceMode=move-final"}, "moves are not a CSI parameter"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := Run(append([]string{"--endpoint", h.endpoint}, test.args...), &stdout, &stderr) // the operator's socket beside it
			if err == nil || !strings.Contains(err.Error(), test.want) {
				t.Errorf("err = %v, want one containing %q", err, test.want)
			}
		})
	}
}

func TestNoCSISocketServesTheOperatorsMoves(t *testing.T) {
	h := newCtlHarness(t)
	var stdout, stderr bytes.Buffer
	err := Run([]string{"--endpoint", h.endpoint, "--operator-socket", h.endpoint, "move-volume", "m", "node-z:tank/csi/v", "--final"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "Unimplemented") {
		t.Errorf("a move asked on the CSI socket: %v, want Unimplemented (the CSI socket serves no move)", err)
	}
}

// A size means in ctl what it means in a PVC's storage request: the
// quantities of k8s.io/apimachinery, whose G is 10^9 and Gi 2^30. The
// values are ParseQuantity's and Quantity.Value's (apimachinery v0.37.2).
func TestParseSizeReadsSizesAsKubernetesDoes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"", 0}, {"0", 0}, {"1073741824", 1 << 30}, {"007", 7}, {"+1G", 1e9},
		{"1k", 1e3}, {"64M", 64e6}, {"1G", 1e9}, {"2T", 2e12}, {"1P", 1e15}, {"1E", 1e18}, {"9E", 9e18},
		{"1Ki", 1 << 10}, {"512Mi", 512 << 20}, {"1Gi", 1 << 30}, {"2Ti", 2 << 40}, {"1Pi", 1 << 50}, {"7Ei", 7 << 60},
		{"1.5Gi", 1536 << 20}, {".5Gi", 512 << 20}, {"1.5G", 15e8}, {"1.G", 1e9},
		{"1e3", 1e3}, {"1E3", 1e3}, {"1e+3", 1e3}, {"1e18", 1e18},
		// A fraction of a byte is rounded up, as Quantity.Value rounds it.
		{"0.5", 1}, {"1.5", 2}, {"100m", 1}, {"1500m", 2}, {"1u", 1}, {"1n", 1}, {"1e-3", 1},
		{"9223372036854775807", 1<<63 - 1},
	}
	for _, test := range tests {
		if got, err := parseSize(test.in); err != nil || got != test.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", test.in, got, err, test.want)
		}
	}
}

func TestParseSizeRefusesWhatKubernetesRefuses(t *testing.T) {
	for _, in := range []string{
		"1K", "1KB", "16KiB", "1GB", "1g", "1gi", "1Gii", "1e", "1ee", "12e2k", "1_000", " 1G", "1G ", "big", "G", ".", "1..5",
		// Kubernetes takes these but a PVC refuses a negative size, and it
		// caps what int64 cannot hold where CSI cannot carry it at all.
		"-1G", "8Ei", "9223372036854775808", "1e19",
	} {
		if got, err := parseSize(in); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("size %q", in)) {
			t.Errorf("parseSize(%q) = %d, %v; want an error naming the size", in, got, err)
		}
	}
}

// A mistyped flag is told in one line, with one more that says where the
// flags are listed: not every command and flag ctl has.
func TestABadFlagPointsToHelpInsteadOfPrintingTheUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--bogus", "info"},
		{"--timeout", "soon", "info"},
		{"create-volume", "v", "--bogus"},
		{"explode"},
		{"create-snapshot", "snap"},
	} {
		var stdout, stderr bytes.Buffer
		err := Run(append([]string{"--endpoint", "unix:///nonexistent.sock"}, args...), &stdout, &stderr)
		var usage UsageError
		if !errors.As(err, &usage) || usage.ExitStatus() != ExitUsage {
			t.Errorf("ctl %q: %v, want a UsageError", args, err)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != 2 || !strings.Contains(lines[1], " -h lists ") {
			t.Errorf("ctl %q says %q, want the problem and one line pointing to -h", args, err.Error())
		}
		if stderr.Len() > 0 || stdout.Len() > 0 {
			t.Errorf("ctl %q printed the usage besides its error:\n%s%s", args, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if err := Run([]string{"create-volume", "-h"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-size") {
		t.Errorf("ctl create-volume -h: %v, printed:\n%s\nwant the command's flags", err, stderr.String())
	}
	stderr.Reset()
	if err := Run([]string{"-h"}, &stdout, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "1G is 10^9 bytes, 1Gi 2^30") {
		t.Errorf("ctl -h: %v, printed:\n%s\nwant the usage with what sizes are", err, stderr.String())
	}
}

func TestCtlTakesGetsAndDeletesAGroupSnapshot(t *testing.T) {
	h := newCtlHarness(t)
	var volumes []string
	for _, name := range []string{"db", "wal"} {
		id, _ := field(h.ctl("create-volume", name, "--size", "1G"), "volume", "volume_id").(string)
		volumes = append(volumes, id)
	}
	created := h.ctl(append([]string{"create-group-snapshot", "nightly"}, volumes...)...)
	groupID, _ := field(created, "group_snapshot", "group_snapshot_id").(string)
	members, _ := field(created, "group_snapshot", "snapshots").([]any)
	// Group members have a ZFS name space of their own (not the name itself).
	if !strings.HasPrefix(groupID, wiringtest.NodeID+":tank#") || !strings.Contains(groupID, "nightly") || len(members) != 2 ||
		field(created, "group_snapshot", "ready_to_use") != true {
		t.Fatalf("create-group-snapshot printed %v", created)
	}
	if got, _ := field(h.ctl("get-group-snapshot", groupID), "group_snapshot", "snapshots").([]any); len(got) != 2 {
		t.Errorf("get-group-snapshot found %d members, want 2", len(got))
	}
	h.ctl("delete-group-snapshot", groupID)
	if entries, _ := field(h.ctl("list-snapshots"), "entries").([]any); len(entries) != 0 {
		t.Errorf("after delete-group-snapshot list-snapshots lists %d snapshots", len(entries))
	}
	var stdout, stderr bytes.Buffer
	if err := Run([]string{"--endpoint", h.endpoint, "create-group-snapshot", "alone"}, &stdout, &stderr); err == nil {
		t.Error("create-group-snapshot without a volume ran")
	}
}

func TestCtlReadsSnapshotMetadataStreamsWhole(t *testing.T) {
	h := newCtlHarness(t)
	volumeID, _ := field(h.ctl("create-volume", "blk", "--size", "1M", "--block"), "volume", "volume_id").(string)
	base, _ := field(h.ctl("create-snapshot", "base", volumeID), "snapshot", "snapshot_id").(string)
	if err := h.fixture.Fake.WriteBlocks("tank/csi/blk", 0, 48<<10); err != nil {
		t.Fatal(err)
	}
	target, _ := field(h.ctl("create-snapshot", "target", volumeID), "snapshot", "snapshot_id").(string)
	allocated := h.ctl("metadata-allocated", target, "--max-results", "1")
	blocks, _ := field(allocated, "block_metadata").([]any)
	if len(blocks) != 1 || field(blocks[0], "size_bytes") != "49152" || field(allocated, "volume_capacity_bytes") != "1048576" {
		t.Errorf("metadata-allocated printed %v", allocated)
	}
	delta := h.ctl("metadata-delta", base, target, "--starting-offset", "16384")
	if blocks, _ := field(delta, "block_metadata").([]any); len(blocks) != 1 || field(blocks[0], "byte_offset") != "16384" {
		t.Errorf("metadata-delta printed %v", delta)
	}
}

// The health commands reach the four health RPCs: healthy volumes carry no
// entry, and a dataset destroyed behind the driver is reported by both the
// controller and the node.
func TestCtlReportsHealth(t *testing.T) {
	h := newCtlHarness(t)
	volumeID, _ := field(h.ctl("create-volume", "pvc-h", "--size", "1G"), "volume", "volume_id").(string)
	if statuses := field(h.ctl("volume-health", volumeID), "volume_health", "health_statuses"); statuses != nil {
		t.Errorf("volume-health of a healthy volume printed %v", statuses)
	}
	if entries := field(h.ctl("list-volume-health"), "entries"); entries != nil {
		t.Errorf("list-volume-health of healthy volumes printed %v", entries)
	}
	if _, ok := h.ctl("storage-health")["backend_health"]; ok {
		t.Errorf("storage-health of a healthy pool printed entries")
	}
	h.fixture.Fake.SetPoolHealth("tank", "DEGRADED")
	if entries, _ := field(h.ctl("list-volume-health"), "entries").([]any); len(entries) != 1 || field(entries[0], "volume_id") != volumeID {
		t.Errorf("list-volume-health on a degraded pool printed %v", entries)
	}
	if backends, _ := h.ctl("storage-health")["backend_health"].([]any); len(backends) == 0 {
		t.Errorf("storage-health of a degraded pool printed no entry")
	}
	h.fixture.Fake.SetPoolHealth("tank", "ONLINE")
	if err := h.fixture.Fake.Destroy(context.Background(), "tank/csi/pvc-h", zfs.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"volume-health", volumeID}, {"node-volume-health", volumeID, "--staging-path", t.TempDir()}} {
		var stdout, stderr bytes.Buffer
		err := Run(append([]string{"--endpoint", h.endpoint}, args...), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "NotFound") {
			t.Errorf("%s after the dataset was destroyed: %v (printed %s), want NotFound", args[0], err, stdout.String())
		}
	}
}

func TestCtlAdoptsAndReleasesExistingDataOnTheOperatorsSocket(t *testing.T) {
	h := newCtlHarness(t)
	if err := h.fixture.Fake.Create(context.Background(), "tank/db", zfs.CreateOptions{Properties: map[string]string{"refquota": "1073741824"}}); err != nil {
		t.Fatal(err)
	}
	adopted := h.ctl("adopt", "tank/db", "db", "--mode", "retain", "--rename")
	volume, _ := adopted["volume_id"].(string)
	if volume != wiringtest.NodeID+":tank/csi/db" || adopted["volume_context"].(map[string]any)["kind"] != "dataset" {
		t.Errorf("adopt printed %v", adopted)
	}
	released := h.ctl("release", volume)
	if released["volume_id"] != volume || h.fixture.Fake.Property("tank/csi/db", h.fixture.Props.Managed) != "" {
		t.Errorf("release printed %v; the managed mark is %q", released, h.fixture.Fake.Property("tank/csi/db", h.fixture.Props.Managed))
	}
}
