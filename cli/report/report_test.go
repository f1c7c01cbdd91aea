package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zfs-csi/zfs-csi/inventory"
	"github.com/zfs-csi/zfs-csi/node/nodetest"
	"github.com/zfs-csi/zfs-csi/wiring/wiringtest"
)

const (
	stagingPath = "/var/lib/kubelet/plugins/kubernetes.io/csi/zfs.csi.dev/0123/globalmount"
	publishPath = "/var/lib/kubelet/pods/pod-1/volumes/kubernetes.io~csi/pv-a/mount"
)

// operatorOn builds an operator command's run on the fixture's fake pool,
// mount table and /dev, parsing args as the command line would.
func operatorOn(t *testing.T, f *wiringtest.Fixture, args ...string) (*operator, *bytes.Buffer) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"--node-id", wiringtest.NodeID, "--parent-dataset", "tank/csi",
		"--mountinfo", f.Host.MountInfo, "--dev-dir", f.Host.DevDir}, args...)
	op, err := parseOperator("test", args, &stdout, &stderr, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	op.zfs = f.Fake
	op.host.CODirs = inventory.DefaultCODirs()
	return op, &stdout
}

// sampleHost has a dataset volume staged and published for a PVC, a raw
// block zvol, and a volume deleted while a snapshot holds it.
func sampleHost(t *testing.T) (*wiringtest.Fixture, map[string]string) {
	f := wiringtest.New(t)
	ids := map[string]string{
		"data": f.CreateVolume("pvc-data", 1<<30, wiringtest.Mount(""), map[string]string{
			"csi.storage.k8s.io/pvc/namespace": "shop", "csi.storage.k8s.io/pvc/name": "data"}),
		"block": f.CreateVolume("pvc-block", 2<<30, wiringtest.Block(), nil),
		"held":  f.CreateVolume("pvc-held", 1<<30, wiringtest.Mount(""), nil),
	}
	ids["snap"] = f.Snapshot("snap-1", ids["held"])
	f.DeleteVolume(ids["held"])
	f.ZvolDevice("tank/csi/pvc-block", "zd0")
	f.MountDataset("tank/csi/pvc-data", stagingPath)
	f.MountDataset("tank/csi/pvc-data", publishPath)
	return f, ids
}

func TestVolumesListsEveryManagedVolumeAsATable(t *testing.T) {
	f, ids := sampleHost(t)
	op, stdout := operatorOn(t, f)
	if err := op.volumes(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	want := [][]string{
		{"VOLUME", "ID", "NAME", "KIND", "SIZE", "USED", "PVC", "STAGED", "PUBLISHED", "STATE"},
		{ids["block"], "pvc-block", "zvol/block", "2.0G", "0", "-", "-", "-", "ok"},
		{ids["data"], "pvc-data", "dataset", "1.0G", "0", "shop/data", stagingPath, publishPath, "ok"},
		{ids["held"], "pvc-held", "dataset", "1.0G", "0", "-", "-", "-", "deleted-held"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stdout.String())
	}
	for i, fields := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(fields, " ") {
			t.Errorf("line %d:\n got %q\nwant %q", i, got, fields)
		}
	}
}

func TestVolumesAsJSONCarriesTheFieldsScriptsNeed(t *testing.T) {
	f, ids := sampleHost(t)
	op, stdout := operatorOn(t, f, "-o", "json")
	if err := op.volumes(); err != nil {
		t.Fatal(err)
	}
	var out struct{ Volumes []inventory.Volume }
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	byID := map[string]inventory.Volume{}
	for _, volume := range out.Volumes {
		byID[volume.ID] = volume
	}
	data := byID[ids["data"]]
	if len(out.Volumes) != 3 || data.CSIName != "pvc-data" || data.PVCNamespace != "shop" || data.Capacity != 1<<30 ||
		len(data.Staged) != 1 || data.Staged[0] != stagingPath || len(data.Published) != 1 || data.Published[0] != publishPath {
		t.Errorf("volumes: %+v", out.Volumes)
	}
	if block := byID[ids["block"]]; block.Kind != "zvol" || block.FSType != "" || filepath.Base(block.Device) != "zd0" {
		t.Errorf("block volume: %+v", block)
	}
	if !strings.Contains(stdout.String(), `"volume_id": "`+ids["data"]+`"`) {
		t.Errorf("the JSON does not use snake_case keys:\n%s", stdout.String())
	}
}

func TestSnapshotsListsTheDriversSnapshots(t *testing.T) {
	f, ids := sampleHost(t)
	op, stdout := operatorOn(t, f)
	if err := op.snapshots(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(lines) != 2 || len(fields) != 9 || fields[0] != ids["snap"] || fields[1] != "snap-1" || fields[2] != ids["held"] ||
		fields[6] != "0" || fields[7] != "ok" || fields[8] != "-" {
		t.Errorf("snapshots:\n%s", stdout.String())
	}
}

func TestStatusSummarisesPoolsParentsAndTheDaemon(t *testing.T) {
	f, _ := sampleHost(t)
	op, stdout := operatorOn(t, f, "-o", "json")
	if err := op.status("unix://"+filepath.Join(t.TempDir(), "absent.sock"), filepath.Join(t.TempDir(), "reg.sock")); err != nil {
		t.Fatal(err)
	}
	var report statusReport
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatal(err)
	}
	if report.Daemon.Answering || report.Daemon.Error == "" || report.Registration.Present {
		t.Errorf("daemon %+v, registration %+v: want neither there", report.Daemon, report.Registration)
	}
	if report.Volumes[inventory.StateOK] != 2 || report.ReaperBacklog != 1 || report.Snapshots != 1 ||
		len(report.Pools) != 1 || report.Pools[0].Health != "ONLINE" || len(report.Parents) != 1 || report.Parents[0].Volumes != 3 {
		t.Errorf("report: %+v", report)
	}

	running := wiringtest.New(t)
	endpoint := running.Serve(nodetest.NewFakeMounter())
	op, stdout = operatorOn(t, running)
	if err := op.status(endpoint, filepath.Join(t.TempDir(), "reg.sock")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "daemon: ready at "+endpoint+" (zfs.csi.dev test)") {
		t.Errorf("status of a running daemon:\n%s", stdout.String())
	}
}

func TestDoctorExitsNonZeroAndSaysWhatToDo(t *testing.T) {
	f, _ := sampleHost(t)
	op, stdout := operatorOn(t, f)
	if err := op.doctor(); err != nil {
		t.Fatalf("doctor on a healthy host: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(stdout.String(), "no problems found") {
		t.Errorf("doctor on a healthy host said:\n%s", stdout.String())
	}

	f.MountDataset("tank/csi/pvc-gone", "/var/lib/kubelet/pods/pod-2/volumes/kubernetes.io~csi/pv-gone/mount")
	op, stdout = operatorOn(t, f)
	err := op.doctor()
	if !errors.Is(err, errProblemsFound) {
		t.Fatalf("err = %v, want errProblemsFound", err)
	}
	for _, want := range []string{"stale-mount: /var/lib/kubelet/pods/pod-2/", "fix:     make sure no workload uses it, then: umount"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("doctor's report lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestANameWithALineBreakStaysInItsRow(t *testing.T) {
	f := wiringtest.New(t)
	f.CreateVolume("a\nb\tc", 1<<30, wiringtest.Mount(""), nil)
	op, stdout := operatorOn(t, f)
	if err := op.volumes(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"a\nb\tc"`) {
		t.Errorf("the table:\n%s\nwant a header and one row naming the volume \"a\\nb\\tc\"", stdout.String())
	}
}
