//go:build e2e

// Package tests holds the end-to-end tests that run inside the ZFS guest
// (make e2e): each test starts the real zfs-csi binary on its own socket and
// parent dataset and checks the effects on ZFS itself.
//
// What the driver did is read back with a parser that is not the driver's:
// which datasets exist and the columns go-zfs (github.com/mistifyio/go-zfs/v3)
// reads (origin, volsize, usedbydataset, …) come through go-zfs, so that a
// bug in package zfs's parsing cannot vouch for itself; the properties go-zfs
// does not read (user properties, refquota, refreservation, volblocksize,
// defer_destroy, …) come from `zfs get -H -p` (zfsGet). State the tests set
// up or change themselves stays a zfs command line, as an operator types it.
package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	gozfs "github.com/mistifyio/go-zfs/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const nodeID = "e2e-node"

// TestMain bounds every go-zfs command: its runner is package-level and
// waits forever unless given a timeout.
func TestMain(m *testing.M) {
	gozfs.SetRunner(&gozfs.Runner{Timeout: 2 * time.Minute, Grace: 5 * time.Second})
	os.Exit(m.Run())
}

// driverProcess is one zfs-csi daemon under test.
type driverProcess struct {
	t          *testing.T
	cmd        *exec.Cmd
	binary     string
	args       []string
	socket     string
	parent     string
	logPath    string
	conn       *grpc.ClientConn
	identity   csi.IdentityClient
	controller csi.ControllerClient
	node       csi.NodeClient
	// killsInZFS counts the hard kills (killHard) that found a zfs command
	// of the daemon running: the kills a crash test is about.
	killsInZFS int
}

// pool is the guest's test pool.
func pool() string {
	if p := os.Getenv("ZFS_CSI_E2E_POOL"); p != "" {
		return p
	}
	return "tank"
}

// testParent makes a fresh parent dataset named after the test; it is
// destroyed with everything under it when the test ends.
func testParent(t *testing.T) string {
	t.Helper()
	name := pool() + "/e2e-" + strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	name = name[:min(len(name), 60)]
	run(t, "zfs", "destroy", "-r", name) // a leftover of an earlier run, if any
	mustRun(t, "zfs", "create", name)
	t.Cleanup(func() {
		for _, line := range strings.Split(run(t, "grep", " "+name, "/proc/mounts"), "\n") {
			if fields := strings.Fields(line); len(fields) > 1 {
				run(t, "umount", "-l", fields[1])
			}
		}
		run(t, "zfs", "destroy", "-r", name)
	})
	return name
}

// startDriver runs the daemon on a fresh socket and parent dataset.
func startDriver(t *testing.T, parent string, args ...string) *driverProcess {
	t.Helper()
	binary := os.Getenv("ZFS_CSI_BINARY")
	if binary == "" {
		t.Fatal("ZFS_CSI_BINARY is not set")
	}
	dir := t.TempDir()
	d := &driverProcess{t: t, socket: filepath.Join(dir, "csi.sock"), parent: parent, logPath: filepath.Join(dir, "driver.log")}
	d.start(binary, args)
	return d
}

