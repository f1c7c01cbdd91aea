//go:build e2e

package tests

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// healthReasons lists the status/reason pairs of a volume's health.
func healthReasons(health *csi.VolumeHealth) []string {
	var out []string
	for _, entry := range health.GetHealthStatuses() {
		out = append(out, entry.GetStatus().String()+"/"+entry.GetReason())
	}
	return out
}

func (d *driverProcess) controllerHealth(volumeID string) []string {
	d.t.Helper()
	response, err := d.controller.ControllerGetVolumeHealth(ctx(d.t), &csi.ControllerGetVolumeHealthRequest{VolumeId: volumeID})
	if err != nil {
		d.t.Fatalf("ControllerGetVolumeHealth: %v", err)
	}
	return healthReasons(response.GetVolumeHealth())
}

func (d *driverProcess) nodeHealth(v *nodeVolume) []string {
	d.t.Helper()
	response, err := d.node.NodeGetVolumeHealth(ctx(d.t), &csi.NodeGetVolumeHealthRequest{VolumeId: v.volume.GetVolumeId(),
		StagingTargetPath: v.staging, VolumePublishPath: v.target})
	if err != nil {
		d.t.Fatalf("NodeGetVolumeHealth: %v", err)
	}
	return healthReasons(response.GetVolumeHealth())
}

func (d *driverProcess) storageHealth() []string {
	d.t.Helper()
	response, err := d.node.NodeGetStorageHealth(ctx(d.t), &csi.NodeGetStorageHealthRequest{})
	if err != nil {
		d.t.Fatalf("NodeGetStorageHealth: %v", err)
	}
	var out []string
	for _, backend := range response.GetBackendHealth() {
		out = append(out, backend.GetStatus().String()+"/"+backend.GetReason())
	}
	return out
}

func wantHealth(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	for _, entry := range want {
		if !slices.Contains(got, entry) {
			t.Errorf("%s: %v lacks %s", what, got, entry)
		}
	}
	if len(want) == 0 && len(got) != 0 {
		t.Errorf("%s: %v, want nothing to report", what, got)
	}
}

// Health from real faults: a pool mirrored on two file vdevs loses one
// (zpool offline), gets one corrupted under it (found by a scrub), and a
// volume's dataset and a staging mount go behind the driver's back.
func TestHealthReportsRealFaults(t *testing.T) {
	dir := t.TempDir()
	left, right := filepath.Join(dir, "left"), filepath.Join(dir, "right")
	mustRun(t, "truncate", "-s", "1G", left, right) // ZFS keeps 128 MiB of slop whatever the size
	pool := "hpool"
	run(t, "zpool", "destroy", "-f", pool) // a leftover of an earlier run, if any
	mustRun(t, "zpool", "create", "-O", "mountpoint=none", pool, "mirror", left, right)
	t.Cleanup(func() { run(t, "zpool", "destroy", "-f", pool) })
	mustRun(t, "zfs", "create", pool+"/csi")
	d := startDriver(t, pool+"/csi")
	data := d.newNodeVolume("data", 128<<20, mountCap(""), nil)
	d.stage(data)
	d.publish(data, false)
	gone := d.createVolume(volumeRequest("gone", 32<<20, mountCap(""), nil))
	mustRun(t, "dd", "if=/dev/urandom", "of="+filepath.Join(data.target, "blob"), "bs=1M", "count=64", "conv=fsync", "status=none")
	mustRun(t, "zpool", "sync", pool)

	wantHealth(t, "healthy, controller", d.controllerHealth(data.volume.GetVolumeId()))
	wantHealth(t, "healthy, node", d.nodeHealth(data))
	wantHealth(t, "healthy, storage", d.storageHealth())

	mustRun(t, "zpool", "offline", pool, right)
	wantHealth(t, "one side offline, controller", d.controllerHealth(data.volume.GetVolumeId()), "DEGRADED/PoolDegraded")
	wantHealth(t, "one side offline, node", d.nodeHealth(data), "DEGRADED/PoolDegraded")
	wantHealth(t, "one side offline, storage", d.storageHealth(), "STORAGE_DEGRADED/PoolDegraded")
	listed, err := d.controller.ControllerListVolumeHealth(ctx(t), &csi.ControllerListVolumeHealthRequest{})
	if err != nil || len(listed.GetEntries()) != 2 {
		t.Errorf("ControllerListVolumeHealth with the pool degraded: %v, %v; want both volumes", listed, err)
	}
	mustRun(t, "zpool", "online", pool, right)
	mustRun(t, "zpool", "wait", "-t", "resilver", pool)

	// Garbage over most of one side, past its front labels: a scrub finds
	// the damage and repairs it from the other side.
	mustRun(t, "dd", "if=/dev/urandom", "of="+right, "bs=1M", "seek=8", "count=400", "conv=notrunc,fsync", "status=none")
	mustRun(t, "zpool", "scrub", "-w", pool)
	t.Logf("after the scrub:\n%s", mustRun(t, "zpool", "status", "-p", pool))
	wantHealth(t, "a corrupted side, controller", d.controllerHealth(data.volume.GetVolumeId()), "DEGRADED/PoolDeviceErrors")
	wantHealth(t, "a corrupted side, storage", d.storageHealth(), "STORAGE_DEGRADED/PoolDeviceErrors")
	mustRun(t, "zpool", "clear", pool)
	wantHealth(t, "errors cleared", d.controllerHealth(data.volume.GetVolumeId()))

	mustRun(t, "zfs", "destroy", datasetOf(t, gone.GetVolumeId()))
	if _, err := d.controller.ControllerGetVolumeHealth(ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: gone.GetVolumeId()}); status.Code(err) != codes.NotFound {
		t.Errorf("a dataset destroyed by hand, controller: %v, want NOT_FOUND", err)
	}

	mustRun(t, "umount", data.target)
	mustRun(t, "umount", data.staging)
	got := d.nodeHealth(data)
	wantHealth(t, "mounts unmounted by hand, node", got, "INACCESSIBLE/StagingMountMissing", "INACCESSIBLE/PublishMountMissing")
	if strings.Contains(fmt.Sprint(got), "Pool") {
		t.Errorf("the pool is healthy again, yet: %v", got)
	}
}
