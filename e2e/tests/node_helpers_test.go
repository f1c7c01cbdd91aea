//go:build e2e

package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// nodeVolume is a volume as the node tests use it: the CSI volume, the
// capability it is staged and published with, and where.
type nodeVolume struct {
	volume     *csi.Volume
	capability *csi.VolumeCapability
	staging    string
	target     string
}

// block reports whether the volume is used as a raw block device.
func (v *nodeVolume) block() bool { return v.capability.GetBlock() != nil }

// newNodeVolume creates a volume and picks its staging and target paths. The
// directories are made before the unstage/unpublish clean-ups are
// registered, so that the test's temporary directories are removed only
// after the volume is unmounted from them.
func (d *driverProcess) newNodeVolume(name string, size int64, capability *csi.VolumeCapability, source *csi.VolumeContentSource) *nodeVolume {
	d.t.Helper()
	request := volumeRequest(name, size, capability, nil)
	request.VolumeContentSource = source
	return d.nodeVolumeOf(d.createVolume(request), capability)
}

// nodeVolumeOf is a volume that exists already (made, or adopted) as the
// node tests use it, unstaged and unpublished when the test ends.
func (d *driverProcess) nodeVolumeOf(volume *csi.Volume, capability *csi.VolumeCapability) *nodeVolume {
	d.t.Helper()
	dir := d.t.TempDir()
	v := &nodeVolume{volume: volume, capability: capability, staging: filepath.Join(dir, "staging"), target: filepath.Join(dir, "target")}
	if err := os.Mkdir(v.staging, 0o750); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() {
		if d.running() {
			d.unpublish(v)
			d.unstage(v)
		}
	})
	return v
}

// running reports whether the daemon runs (a test may have stopped it; a
// restart's own clean-up stops it before earlier clean-ups run).
func (d *driverProcess) running() bool { return d.cmd != nil && d.cmd.ProcessState == nil }

func (d *driverProcess) stage(v *nodeVolume) {
	d.t.Helper()
	_, err := d.node.NodeStageVolume(ctx(d.t), &csi.NodeStageVolumeRequest{VolumeId: v.volume.GetVolumeId(),
		StagingTargetPath: v.staging, VolumeCapability: v.capability, VolumeContext: v.volume.GetVolumeContext()})
	if err != nil {
		d.t.Fatalf("NodeStageVolume(%s): %v", v.volume.GetVolumeId(), err)
	}
}

func (d *driverProcess) publish(v *nodeVolume, readOnly bool) {
	d.t.Helper()
	if err := d.tryPublish(v, v.target, readOnly); err != nil {
		d.t.Fatalf("NodePublishVolume(%s): %v", v.volume.GetVolumeId(), err)
	}
}

func (d *driverProcess) tryPublish(v *nodeVolume, target string, readOnly bool) error {
	_, err := d.node.NodePublishVolume(ctx(d.t), &csi.NodePublishVolumeRequest{VolumeId: v.volume.GetVolumeId(),
		StagingTargetPath: v.staging, TargetPath: target, VolumeCapability: v.capability, Readonly: readOnly,
		VolumeContext: v.volume.GetVolumeContext()})
	return err
}

// unpublish and unstage are idempotent: clean-ups call them again.
func (d *driverProcess) unpublish(v *nodeVolume) {
	d.t.Helper()
	if _, err := d.node.NodeUnpublishVolume(ctx(d.t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.volume.GetVolumeId(),
		TargetPath: v.target}); err != nil {
		d.t.Errorf("NodeUnpublishVolume(%s): %v", v.volume.GetVolumeId(), err)
	}
}

func (d *driverProcess) unstage(v *nodeVolume) {
	d.t.Helper()
	if _, err := d.node.NodeUnstageVolume(ctx(d.t), &csi.NodeUnstageVolumeRequest{VolumeId: v.volume.GetVolumeId(),
		StagingTargetPath: v.staging}); err != nil {
		d.t.Errorf("NodeUnstageVolume(%s): %v", v.volume.GetVolumeId(), err)
	}
}

// writeData writes 8 MiB of random data through the published target (a
// file in a filesystem, or the device itself) and returns its checksum.
func writeData(t *testing.T, v *nodeVolume) string {
	t.Helper()
	mustRun(t, "dd", "if=/dev/urandom", "of="+dataPath(v), "bs=1M", "count=8", "conv=fsync,notrunc", "status=none")
	return readData(t, v)
}

// readData returns the checksum of the 8 MiB writeData wrote.
func readData(t *testing.T, v *nodeVolume) string {
	t.Helper()
	out := mustRun(t, "sh", "-c", `dd if="$1" bs=1M count=8 status=none | sha256sum`, "sh", dataPath(v))
	return strings.Fields(out)[0]
}

func dataPath(v *nodeVolume) string {
	if v.block() {
		return v.target
	}
	return filepath.Join(v.target, "data")
}

func capabilityFor(fsType string, mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	capability := mountCap(fsType)
	if fsType == "block" {
		capability = blockCap()
	}
	capability.AccessMode.Mode = mode
	return capability
}

// sizeFor is a small volume size each kind accepts: mkfs.xfs needs 300 MB.
func sizeFor(fsType string) int64 {
	if fsType == "xfs" {
		return 320 << 20
	}
	return 64 << 20
}

// mountLine is the /proc/self/mountinfo line of a mount point, or "".
func mountLine(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 && fields[4] == path {
			return line
		}
	}
	return ""
}
