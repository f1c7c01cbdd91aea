//go:build e2e

package tests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/node/nodetest"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// The facts of real ZFS that the zfs package and its fake rely on, checked
// where only real ZFS can tell: what each failure prints (the classifier's
// table), what a clone accepts, what a thick zvol reserves.

// secondPool makes a small file-backed pool beside the test pool, destroyed
// when the test ends.
func secondPool(t *testing.T, name string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "truncate", "-s", "128M", file)
	run(t, "zpool", "destroy", "-f", name)
	mustRun(t, "zpool", "create", "-f", name, file)
	t.Cleanup(func() { run(t, "zpool", "destroy", "-f", name) })
	return file
}

func TestZFSErrorsAreClassified(t *testing.T) {
	parent := testParent(t)
	z := zfs.NewExec(zfs.ExecConfig{})
	c := ctx(t)
	mustRun(t, "zfs", "create", "-o", "mountpoint=legacy", parent+"/fs")
	mustRun(t, "zfs", "snapshot", parent+"/fs@s")
	poolFile := secondPool(t, "e2eother")

	expect := func(t *testing.T, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("got %v, want %v", err, want)
		}
	}
	t.Run("a clone into another pool", func(t *testing.T) {
		expect(t, z.Clone(c, parent+"/fs@s", "e2eother/c", nil), zfs.ErrCrossPool)
	})
	t.Run("a create under a missing parent", func(t *testing.T) {
		expect(t, z.Create(c, parent+"/missing/x", zfs.CreateOptions{}), zfs.ErrParentMissing)
	})
	t.Run("a clone under a missing parent", func(t *testing.T) {
		expect(t, z.Clone(c, parent+"/fs@s", parent+"/missing/x", nil), zfs.ErrParentMissing)
	})
	t.Run("a clone of a missing snapshot", func(t *testing.T) {
		expect(t, z.Clone(c, parent+"/fs@gone", parent+"/x", nil), zfs.ErrNotFound)
	})
	t.Run("held snapshots", func(t *testing.T) {
		mustRun(t, "zfs", "create", "-o", "mountpoint=legacy", parent+"/held")
		mustRun(t, "zfs", "snapshot", parent+"/held@s")
		mustRun(t, "zfs", "hold", "e2e", parent+"/held@s")
		t.Cleanup(func() { run(t, "zfs", "release", "e2e", parent+"/held@s") })
		// Measured: OpenZFS 2.3 names the hold ("it's being held"); 2.1
		// prints EBUSY's "dataset is busy", which the classifier can only
		// call ErrBusy. Both answer FAILED_PRECONDITION to the CO, and the
		// driver's destroy program finds holds before it destroys anything.
		held := zfs.ErrHeld
		if strings.HasPrefix(mustRun(t, "zfs", "version"), "zfs-2.1") {
			held = zfs.ErrBusy
		}
		err := z.Destroy(c, parent+"/held@s", zfs.DestroyOptions{})
		t.Logf("destroy of a held snapshot: %v", err)
		expect(t, err, held)
		err = z.Destroy(c, parent+"/held", zfs.DestroyOptions{Recursive: true})
		t.Logf("recursive destroy of a dataset with a held snapshot: %v", err)
		expect(t, err, held)
	})
	t.Run("a Lua error in a channel program", func(t *testing.T) {
		// A program may only touch its own pool: naming a dataset of
		// another raises a Lua error.
		mustRun(t, "zfs", "set", "e2e:managed=true", parent+"/fs")
		_, err := z.SnapshotGuarded(c, zfs.SnapshotRequest{Name: parent + "/fs@x", Properties: map[string]string{"e2e:n": "x"},
			Unique: "e2e:n", Guard: zfs.Guard{Owned: "e2e:managed"}, Others: []string{"e2eother@s"}})
		t.Logf("program: %v", err)
		expect(t, err, zfs.ErrProgram)
	})
	t.Run("a pool imported read-only", func(t *testing.T) {
		mustRun(t, "zpool", "export", "e2eother")
		mustRun(t, "zpool", "import", "-o", "readonly=on", "-d", filepath.Dir(poolFile), "e2eother")
		err := z.Create(c, "e2eother/x", zfs.CreateOptions{})
		t.Logf("create on a read-only pool: %v", err)
		expect(t, err, zfs.ErrReadOnlyPool)
	})
}

func TestACloneTakesItsSizeAndReservationInOneCommand(t *testing.T) {
	parent := testParent(t)
	z := zfs.NewExec(zfs.ExecConfig{})
	c := ctx(t)
	for _, blockSize := range []string{"16384", "65536"} {
		t.Run("volblocksize "+blockSize, func(t *testing.T) {
			source := parent + "/src-" + blockSize
			mustRun(t, "zfs", "create", "-V", "64M", "-o", "volblocksize="+blockSize, source)
			mustRun(t, "zfs", "snapshot", source+"@s")
			clone := parent + "/clone-" + blockSize
			err := z.Clone(c, source+"@s", clone, map[string]string{"volsize": "134217728", "refreservation": "auto"})
			if err != nil {
				t.Fatal(err)
			}
			if got := zfsDataset(t, clone).Volsize; got != 134217728 {
				t.Errorf("volsize %d", got)
			}
			size, _ := strconv.ParseUint(blockSize, 10, 64)
			want := zfs.ThickReservation(128<<20, size)
			if got := zfsGet(t, "refreservation", clone); got != strconv.FormatUint(want, 10) {
				t.Errorf("refreservation %s, want %d (zfs.ThickReservation)", got, want)
			}
		})
	}
}

