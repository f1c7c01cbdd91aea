//go:build e2e

package tests

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/zfs-csi/zfs-csi/e2e/e2eutil"
	"github.com/zfs-csi/zfs-csi/rpc"
)

// operatorCall asks d's operator's socket (beside its CSI socket) for one
// of the acts only the operator may start, whose answer is a volume.
func (d *driverProcess) operatorCall(c context.Context, method string, fields map[string]any) (*csi.Volume, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(filepath.Dir(d.socket), "operator.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	request, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, err
	}
	volume := &csi.Volume{}
	return volume, conn.Invoke(c, "/"+rpc.OperatorService+"/"+method, request, volume)
}

// operatorDatasets makes a dataset outside the driver's parents for the
// operator's own data, destroyed when the test ends.
func operatorDatasets(t *testing.T) string {
	t.Helper()
	outside := testParent(t) + "-operator"
	run(t, "zfs", "destroy", "-r", outside)
	mustRun(t, "zfs", "create", outside)
	t.Cleanup(func() { run(t, "zfs", "destroy", "-rf", outside) })
	return outside
}

// A dataset and a zvol an operator already has are adopted, served, and
// given back with their data; what the driver could not own whole is
// refused with nothing changed.
//
// long: one scenario on real ZFS whose steps build on the volumes before them
func TestExistingDataIsAdoptedServedAndGivenBack(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	outside := operatorDatasets(t)
	mountpoint := t.TempDir()

	// A database's dataset, mounted by ZFS where the operator put it.
	db := outside + "/db"
	mustRun(t, "zfs", "create", "-o", "refquota=256M", "-o", "mountpoint="+mountpoint, db)
	mustRun(t, "sh", "-c", `echo rows > "$1/table" && sync`, "sh", mountpoint)
	adoptDB := map[string]any{rpc.AdoptDataset: db, rpc.AdoptName: "db", rpc.AdoptMode: "retain", rpc.AdoptRename: "true"}
	if _, err := d.operatorCall(ctx(t), rpc.OperatorAdopt, adoptDB); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("adopting a mounted dataset: %v, want FAILED_PRECONDITION", err)
	}
	if zfsGet(t, "zfs.csi.dev:managed", db) != "-" {
		t.Fatal("a refused adoption marked the dataset")
	}
	mustRun(t, "zfs", "unmount", db)
	volume, err := d.operatorCall(ctx(t), rpc.OperatorAdopt, adoptDB)
	if err != nil {
		t.Fatalf("adopting the unmounted dataset: %v", err)
	}
	adopted := datasetOf(t, volume.GetVolumeId())
	if adopted != parent+"/db" || zfsGet(t, "mountpoint", adopted) != "legacy" {
		t.Errorf("adopted as %s, mountpoint %s", adopted, zfsGet(t, "mountpoint", adopted))
	}
	v := d.nodeVolumeOf(volume, mountCap(""))
	d.stage(v)
	d.publish(v, false)
	if got := strings.TrimSpace(mustRun(t, "cat", filepath.Join(v.target, "table"))); got != "rows" {
		t.Errorf("the adopted dataset reads %q", got)
	}
	if _, err := d.controller.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: volume.GetVolumeId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a snapshot of a retained volume: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := d.operatorCall(ctx(t), rpc.OperatorRelease, map[string]any{rpc.ReleaseVolumeID: volume.GetVolumeId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("releasing a published volume: %v, want FAILED_PRECONDITION", err)
	}
	d.unpublish(v)
	d.unstage(v)
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: volume.GetVolumeId()}); err != nil {
		t.Fatalf("DeleteVolume of a retained volume: %v", err)
	}
	if !exists(t, adopted) || zfsGet(t, "zfs.csi.dev:managed", adopted) != "-" || zfsGet(t, "mountpoint", adopted) != mountpoint {
		t.Errorf("after DeleteVolume: exists %v, managed %s, mountpoint %s; want the data, unmarked, at the operator's mountpoint",
			exists(t, adopted), zfsGet(t, "zfs.csi.dev:managed", adopted), zfsGet(t, "mountpoint", adopted))
	}
	if got := strings.TrimSpace(run(t, "cat", filepath.Join(mountpoint, "table"))); got != "rows" {
		t.Errorf("the released dataset reads %q at its own mountpoint", got)
	}

	// A VM's zvol with an ext4 filesystem.
	vm := outside + "/vm"
	mustRun(t, "zfs", "create", "-V", "64M", vm)
	mustRun(t, "udevadm", "settle")
	mustRun(t, "mkfs.ext4", "-q", "/dev/zvol/"+vm)
	scratch := t.TempDir()
	mustRun(t, "mount", "/dev/zvol/"+vm, scratch)
	mustRun(t, "sh", "-c", `echo disk > "$1/image" && sync`, "sh", scratch)
	mustRun(t, "umount", scratch)
	adoptVM := map[string]any{rpc.AdoptDataset: vm, rpc.AdoptName: "vm", rpc.AdoptMode: "own", rpc.AdoptRename: "true", rpc.AdoptFSType: "xfs"}
	if _, err := d.operatorCall(ctx(t), rpc.OperatorAdopt, adoptVM); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("adopting an ext4 zvol as xfs: %v, want FAILED_PRECONDITION", err)
	}
	adoptVM[rpc.AdoptFSType] = "ext4"
	owned, err := d.operatorCall(ctx(t), rpc.OperatorAdopt, adoptVM)
	if err != nil {
		t.Fatalf("adopting the zvol: %v", err)
	}
	w := d.nodeVolumeOf(owned, mountCap("ext4"))
	d.stage(w)
	d.publish(w, false)
	if got := strings.TrimSpace(mustRun(t, "cat", filepath.Join(w.target, "image"))); got != "disk" {
		t.Errorf("the adopted zvol reads %q", got)
	}
	d.unpublish(w)
	d.unstage(w)
	if _, err := d.controller.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: owned.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 128 << 20}}); err != nil {
		t.Errorf("expanding an owned adopted zvol: %v", err)
	}
	if _, err := d.operatorCall(ctx(t), rpc.OperatorRelease, map[string]any{rpc.ReleaseVolumeID: owned.GetVolumeId()}); err != nil {
		t.Fatalf("release: %v", err)
	}
	released := datasetOf(t, owned.GetVolumeId())
	if left := e2eutil.LocalProperties(t, released, "zfs.csi.dev:"); len(left) > 0 {
		t.Errorf("the driver's properties left after release: %v", left)
	}

	// What the driver would not own whole.
	mustRun(t, "zfs", "create", "-o", "refquota=64M", "-o", "mountpoint=none", outside+"/tree")
	mustRun(t, "zfs", "create", outside+"/tree/child")
	if _, err := d.operatorCall(ctx(t), rpc.OperatorAdopt, map[string]any{rpc.AdoptDataset: outside + "/tree",
		rpc.AdoptName: "tree", rpc.AdoptMode: "own", rpc.AdoptRename: "true"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("adopting a dataset with a child: %v, want FAILED_PRECONDITION", err)
	}
	mustRun(t, "zfs", "create", "-o", "mountpoint=none", outside+"/unbounded")
	if _, err := d.operatorCall(ctx(t), rpc.OperatorAdopt, map[string]any{rpc.AdoptDataset: outside + "/unbounded",
		rpc.AdoptName: "unbounded", rpc.AdoptMode: "own", rpc.AdoptRename: "true"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("adopting a filesystem without refquota: %v, want FAILED_PRECONDITION", err)
	}
	if exists(t, parent+"/tree") || exists(t, parent+"/unbounded") {
		t.Error("a refused adoption moved its dataset")
	}
}

// operatorRetried is operatorCall until the restarted daemon answers: its
// sockets are served a moment after it starts, and a call under way when
// it was killed may still hold its lock (ABORTED).
func (d *driverProcess) operatorRetried(method string, fields map[string]any) (*csi.Volume, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		volume, err := d.operatorCall(ctx(d.t), method, fields)
		switch status.Code(err) {
		case codes.Unavailable, codes.Aborted:
			if time.Now().Before(deadline) {
				time.Sleep(300 * time.Millisecond)
				continue
			}
		}
		return volume, err
	}
}