func (d *driverProcess) start(binary string, args []string) {
	t := d.t
	t.Helper()
	logFile, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"--endpoint", "unix://" + d.socket, "--node-id", nodeID, "--parent-dataset", d.parent,
		"--log-level", "debug", "--reap-interval", "2s", "--allow-paths", os.TempDir()}, args...)
	d.binary, d.args = binary, args
	d.cmd = exec.Command(binary, argv...)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	// Its own process group: killHard ends it with every zfs it started.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.stop()
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(d.logPath)
			t.Logf("driver log:\n%s", lastLines(string(log), 60))
		}
	})
	// Generous: under TCG with other guests beside it, start-up took over 30 s.
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := os.Stat(d.socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(d.logPath)
			t.Fatalf("driver did not open %s within 90s:\n%s", d.socket, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.conn, err = grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	d.identity, d.controller, d.node = csi.NewIdentityClient(d.conn), csi.NewControllerClient(d.conn), csi.NewNodeClient(d.conn)
}

// stop sends SIGTERM and waits; the daemon must exit cleanly.
func (d *driverProcess) stop() {
	if d.cmd == nil || d.cmd.ProcessState != nil {
		return
	}
	if d.conn != nil { // nil when the daemon never opened its socket
		d.conn.Close()
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			d.t.Errorf("driver exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		d.t.Error("driver did not stop within 30s of SIGTERM")
	}
}

// restart stops the daemon and starts it again on the same socket.
func (d *driverProcess) restart(args ...string) {
	d.t.Helper()
	d.stop()
	d.start(os.Getenv("ZFS_CSI_BINARY"), args)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// run runs a command and returns its combined output, whatever its exit.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, _ := exec.Command(name, args...).CombinedOutput()
	return string(out)
}

// mustRun runs a command and fails the test if it fails.
func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// destroyZvol destroys a zvol the test just made. udev probes a new zvol's
// device (blkid) and holds it open meanwhile: a destroy then fails with
// "dataset is busy" (seen in the guest), which the driver's DeleteVolume
// retries for the same reason. Here: udevadm settle, and a few tries.
func destroyZvol(t *testing.T, name string) {
	t.Helper()
	var out []byte
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		_ = exec.Command("udevadm", "settle", "--timeout=10").Run()
		if out, err = exec.Command("zfs", "destroy", name).CombinedOutput(); err == nil || !bytes.Contains(out, []byte("dataset is busy")) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("zfs destroy %s: %v\n%s", name, err, out)
	}
}

// zfsGet reads one property as exact bytes/plain text.
func zfsGet(t *testing.T, property, dataset string) string {
	t.Helper()
	return mustRun(t, "zfs", "get", "-H", "-p", "-o", "value", property, dataset)
}

// zfsDataset is a dataset's (or a zvol's or snapshot's) row as go-zfs reads it.
func zfsDataset(t *testing.T, name string) *gozfs.Dataset {
	t.Helper()
	dataset, err := gozfs.GetDataset(name)
	if err != nil {
		t.Fatalf("go-zfs reading %s: %v", name, err)
	}
	return dataset
}

// exists says whether zfs lists the dataset, zvol or snapshot.
func exists(t *testing.T, dataset string) bool {
	t.Helper()
	_, err := gozfs.GetDataset(dataset)
	return err == nil
}

// zfsNames lists the names under root (root included, in zfs list -r's
// order) with a go-zfs lister: gozfs.Datasets for every type, gozfs.Snapshots
// for snapshots only.
func zfsNames(t *testing.T, list func(filter string) ([]*gozfs.Dataset, error), root string) []string {
	t.Helper()
	datasets, err := list(root)
	if err != nil {
		t.Fatalf("go-zfs listing %s: %v", root, err)
	}
	names := make([]string, len(datasets))
	for i, dataset := range datasets {
		names[i] = dataset.Name
	}
	return names
}

func datasetOf(t *testing.T, volumeID string) string {
	t.Helper()
	node, dataset, found := strings.Cut(volumeID, ":")
	if !found || (node != nodeID && !peerNodes[node]) {
		t.Fatalf("volume ID %q is not %s:<dataset>", volumeID, nodeID)
	}
	return dataset
}

func mountCap(fsType string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func (d *driverProcess) createVolume(req *csi.CreateVolumeRequest) *csi.Volume {
	d.t.Helper()
	response, err := d.controller.CreateVolume(ctx(d.t), req)
	if err != nil {
		d.t.Fatalf("CreateVolume(%q): %v", req.GetName(), err)
	}
	return response.GetVolume()
}

func (d *driverProcess) createSnapshot(name, volumeID string) *csi.Snapshot {
	d.t.Helper()
	response, err := d.controller.CreateSnapshot(ctx(d.t), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volumeID})
	if err != nil {
		d.t.Fatalf("CreateSnapshot(%q): %v", name, err)
	}
	return response.GetSnapshot()
}

func volumeRequest(name string, size int64, capability *csi.VolumeCapability, parameters map[string]string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{capability}, Parameters: parameters}
}

// mountDataset mounts a legacy-mountpoint dataset on a fresh directory, as
// the node service would, and unmounts it when the test ends.
func mountDataset(t *testing.T, dataset string) string {
	t.Helper()
	dir := t.TempDir()
	mustRun(t, "mount", "-t", "zfs", dataset, dir)
	t.Cleanup(func() { run(t, "umount", dir) })
	return dir
}

func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// eventually polls check until it returns "" or the deadline passes.
func eventually(t *testing.T, within time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		problem := check()
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, problem)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
