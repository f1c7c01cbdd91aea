//go:build e2e

package tests

// The operator's tools on real ZFS: the metrics endpoint, `zfs-csi volumes`,
// `zfs-csi ctl` and `zfs-csi doctor`, each run as the binary an operator runs.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// operatorCommand runs `zfs-csi ARGS…` and returns its stdout and exit code.
func operatorCommand(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Getenv("ZFS_CSI_BINARY"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), 0
	case errors.As(err, &exitErr):
		t.Logf("zfs-csi %s: exit %d\n%s", strings.Join(args, " "), exitErr.ExitCode(), stderr.String())
		return stdout.String(), exitErr.ExitCode()
	}
	t.Fatalf("zfs-csi %s: %v", strings.Join(args, " "), err)
	return "", 0
}

// ctlJSON runs `zfs-csi ctl` against the driver and decodes its output.
func (d *driverProcess) ctlJSON(args ...string) map[string]any {
	d.t.Helper()
	out, code := operatorCommand(d.t, append([]string{"ctl", "--endpoint", "unix://" + d.socket}, args...)...)
	var decoded map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &decoded) != nil {
		d.t.Fatalf("ctl %s: exit %d, output %q", strings.Join(args, " "), code, out)
	}
	return decoded
}

func jsonField(value any, path ...string) any {
	for _, key := range path {
		object, _ := value.(map[string]any)
		value = object[key]
	}
	return value
}

// selection are the flags that point the operator commands at a test's parent.
func selection(parent string) []string {
	return []string{"--parent-dataset", parent, "--node-id", nodeID}
}

func freeAddress(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().String()
}

// scrapeSamples reads /metrics into "name{labels}" → value.
func scrapeSamples(t *testing.T, address string) map[string]string {
	t.Helper()
	response, err := http.Get("http://" + address + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		samples[line[:cut]] = line[cut+1:]
	}
	return samples
}

// loopbackUp brings lo up: the guest's init leaves it down, and the
// metrics listener binds 127.0.0.1.
func loopbackUp(t *testing.T) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	request, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, request); err != nil {
		t.Fatal(err)
	}
	request.SetUint16(request.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, request); err != nil {
		t.Fatal(err)
	}
}

func TestOperatorMetricsAfterACreateSnapshotDeleteCycle(t *testing.T) {
	loopbackUp(t)
	parent := testParent(t)
	address := freeAddress(t)
	d := startDriver(t, parent, "--metrics-address", address)
	kept := d.createVolume(volumeRequest("kept", 64<<20, mountCap(""), map[string]string{
		"csi.storage.k8s.io/pvc/namespace": "shop", "csi.storage.k8s.io/pvc/name": "kept"}))
	held := d.createVolume(volumeRequest("held", 64<<20, mountCap(""), nil))
	d.createSnapshot("snap", held.GetVolumeId())
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: held.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	// A scrape waits at most 5 s for the read of pools and volumes it starts;
	// on a loaded guest the first may come back without them.
	var samples map[string]string
	eventually(t, time.Minute, func() string {
		if samples = scrapeSamples(t, address); samples["zfs_csi_zfs_up"] == "" {
			return "no pool and volume metrics yet"
		}
		return ""
	})
	var shown []string
	for series, value := range samples {
		if strings.HasPrefix(series, "zfs_csi_") && !strings.Contains(series, "_bucket{") && !strings.Contains(series, "_sum") {
			shown = append(shown, series+" "+value)
		}
	}
	sort.Strings(shown)
	t.Logf("scrape:\n%s", strings.Join(shown, "\n"))

	p := pool()
	want := map[string]string{
		`zfs_csi_rpc_duration_seconds_count{code="OK",method="CreateVolume"}`:                                                             "2",
		`zfs_csi_rpc_duration_seconds_count{code="OK",method="CreateSnapshot"}`:                                                           "1",
		`zfs_csi_rpc_duration_seconds_count{code="OK",method="DeleteVolume"}`:                                                             "1",
		`zfs_csi_zfs_command_duration_seconds_count{result="ok",subcommand="create"}`:                                                     "2",
		`zfs_csi_reaper_backlog_volumes`:                                                                                                  "1",
		`zfs_csi_zfs_up`:                                                                                                                  "1",
		`zfs_csi_pool_health{pool="` + p + `",state="ONLINE"}`:                                                                            "1",
		`zfs_csi_volume_capacity_bytes{volume_id="` + kept.GetVolumeId() + `"}`:                                                           "6.7108864e+07",
		`zfs_csi_volume_compress_ratio{volume_id="` + kept.GetVolumeId() + `"}`:                                                           "1",
		`zfs_csi_volume_info{csi_name="kept",kind="dataset",pvc_name="kept",pvc_namespace="shop",volume_id="` + kept.GetVolumeId() + `"}`: "1",
	}
	for series, value := range want {
		if samples[series] != value {
			t.Errorf("%s = %q, want %s", series, samples[series], value)
		}
	}
	// One snapshot: a guarded one (a channel program) where programs set properties
	// once the reaper's first pass is in, a zfs snapshot otherwise.
	snapshots := 0
	for _, subcommand := range []string{"snapshot", "program snapshot"} {
		n, _ := strconv.Atoi(samples[`zfs_csi_zfs_command_duration_seconds_count{result="ok",subcommand="`+subcommand+`"}`])
		snapshots += n
	}
	if snapshots != 1 {
		t.Errorf("zfs snapshot and program snapshot ran %d times, want 1", snapshots)
	}
	for series := range samples {
		if strings.Contains(series, held.GetVolumeId()) {
			t.Errorf("the deleted volume still has a series: %s", series)
		}
	}
	for _, series := range []string{`zfs_csi_pool_size_bytes{pool="` + p + `"}`, `zfs_csi_volume_referenced_bytes{volume_id="` + kept.GetVolumeId() + `"}`,
		`zfs_csi_volume_logical_used_bytes{volume_id="` + kept.GetVolumeId() + `"}`, `zfs_csi_volume_used_by_snapshots_bytes{volume_id="` + kept.GetVolumeId() + `"}`} {
		if _, ok := samples[series]; !ok {
			t.Errorf("no %s", series)
		}
	}
}

