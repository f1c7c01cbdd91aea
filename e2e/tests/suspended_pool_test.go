//go:build e2e

package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// suspendedPool is a pool on a device-mapper device that can be switched to
// the error target: with failmode=wait its I/O then suspends, and every zfs
// command that waits for a transaction group blocks in the kernel, where
// SIGKILL does not reach it until the pool comes back.
type suspendedPool struct {
	t       *testing.T
	name    string
	loop    string
	sectors string
}

const stuckPool = "e2estuck"

func newSuspendablePool(t *testing.T) *suspendedPool {
	t.Helper()
	if _, err := exec.LookPath("dmsetup"); err != nil {
		t.Skip("dmsetup is not installed in this guest")
	}
	run(t, "modprobe", "loop")
	run(t, "modprobe", "dm-mod")
	file := filepath.Join(t.TempDir(), "stuck.img")
	mustRun(t, "truncate", "-s", "256M", file)
	p := &suspendedPool{t: t, name: stuckPool}
	p.loop = mustRun(t, "losetup", "--find", "--show", file)
	p.sectors = mustRun(t, "blockdev", "--getsz", p.loop)
	mustRun(t, "dmsetup", "create", stuckPool, "--table", p.table("linear"))
	t.Cleanup(p.remove)
	mustRun(t, "zpool", "create", "-f", "-o", "failmode=wait", "-O", "mountpoint=none", stuckPool, "/dev/mapper/"+stuckPool)
	mustRun(t, "zfs", "create", stuckPool+"/csi")
	return p
}

func (p *suspendedPool) table(target string) string {
	if target == "linear" {
		return fmt.Sprintf("0 %s linear %s 0", p.sectors, p.loop)
	}
	return fmt.Sprintf("0 %s error", p.sectors)
}

// swap loads a new table into the device (suspend, reload, resume).
func (p *suspendedPool) swap(target string) {
	p.t.Helper()
	mustRun(p.t, "dmsetup", "reload", stuckPool, "--table", p.table(target))
	mustRun(p.t, "dmsetup", "resume", stuckPool)
}

// remove brings the device back, resumes the pool's I/O and destroys the
// pool, so that nothing after this test meets a suspended pool.
func (p *suspendedPool) remove() {
	t := p.t
	run(t, "dmsetup", "reload", stuckPool, "--table", p.table("linear"))
	run(t, "dmsetup", "resume", stuckPool)
	for attempt := 0; attempt < 5; attempt++ {
		out, err := exec.Command("timeout", "60", "zpool", "clear", stuckPool).CombinedOutput()
		if err == nil {
			break
		}
		t.Logf("zpool clear %s: %v %s", stuckPool, err, out)
		time.Sleep(2 * time.Second)
	}
	// The commands that were stuck finish once I/O resumes; until then the
	// pool is busy.
	var out []byte
	var err error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if out, err = exec.Command("timeout", "60", "zpool", "destroy", "-f", stuckPool).CombinedOutput(); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("zpool destroy %s after the test: %v %s (later tests may meet a stuck pool)", stuckPool, err, out)
	}
	run(t, "dmsetup", "remove", "--retry", stuckPool)
	run(t, "losetup", "-d", p.loop)
}