// The fake and GetCapacity use zfs.ThickReservation for what a thick zvol
// reserves: it must be what ZFS reserves.
func TestThickReservationIsWhatZFSReserves(t *testing.T) {
	parent := testParent(t)
	for _, tc := range []struct{ size, blockSize, copies uint64 }{
		{1 << 20, 16 << 10, 1}, {64 << 20, 8 << 10, 1}, {1 << 30, 16 << 10, 1}, {3 << 30, 128 << 10, 1},
		{100 << 20, 4 << 10, 2}, {5 << 30, 16 << 10, 3},
	} {
		name := parent + "/v-" + strings.Join([]string{strconv.FormatUint(tc.size, 10), strconv.FormatUint(tc.blockSize, 10), strconv.FormatUint(tc.copies, 10)}, "-")
		mustRun(t, "zfs", "create", "-V", strconv.FormatUint(tc.size, 10), "-o", "volblocksize="+strconv.FormatUint(tc.blockSize, 10),
			"-o", "copies="+strconv.FormatUint(tc.copies, 10), name)
		want := zfs.ThickReservation(tc.size, tc.blockSize)
		if got := zfsGet(t, "refreservation", name); got != strconv.FormatUint(want, 10) {
			t.Errorf("%+v: zfs reserves %s, ThickReservation says %d", tc, got, want)
		}
		destroyZvol(t, name)
	}
}

// TestDatasetStatfsIsWhatTheFakeSays mounts a dataset with a refquota,
// writes to it, and compares statfs (the real mounter's, which
// NodeGetVolumeStats reports) with the fake host's figures for the
// referenced and available bytes zfs list gives, and with df.
func TestDatasetStatfsIsWhatTheFakeSays(t *testing.T) {
	parent := testParent(t)
	dataset := parent + "/statfs"
	mustRun(t, "zfs", "create", "-o", "mountpoint=legacy", "-o", "refquota=1G", dataset)
	dir := t.TempDir()
	mustRun(t, "mount", "-t", "zfs", dataset, dir)
	defer run(t, "umount", dir)
	mustRun(t, "dd", "if=/dev/urandom", "of="+filepath.Join(dir, "data"), "bs=1M", "count=300", "conv=fsync")
	mustRun(t, "sync", "-f", dir)
	mustRun(t, "zpool", "sync")
	fields := strings.Fields(mustRun(t, "zfs", "list", "-Hp", "-o", "referenced,available", dataset))
	referenced, _ := strconv.ParseUint(fields[0], 10, 64)
	available, _ := strconv.ParseUint(fields[1], 10, 64)
	got, err := node.NewMounter(zerolog.Nop()).Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := nodetest.DatasetStatfs(referenced, available)
	// The fake's figures are those of an empty dataset; this one holds a file.
	want.UsedInodes++
	want.TotalInodes++
	if got != want {
		t.Errorf("statfs of a dataset (referenced %d, available %d): %+v, the fake says %+v", referenced, available, got, want)
	}
	df := strings.Fields(lastLine(mustRun(t, "df", "-B1", "--output=size,used,avail", dir)))
	if fmt.Sprint(got.TotalBytes, got.UsedBytes, got.AvailableBytes) != strings.Join(df, " ") {
		t.Errorf("statfs %+v, df says size/used/avail %v", got, df)
	}
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// TestZFSMountsByItselfWhatTheFakeSays creates filesystems with the
// properties that decide whether ZFS mounts them by itself, on real ZFS and
// on the fake, and compares the real `mounted` property with the fake's
// Mounted: the rule the controller's TestZFSMountsNoVolumeByItself relies on.
func TestZFSMountsByItselfWhatTheFakeSays(t *testing.T) {
	// Made before the parent, so removed after its datasets (cleanups run
	// last first): ZFS mounted one of them there.
	mountpoint := filepath.Join(t.TempDir(), "mnt")
	parent := testParent(t)
	fake := zfstest.NewFake(map[string]uint64{pool(): 1 << 30})
	if err := fake.Create(ctx(t), parent, zfs.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, properties := range map[string][]string{
		"inherited":   nil,
		"legacy":      {"mountpoint=legacy"},
		"none":        {"mountpoint=none"},
		"noauto":      {"canmount=noauto"},
		"off":         {"canmount=off"},
		"a-path":      {"mountpoint=" + mountpoint},
		"legacy-kids": {"mountpoint=legacy"},
	} {
		dataset := parent + "/" + name
		args, options := []string{"create"}, map[string]string{}
		for _, property := range properties {
			args = append(args, "-o", property)
			key, value, _ := strings.Cut(property, "=")
			options[key] = value
		}
		mustRun(t, "zfs", append(args, dataset)...)
		if err := fake.Create(ctx(t), dataset, zfs.CreateOptions{Properties: options}); err != nil {
			t.Fatal(err)
		}
		if name == "legacy-kids" { // a child inherits legacy
			mustRun(t, "zfs", "create", dataset+"/child")
			if err := fake.Create(ctx(t), dataset+"/child", zfs.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			dataset += "/child"
		}
		real := zfsGet(t, "mounted", dataset) == "yes"
		if got := fake.Mounted(dataset); got != real {
			t.Errorf("%s (%v): ZFS says mounted=%v, the fake %v", dataset, properties, real, got)
		}
	}
}