func TestOperatorVolumesListsExactlyTheManagedVolumes(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	dataset := d.ctlJSON("create-volume", "data", "--size", "64Mi", "--param", "csi.storage.k8s.io/pvc/namespace=shop",
		"--param", "csi.storage.k8s.io/pvc/name=data")
	datasetID, _ := jsonField(dataset, "volume", "volume_id").(string)
	block := d.ctlJSON("create-volume", "raw", "--size", "32Mi", "--block")
	blockID, _ := jsonField(block, "volume", "volume_id").(string)
	held := d.createVolume(volumeRequest("held", 32<<20, mountCap(""), nil))
	d.ctlJSON("create-snapshot", "keep-me", held.GetVolumeId())
	d.ctlJSON("delete-volume", held.GetVolumeId())
	mustRun(t, "zfs", "create", parent+"/operators-own") // not the driver's: never listed

	dir := t.TempDir()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	d.ctlJSON("stage", datasetID, staging)
	d.ctlJSON("publish", datasetID, target, "--staging-path", staging, "--readonly")
	t.Cleanup(func() {
		run(t, os.Getenv("ZFS_CSI_BINARY"), "ctl", "--endpoint", "unix://"+d.socket, "unpublish", datasetID, target)
		run(t, os.Getenv("ZFS_CSI_BINARY"), "ctl", "--endpoint", "unix://"+d.socket, "unstage", datasetID, staging)
	})
	run(t, "udevadm", "settle", "--timeout=30")

	out, code := operatorCommand(t, append([]string{"volumes", "-o", "json"}, selection(parent)...)...)
	if code != 0 {
		t.Fatalf("volumes exited %d", code)
	}
	var listing struct {
		Volumes []struct {
			ID        string   `json:"volume_id"`
			CSIName   string   `json:"csi_name"`
			Kind      string   `json:"kind"`
			FSType    string   `json:"fs_type"`
			State     string   `json:"state"`
			Capacity  uint64   `json:"capacity_bytes"`
			PVC       string   `json:"pvc_name"`
			Namespace string   `json:"pvc_namespace"`
			Device    string   `json:"device"`
			Staged    []string `json:"staged"`
			Published []string `json:"published"`
		}
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]string{}
	for _, v := range listing.Volumes {
		got[v.ID] = strings.Join([]string{v.CSIName, v.Kind, v.FSType, v.State}, " ")
		switch v.ID {
		case datasetID:
			if v.Capacity != 64<<20 || v.Namespace != "shop" || v.PVC != "data" ||
				strings.Join(v.Staged, ",") != staging || strings.Join(v.Published, ",") != target {
				t.Errorf("dataset volume: %+v", v)
			}
		case blockID:
			if v.Capacity != 32<<20 || !strings.HasPrefix(v.Device, "/dev/zd") {
				t.Errorf("block volume: %+v", v)
			}
		}
	}
	want := map[string]string{
		datasetID:          "data dataset zfs ok",
		blockID:            "raw zvol  ok",
		held.GetVolumeId(): "held dataset zfs deleted-held",
	}
	if len(got) != len(want) {
		t.Errorf("volumes lists %v, want exactly %v", got, want)
	}
	for id, line := range want {
		if got[id] != line {
			t.Errorf("%s: %q, want %q", id, got[id], line)
		}
	}
}