// A daemon SIGKILLed at a random instant of an adoption or a release
// leaves the dataset adopted or as it was, never half-marked: a kill
// during adopt leaves it whole or untouched, one during release leaves it
// released or still the driver's (managed), never a mark of the driver
// without the managed mark; the same call again completes it. Odd rounds
// adopt a filesystem with a mountpoint of its own, which release gives
// back (and ZFS mounts there again).
func TestAnAdoptionOrReleaseKilledMidwayIsWholeOrNotAtAll(t *testing.T) {
	mountpoints := t.TempDir() // made first: removed after the parent's datasets unmount
	parent := testParent(t)
	d := startDriver(t, parent)
	for round := range 4 {
		name := "crash-" + string(rune('a'+round))
		dataset := parent + "/" + name
		mountpoint := "none"
		if round%2 == 1 {
			mountpoint = filepath.Join(mountpoints, name)
		}
		mustRun(t, "zfs", "create", "-o", "refquota=64M", "-o", "mountpoint="+mountpoint, dataset)
		if mountpoint != "none" {
			mustRun(t, "zfs", "umount", dataset)
		}
		adopt := map[string]any{rpc.AdoptDataset: dataset, rpc.AdoptName: name, rpc.AdoptMode: "own"}
		callCtx, cancel := context.WithCancel(ctx(t))
		go func() { _, _ = d.operatorCall(callCtx, rpc.OperatorAdopt, adopt) }()
		time.Sleep(time.Duration(rand.Int64N(int64(800 * time.Millisecond))))
		cancel()
		d.killHard()
		marks, managed, mp := e2eutil.LocalProperties(t, dataset, "zfs.csi.dev:"), zfsGet(t, "zfs.csi.dev:managed", dataset), zfsGet(t, "mountpoint", dataset)
		whole := managed == "true" && slices.Contains(marks, "zfs.csi.dev:csi-name") && mp == "legacy"
		if !whole && (len(marks) > 0 || mp != mountpoint) {
			t.Errorf("round %d, killed during adopt: half-marked: marks %v, mountpoint %s", round, marks, mp)
		}
		volume, err := d.operatorRetried(rpc.OperatorAdopt, adopt)
		if err != nil {
			t.Fatalf("round %d: adopt again after the kill: %v", round, err)
		}
		release := map[string]any{rpc.ReleaseVolumeID: volume.GetVolumeId()}
		callCtx, cancel = context.WithCancel(ctx(t))
		go func() { _, _ = d.operatorCall(callCtx, rpc.OperatorRelease, release) }()
		time.Sleep(time.Duration(rand.Int64N(int64(800 * time.Millisecond))))
		cancel()
		d.killHard()
		if marks := e2eutil.LocalProperties(t, dataset, "zfs.csi.dev:"); len(marks) > 0 {
			if zfsGet(t, "zfs.csi.dev:managed", dataset) == "-" {
				t.Errorf("round %d, killed during release: marks %v outlive the managed mark", round, marks)
			}
			if _, err := d.operatorRetried(rpc.OperatorRelease, release); err != nil {
				t.Fatalf("round %d: release again after the kill: %v", round, err)
			}
		}
		if marks, mp := e2eutil.LocalProperties(t, dataset, "zfs.csi.dev:"), zfsGet(t, "mountpoint", dataset); len(marks) > 0 || mp != mountpoint {
			t.Errorf("round %d: released, with marks %v and mountpoint %s (want none and %s)", round, marks, mp, mountpoint)
		}
	}
	t.Logf("%d kills landed while a zfs command of the daemon ran", d.killsInZFS)
}
