//go:build e2e

package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// mountsUnder lists the mount points under dir, as the kernel shows them.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Split(line, " "); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			paths = append(paths, fields[4])
		}
	}
	return paths
}

// superblockField is a field of an ext4 superblock, as dumpe2fs prints it.
func superblockField(t *testing.T, device, field string) string {
	t.Helper()
	for _, line := range strings.Split(mustRun(t, "dumpe2fs", "-h", device), "\n") {
		if name, value, found := strings.Cut(line, ":"); found && name == field {
			return strings.TrimSpace(value)
		}
	}
	t.Fatalf("dumpe2fs -h %s prints no %q", device, field)
	return ""
}

// zvolDevice is the udev link of a volume's zvol.
func zvolDevice(t *testing.T, v *nodeVolume) string {
	t.Helper()
	return "/dev/zvol/" + datasetOf(t, v.volume.GetVolumeId())
}

func TestNodeUnderASymlinkedCODirectory(t *testing.T) {
	// /var/lib/kubelet -> /data/kubelet, in small: the link is the CO's
	// directory the daemon is told (as --kubelet-dir /var/lib/kubelet).
	dir := t.TempDir()
	realDir, link := filepath.Join(dir, "data"), filepath.Join(dir, "kubelet")
	if err := os.Mkdir(realDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(realDir, link); err != nil {
		t.Fatal(err)
	}
	d := startDriver(t, testParent(t), "--allow-paths", link)
	for _, fsType := range []string{"zfs", "ext4", "block"} {
		t.Run(fsType, func(t *testing.T) {
			real := filepath.Join(realDir, fsType)
			if err := os.Mkdir(real, 0o750); err != nil {
				t.Fatal(err)
			}
			v := d.newNodeVolume("link-"+fsType, sizeFor(fsType), capabilityFor(fsType, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), nil)
			v.staging, v.target = filepath.Join(link, fsType, "staging"), filepath.Join(link, fsType, "target")
			if err := os.Mkdir(v.staging, 0o750); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				d.stage(v)
				d.publish(v, false)
			}
			if paths := mountsUnder(t, real); len(paths) != 2 {
				t.Errorf("after three stages and publishes %d mounts: %q, want the staging and the target mount", len(paths), paths)
			}
			written := writeData(t, v)
			if read := readData(t, v); read != written {
				t.Errorf("read %s, wrote %s", read, written)
			}
			d.unpublish(v)
			d.unstage(v)
			if paths := mountsUnder(t, real); len(paths) != 0 {
				t.Errorf("teardown left %q mounted", paths)
			}
		})
	}
}

func TestNodeOddMountsDoNotBreakIt(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	dir := t.TempDir()
	for _, odd := range []struct{ source, path string }{
		{"", "empty-source"}, {"source with space", "with space"}, {"none", "new\nline"},
	} {
		path := filepath.Join(dir, odd.path)
		if err := os.Mkdir(path, 0o750); err != nil {
			t.Fatal(err)
		}
		mustRun(t, "mount", "-t", "tmpfs", odd.source, path)
		t.Cleanup(func() { run(t, "umount", path) })
	}
	for _, fsType := range []string{"zfs", "block"} {
		t.Run(fsType, func(t *testing.T) {
			v := d.newNodeVolume("odd-"+fsType, sizeFor(fsType), capabilityFor(fsType, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), nil)
			d.stage(v)
			d.publish(v, false)
			written := writeData(t, v)
			if read := readData(t, v); read != written {
				t.Errorf("read %s, wrote %s", read, written)
			}
			d.unpublish(v)
			d.unstage(v)
		})
	}
	if _, code := operatorCommand(t, append([]string{"volumes"}, selection(parent)...)...); code != 0 {
		t.Errorf("zfs-csi volumes beside odd mounts exited %d", code)
	}
}

func TestNodeGrowsTheFilesystemOfALargerRestore(t *testing.T) {
	d := startDriver(t, testParent(t))
	for _, fsType := range []string{"ext4", "xfs", "btrfs"} {
		t.Run(fsType, func(t *testing.T) {
			size := int64(320 << 20)
			if fsType == "ext4" {
				size = 64 << 20
			}
			capability := capabilityFor(fsType, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
			source := d.newNodeVolume("small-"+fsType, size, capability, nil)
			d.stage(source)
			d.publish(source, false)
			written := writeData(t, source)
			before := filesystemSize(t, source.target)
			if fsType == "ext4" {
				if reserved := superblockField(t, zvolDevice(t, source), "Reserved block count"); reserved != "0" {
					t.Errorf("the ext4 keeps %s blocks reserved for root, want 0", reserved)
				}
			}
			d.unpublish(source)
			d.unstage(source)

			snapshot := d.createSnapshot("grow-snap-"+fsType, source.volume.GetVolumeId())
			restored := d.newNodeVolume("large-"+fsType, 2*size, capability, &csi.VolumeContentSource{
				Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot.GetSnapshotId()}}})
			d.stage(restored)
			d.publish(restored, false)
			if after := filesystemSize(t, restored.target); after < before+size/2 {
				t.Errorf("the restore's filesystem has %d bytes, its origin's %d: it was not grown to the %d-byte zvol", after, before, 2*size)
			}
			if read := readData(t, restored); read != written {
				t.Errorf("the restore reads %s, the origin was written %s", read, written)
			}
		})
	}
}

func TestNodeStagesAfterAnInterruptedFormat(t *testing.T) {
	d := startDriver(t, testParent(t))
	// What an mkfs that the CO's deadline killed leaves: mkfs.xfs marks its
	// superblock in progress until it is done, mke2fs writes its primary
	// superblock last.
	for fsType, cutOff := range map[string][][]string{
		"xfs": {{"mkfs.xfs", "-q", "-K", "DEVICE"}, {"xfs_db", "-x", "-c", "sb 0", "-c", "write inprogress 1", "DEVICE"}},
		"ext4": {{"mkfs.ext4", "-q", "DEVICE"},
			{"dd", "if=/dev/zero", "of=DEVICE", "bs=1024", "seek=1", "count=1", "conv=fsync", "status=none"}},
	} {
		t.Run(fsType, func(t *testing.T) {
			v := d.newNodeVolume("cut-"+fsType, sizeFor(fsType), capabilityFor(fsType, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), nil)
			mustRun(t, "udevadm", "settle", "--timeout=60")
			device := zvolDevice(t, v)
			for _, argv := range cutOff {
				args := make([]string, 0, len(argv)-1)
				for _, arg := range argv[1:] {
					args = append(args, strings.ReplaceAll(arg, "DEVICE", device))
				}
				mustRun(t, argv[0], args...)
			}
			mustRun(t, "udevadm", "settle", "--timeout=60")
			d.stage(v)
			d.publish(v, false)
			written := writeData(t, v)
			if read := readData(t, v); read != written {
				t.Errorf("read %s, wrote %s", read, written)
			}
			if fsType == "xfs" && !strings.Contains(mustRun(t, "xfs_db", "-r", "-c", "sb 0", "-c", "print inprogress", device), "inprogress = 0") {
				t.Error("the XFS is still marked in progress")
			}
		})
	}
}