// doctor runs `zfs-csi doctor -o json` on a parent with a CO directory of
// the test's own, and returns its findings and exit code.
func doctor(t *testing.T, parent, coDir string) ([]map[string]string, int) {
	t.Helper()
	out, code := operatorCommand(t, append([]string{"doctor", "-o", "json", "--co-dir", coDir}, selection(parent)...)...)
	var report struct{ Findings []map[string]string }
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("doctor printed no JSON: %v\n%s", err, out)
	}
	return report.Findings, code
}

// expectFinding checks that doctor found a problem of kind about subject
// and exited non-zero.
func expectFinding(t *testing.T, parent, coDir, kind, subject string) {
	t.Helper()
	findings, code := doctor(t, parent, coDir)
	if code == 0 {
		t.Errorf("doctor exited 0 with findings %v", findings)
	}
	for _, finding := range findings {
		if finding["kind"] == kind && finding["subject"] == subject && finding["fix"] != "" {
			t.Logf("doctor: %s: %s\n  problem: %s\n  fix: %s", kind, subject, finding["problem"], finding["fix"])
			return
		}
	}
	t.Errorf("no %s finding about %s; findings: %v", kind, subject, findings)
}

func TestOperatorDoctorFindsNothingWrongOnAFreshParent(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	d.createVolume(volumeRequest("fine", 32<<20, mountCap(""), nil))
	if findings, code := doctor(t, parent, t.TempDir()); code != 0 || len(findings) != 0 {
		t.Errorf("doctor exited %d with %v", code, findings)
	}
}

func TestOperatorDoctorFindsADeletedVolumeTheReaperLeft(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	volume := d.createVolume(volumeRequest("stuck", 32<<20, mountCap(""), nil))
	d.stop() // no reaper from here on
	dataset := datasetOf(t, volume.GetVolumeId())
	mustRun(t, "zfs", "set", "zfs.csi.dev:deleted=true", dataset)
	expectFinding(t, parent, t.TempDir(), "deleted-stuck", dataset)
}

func TestOperatorDoctorFindsAMountLeftAfterItsZvolWasDestroyed(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	volume := d.createVolume(volumeRequest("gone", 32<<20, blockCap(), nil))
	dataset := datasetOf(t, volume.GetVolumeId())
	run(t, "udevadm", "settle", "--timeout=30")
	device := mustRun(t, "readlink", "-f", "/dev/zvol/"+dataset)
	coDir := t.TempDir()
	target := filepath.Join(coDir, "plugins/kubernetes.io/csi/volumeDevices/publish/pv-gone/pod-1")
	mustRun(t, "mkdir", "-p", filepath.Dir(target))
	mustRun(t, "touch", target)
	mustRun(t, "mount", "--bind", device, target)
	t.Cleanup(func() { run(t, "umount", target) })
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() string {
		if exists(t, dataset) {
			return dataset + " still exists"
		}
		return ""
	})
	run(t, "udevadm", "settle", "--timeout=30")
	expectFinding(t, parent, coDir, "stale-mount", target)
}

func TestOperatorDoctorFindsDatasetsMissingTheirMarkers(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	t.Run("a dataset with a CSI name but no managed mark", func(t *testing.T) {
		mustRun(t, "zfs", "create", "-o", "zfs.csi.dev:csi-name=orphan", parent+"/orphan")
		expectFinding(t, parent, t.TempDir(), "missing-marker", parent+"/orphan")
	})
	t.Run("a zvol mounted as ext4 that lost its fstype", func(t *testing.T) {
		volume := d.ctlJSON("create-volume", "formatted", "--size", "64Mi", "--fs-type", "ext4")
		volumeID, _ := jsonField(volume, "volume", "volume_id").(string)
		staging := filepath.Join(t.TempDir(), "staging")
		d.ctlJSON("stage", volumeID, staging)
		t.Cleanup(func() {
			run(t, os.Getenv("ZFS_CSI_BINARY"), "ctl", "--endpoint", "unix://"+d.socket, "unstage", volumeID, staging)
		})
		dataset := datasetOf(t, volumeID)
		mustRun(t, "zfs", "inherit", "zfs.csi.dev:fstype", dataset)
		expectFinding(t, parent, t.TempDir(), "missing-marker", dataset)
	})
}

func TestOperatorDoctorFindsAZvolWithoutItsDeviceLink(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	volume := d.createVolume(volumeRequest("linkless", 32<<20, blockCap(), nil))
	dataset := datasetOf(t, volume.GetVolumeId())
	run(t, "udevadm", "settle", "--timeout=30")
	mustRun(t, "rm", "/dev/zvol/"+dataset)
	expectFinding(t, parent, t.TempDir(), "missing-device-link", dataset)
}
