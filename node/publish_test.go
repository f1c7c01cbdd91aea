package node_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/rules"
)

func TestPublishBindsFromTheStagingPath(t *testing.T) {
	for _, fsType := range []string{"zfs", "ext4", "xfs", "btrfs", "block"} {
		t.Run("a "+fsType+" volume is bound at the target without a zfs command", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			h.zfs.ResetCalls()
			if err := h.publish(v, false); err != nil {
				t.Fatal(err)
			}
			if h.zfs.TotalCalls() != 0 {
				t.Errorf("publish ran zfs commands %v", h.zfs.Calls())
			}
			staged, published := h.mountAt(v.staging), h.mountAt(v.target)
			if fsType == "block" {
				staged = h.mountAt(filepath.Join(v.staging, node.BlockStagingFile))
			}
			if published == nil || published.Source != staged.Source || published.Root != staged.Root || published.ReadOnly() {
				t.Fatalf("published %+v, want a read-write bind of %+v", published, staged)
			}
			info, err := os.Stat(v.target)
			if err != nil || info.IsDir() == (fsType == "block") {
				t.Errorf("target %v (%v): want a file for block, a directory otherwise", info, err)
			}
		})
	}
}

func TestReadOnlyPublish(t *testing.T) {
	for _, test := range []struct {
		name     string
		readOnly bool
		mode     csi.VolumeCapability_AccessMode_Mode
	}{
		{"the readonly flag", true, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{"a reader-only access mode", false, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY},
	} {
		t.Run(test.name+" makes a read-only bind mount", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", "zfs")
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			v.capability = mountCapability("", test.mode)
			if err := h.publish(v, test.readOnly); err != nil {
				t.Fatal(err)
			}
			if mount := h.mountAt(v.target); mount == nil || !mount.ReadOnly() {
				t.Errorf("published %+v, want read-only", mount)
			}
		})
	}
	t.Run("a read-only raw block publish makes the device read-only until it goes", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "block")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		if err := h.publish(v, true); err != nil {
			t.Fatal(err)
		}
		if readOnly, _ := h.host.DeviceReadOnly(h.device(v)); !readOnly {
			t.Error("the device is writable: a read-only bind mount alone does not stop writes to a device node")
		}
		if err := h.unpublish(v); err != nil {
			t.Fatal(err)
		}
		if readOnly, _ := h.host.DeviceReadOnly(h.device(v)); readOnly {
			t.Error("the device stayed read-only after its read-only publish went")
		}
	})
	t.Run("read-only and read-write raw block publishes of one device are refused together", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "block")
		v.capability = blockCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)
		h.mustStageAndPublish(v)
		second := *v
		second.target = v.target + "-2"
		wantCode(t, h.publish(&second, true), codes.FailedPrecondition)
		if exists(second.target) && h.mountAt(second.target) != nil {
			t.Error("the refused publish left a mount")
		}
	})
}

// long: subtests on one shared fixture, one behaviour each
func TestPublishIsIdempotentAndRefusesConflicts(t *testing.T) {
	t.Run("publishing the same volume at the same target again mounts nothing more", func(t *testing.T) {
		h := newHarness(t)
		for _, fsType := range []string{"zfs", "ext4", "block"} {
			v := h.volume("vol-"+fsType, fsType)
			h.mustStageAndPublish(v)
			before := len(h.host.MountTable())
			if err := h.publish(v, false); err != nil {
				t.Fatalf("%s: %v", fsType, err)
			}
			if len(h.host.MountTable()) != before {
				t.Errorf("%s: mounts %v", fsType, h.mountPoints())
			}
		}
	})
	t.Run("publishing read-only where it is published read-write is ALREADY_EXISTS", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		h.mustStageAndPublish(v)
		wantCode(t, h.publish(v, true), codes.AlreadyExists)
	})
	t.Run("publishing with other mount flags at the same target is ALREADY_EXISTS", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		h.mustStageAndPublish(v)
		v.capability = mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "noexec")
		wantCode(t, h.publish(v, false), codes.AlreadyExists)
	})
	t.Run("publishing another volume at a used target is ALREADY_EXISTS", func(t *testing.T) {
		h := newHarness(t)
		v, other := h.volume("vol", "zfs"), h.volume("other", "zfs")
		h.mustStageAndPublish(v)
		if err := h.stage(other); err != nil {
			t.Fatal(err)
		}
		other.target = v.target
		wantCode(t, h.publish(other, false), codes.AlreadyExists)
	})
	for _, test := range []struct {
		mode csi.VolumeCapability_AccessMode_Mode
		code codes.Code
	}{
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, codes.FailedPrecondition},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, codes.FailedPrecondition},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, codes.FailedPrecondition},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, codes.OK},
	} {
		t.Run("a second target with "+test.mode.String()+" is "+test.code.String(), func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", "zfs")
			v.capability = mountCapability("", test.mode)
			h.mustStageAndPublish(v)
			second := *v
			second.target = v.target + "-2"
			wantCode(t, h.publish(&second, false), test.code)
		})
	}
	t.Run("publishing a volume that is not staged is FAILED_PRECONDITION", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		wantCode(t, h.publish(v, false), codes.FailedPrecondition)
		v.staging = ""
		wantCode(t, h.publish(v, false), codes.FailedPrecondition)
	})
	t.Run("publishing for block access a zvol whose volume_context says it is formatted is FAILED_PRECONDITION", func(t *testing.T) {
		// A raw block staging does not show whether the zvol has a
		// filesystem (one staged so by an older version of the driver, say).
		h := newHarness(t)
		v := h.volume("vol", "block")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		v.context[rules.ContextFSType] = "ext4"
		wantCode(t, h.publish(v, false), codes.FailedPrecondition)
	})
	t.Run("publishing with a filesystem the staged volume does not have is FAILED_PRECONDITION", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		v.capability = mountCapability("xfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		wantCode(t, h.publish(v, false), codes.FailedPrecondition)
	})
}

