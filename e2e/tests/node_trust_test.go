//go:build e2e

package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The node's trust boundary on real ZFS: whoever reaches the
// socket is untrusted with host paths.

func TestNodeTouchesNoHostPathOutsideItsRoots(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent) // roots: the defaults and /tmp
	host := "/srv/zfs-csi-e2e/cron.d"
	if err := os.MkdirAll(host, 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll("/srv/zfs-csi-e2e") })
	job := filepath.Join(host, "job")
	if err := os.WriteFile(job, []byte("* * * * * root true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v := d.newNodeVolume("trust-fs", 64<<20, capabilityFor("zfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), nil)
	_, err := d.node.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: v.volume.GetVolumeId(), StagingTargetPath: host,
		VolumeCapability: v.capability, VolumeContext: v.volume.GetVolumeContext()})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("staging over %s: %v, want INVALID_ARGUMENT", host, err)
	}
	if paths := mountsUnder(t, "/srv"); len(paths) != 0 {
		t.Errorf("mounted %q", paths)
	}
	// A regular file at a target path, for an unknown ID, another node's and
	// one of ours: never deleted.
	d.stage(v)
	file := filepath.Join(t.TempDir(), "file")
	for _, id := range []string{nodeID + ":" + parent + "/nothing", "other-node:" + datasetOf(t, v.volume.GetVolumeId()), v.volume.GetVolumeId()} {
		if err := os.WriteFile(file, []byte("host data"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := d.node.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: file})
		if data, readErr := os.ReadFile(file); readErr != nil || string(data) != "host data" {
			t.Errorf("unpublish of %s from a host file (%v) left %q, %v", id, err, data, readErr)
		}
	}
	d.unstage(v)
	if data, err := os.ReadFile(job); err != nil || string(data) != "* * * * * root true\n" {
		t.Errorf("the host file changed: %q, %v", data, err)
	}
}

func TestNodeAWorkloadsLinkNamedZvolDoesNotWedgeUnstage(t *testing.T) {
	d := startDriver(t, testParent(t))
	v := d.newNodeVolume("trust-ext4", 64<<20, capabilityFor("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), nil)
	d.stage(v)
	d.publish(v, false)
	// The workload's own link, at the root of its ext4 filesystem.
	if err := os.Symlink("/etc", filepath.Join(v.target, "zvol")); err != nil {
		t.Fatal(err)
	}
	d.unpublish(v)
	d.unstage(v)
	if paths := mountsUnder(t, filepath.Dir(v.staging)); len(paths) != 0 {
		t.Errorf("still mounted: %q", paths)
	}
	if _, err := d.controller.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: v.volume.GetVolumeId()}); err != nil {
		t.Errorf("DeleteVolume after the unstage: %v", err)
	}
}