// TestASuspendedPoolWedgesNoOtherVolume is "no call may hold a lock
// forever" on real ZFS. The pool's device starts failing every I/O;
// the next CreateVolume in that pool makes ZFS suspend it and its zfs
// command stays stuck in the kernel. That call answers when its deadline
// passes (the driver leaves the command behind), a retry of the same name
// is not refused as "in progress", and calls on volumes of a healthy pool go
// on meanwhile. Once the pool is back, the retry adopts what the stuck
// command made and nothing is left over.
//
// long: one scenario on real ZFS whose steps build on the volumes before them
func TestASuspendedPoolWedgesNoOtherVolume(t *testing.T) {
	stuck := newSuspendablePool(t)
	parent := testParent(t)
	d := startDriver(t, parent, "--parent-dataset", stuckPool+"/csi")
	onStuck := map[string]string{"parentDataset": stuckPool + "/csi"}
	before := d.createVolume(volumeRequest("before-suspension", 16<<20, mountCap(""), onStuck))
	stuck.swap("error")

	// The call on the failing pool, with a CO-like deadline.
	const callDeadline = 15 * time.Second
	stuckCall := func() (time.Duration, error) {
		c, cancel := context.WithTimeout(context.Background(), callDeadline)
		defer cancel()
		started := time.Now()
		_, err := d.controller.CreateVolume(c, volumeRequest("on-suspended-pool", 16<<20, mountCap(""), onStuck))
		return time.Since(started), err
	}
	stuckDone := make(chan error, 1)
	go func() {
		_, err := stuckCall()
		stuckDone <- err
	}()
	eventually(t, 2*time.Minute, func() string {
		if health := run(t, "timeout", "10", "zpool", "list", "-H", "-o", "health", stuckPool); !strings.Contains(health, "SUSPENDED") {
			return "pool health: " + strings.TrimSpace(health)
		}
		return ""
	})

	// Meanwhile the healthy pool serves create, snapshot, expand and delete.
	healthyStarted := time.Now()
	volume := d.createVolume(volumeRequest("on-healthy-pool", 16<<20, mountCap(""), nil))
	snapshot := d.createSnapshot("healthy-snapshot", volume.GetVolumeId())
	if _, err := d.controller.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: volume.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}}); err != nil {
		t.Errorf("expanding a volume on the healthy pool while another pool is suspended: %v", err)
	}
	if _, err := d.controller.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: snapshot.GetSnapshotId()}); err != nil {
		t.Errorf("deleting a snapshot on the healthy pool: %v", err)
	}
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()}); err != nil {
		t.Errorf("deleting a volume on the healthy pool: %v", err)
	}
	if _, err := d.controller.GetCapacity(ctx(t), &csi.GetCapacityRequest{}); err != nil {
		t.Errorf("GetCapacity of the default (healthy) parent while another pool is suspended: %v", err)
	}
	t.Logf("healthy pool: create, snapshot, expand, delete, capacity took %s while the other pool was suspended",
		time.Since(healthyStarted).Round(time.Millisecond))
	if exists(t, datasetOf(t, volume.GetVolumeId())) {
		t.Error("the healthy pool's deleted volume is still there")
	}

	if err := <-stuckDone; status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("CreateVolume on the suspended pool: %v, want DeadlineExceeded (its zfs command stuck in the kernel)", err)
	}
	// The driver gives a command stuck in the kernel up a few seconds after
	// the call's deadline; then the name's lock is free again and a retry
	// runs (and meets the suspended pool in turn) instead of answering
	// ABORTED for a call that is long gone.
	eventually(t, time.Minute, func() string {
		log, _ := os.ReadFile(d.logPath)
		if !strings.Contains(string(log), "left behind") {
			return "the driver's log does not say it left a stuck command behind"
		}
		return ""
	})
	took, err := stuckCall()
	if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Unavailable {
		t.Errorf("retry of the CreateVolume on the suspended pool: %v after %s, want UNAVAILABLE or DeadlineExceeded (not ABORTED: the first call's lock must be free)", err, took)
	}
	t.Logf("retry on the suspended pool: %v after %s", err, took.Round(time.Millisecond))

	stuck.resume()
	// The stuck zfs create finishes once the pool is back. Until it has, the
	// dataset can be there without its properties (the create ioctl makes
	// the dataset and sets the properties in two transactions), and a retry
	// then rightly leaves alone a dataset it cannot tell from an operator's.
	// Once it has, the CO's next retry must take that dataset as its volume.
	made := stuckPool + "/csi/on-suspended-pool"
	eventually(t, 2*time.Minute, func() string {
		if exists(t, made) && strings.TrimSpace(run(t, "zfs", "get", "-H", "-o", "value", "zfs.csi.dev:managed", made)) != "true" {
			return "the stuck zfs create has not finished: " + made + " has no properties yet"
		}
		return ""
	})
	retried, err := d.controller.CreateVolume(ctx(t), volumeRequest("on-suspended-pool", 16<<20, mountCap(""), onStuck))
	if err != nil {
		t.Fatalf("retry once the pool is back: %v", err)
	}
	for _, id := range []string{before.GetVolumeId(), retried.GetVolume().GetVolumeId()} {
		if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("deleting %s after the pool came back: %v", id, err)
		}
	}
	eventually(t, time.Minute, func() string {
		if left := strings.TrimSpace(run(t, "zfs", "list", "-H", "-r", "-t", "all", "-o", "name", stuckPool+"/csi")); left != stuckPool+"/csi" {
			return "left in the pool that was suspended:\n" + left
		}
		return ""
	})
}

// resume brings the device back and clears the pool's suspension.
func (p *suspendedPool) resume() {
	t := p.t
	t.Helper()
	p.swap("linear")
	if out, err := exec.Command("timeout", "120", "zpool", "clear", stuckPool).CombinedOutput(); err != nil {
		t.Fatalf("zpool clear %s: %v %s", stuckPool, err, out)
	}
	eventually(t, 2*time.Minute, func() string {
		if health := run(t, "timeout", "10", "zpool", "list", "-H", "-o", "health", stuckPool); strings.TrimSpace(health) != "ONLINE" {
			return "pool health after clear: " + strings.TrimSpace(health)
		}
		return ""
	})
}