func TestPublishAppliesPerMountFlags(t *testing.T) {
	h := newHarness(t)
	v := h.volume("vol", "zfs")
	v.capability = mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "noexec", "noatime")
	h.mustStageAndPublish(v)
	if mount := h.mountAt(v.target); !mount.HasOption("noexec") || !mount.HasOption("noatime") {
		t.Errorf("published with %v, want noexec and noatime", mount.Options)
	}
}

func TestUnpublish(t *testing.T) {
	t.Run("unpublishing unmounts and removes the target of every kind of volume", func(t *testing.T) {
		h := newHarness(t)
		for _, fsType := range []string{"zfs", "ext4", "block"} {
			v := h.volume("vol-"+fsType, fsType)
			h.mustStageAndPublish(v)
			if err := h.unpublish(v); err != nil {
				t.Fatal(err)
			}
			if exists(v.target) || h.mountAt(v.target) != nil {
				t.Errorf("%s: target left behind (mounts %v)", fsType, h.mountPoints())
			}
			if h.mountAt(v.staging) == nil && h.mountAt(filepath.Join(v.staging, node.BlockStagingFile)) == nil {
				t.Errorf("%s: unpublish unstaged the volume", fsType)
			}
		}
	})
	t.Run("unpublishing what is not published succeeds", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		if err := h.unpublish(v); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(v.target, 0o750); err != nil {
			t.Fatal(err)
		}
		// Nothing of the volume is mounted there: the driver cannot tie the
		// directory to a mount it made, so it stays (the CO removes its own).
		if err := h.unpublish(v); err != nil || !exists(v.target) {
			t.Fatalf("an empty directory never mounted: %v, removed: %v", err, !exists(v.target))
		}
	})
	t.Run("a target that is not mounted but holds files is left alone", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		if err := os.MkdirAll(filepath.Join(v.target, "data"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := h.unpublish(v); err != nil {
			t.Fatal(err)
		}
		if !exists(filepath.Join(v.target, "data")) {
			t.Error("files at the target were deleted")
		}
	})
	t.Run("a target where another volume is mounted is left alone", func(t *testing.T) {
		h := newHarness(t)
		v, other := h.volume("vol", "zfs"), h.volume("other", "zfs")
		h.mustStageAndPublish(other)
		v.target = other.target
		wantCode(t, h.unpublish(v), codes.FailedPrecondition)
		if h.mountAt(other.target) == nil {
			t.Error("the other volume was unmounted")
		}
	})
}

func TestAccessIsRestoredAfterAReboot(t *testing.T) {
	h := newHarness(t)
	volumes := []*testVolume{h.volume("dataset", "zfs"), h.volume("ext4", "ext4"), h.volume("block", "block")}
	for _, v := range volumes {
		h.mustStageAndPublish(v)
	}
	h.host.Reboot()
	for _, v := range volumes {
		h.mustStageAndPublish(v)
		if h.mountAt(v.target) == nil {
			t.Errorf("%s is not published after the reboot", v.dataset)
		}
	}
	if _, _, formats := h.host.Filesystem(h.device(volumes[1])); formats != 1 {
		t.Errorf("the ext4 zvol was formatted %d times", formats)
	}
	if len(h.host.MountTable()) != 2*len(volumes) {
		t.Errorf("mounts %v, want one staging and one target mount per volume", h.mountPoints())
	}
}

func TestPublishAtTheSameTargetWithOtherArgumentsIsAlreadyExists(t *testing.T) {
	t.Run("another filesystem type", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		h.mustStageAndPublish(v)
		v.capability = mountCapability("xfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		wantCode(t, h.publish(v, false), codes.AlreadyExists)
	})
	t.Run("an access mode the volume's other publishes do not fit", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		v.capability = mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)
		h.mustStageAndPublish(v)
		second := *v
		second.target = v.target + "-2"
		if err := h.publish(&second, false); err != nil {
			t.Fatal(err)
		}
		v.capability = mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
		wantCode(t, h.publish(v, false), codes.AlreadyExists)
	})
	t.Run("the same arguments are OK", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		h.mustStageAndPublish(v)
		if err := h.publish(v, false); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAccessModesOnOneNode(t *testing.T) {
	const (
		rw = false
		ro = true
	)
	for _, test := range []struct {
		name          string
		mode          csi.VolumeCapability_AccessMode_Mode
		first, second bool // read-only flags of the two publishes
		code          codes.Code
	}{
		{"SINGLE_NODE_WRITER allows a read-only publish beside the read/write one", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, rw, ro, codes.OK},
		{"SINGLE_NODE_WRITER allows a read/write publish beside a read-only one", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, ro, rw, codes.OK},
		{"SINGLE_NODE_WRITER allows one read/write publish at a time", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, rw, rw, codes.FailedPrecondition},
		{"SINGLE_NODE_SINGLE_WRITER allows no read-only publish beside it", csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, rw, ro, codes.FailedPrecondition},
		{"SINGLE_NODE_SINGLE_WRITER allows no second read/write publish", csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, rw, rw, codes.FailedPrecondition},
		{"SINGLE_NODE_MULTI_WRITER allows several read/write publishes", csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, rw, rw, codes.OK},
	} {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", "zfs")
			v.capability = mountCapability("", test.mode)
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			if err := h.publish(v, test.first); err != nil {
				t.Fatal(err)
			}
			second := *v
			second.target = v.target + "-2"
			wantCode(t, h.publish(&second, test.second), test.code)
		})
	}
}
