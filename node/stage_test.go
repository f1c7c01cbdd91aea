package node_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/zfs-csi/zfs-csi/node"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

func TestStageMountsEachKindOfVolumeWithOneReadOfZFS(t *testing.T) {
	for _, test := range []struct {
		fsType     string
		mountPoint string // relative to the staging directory
		wantFSType string
		wantSource func(h *harness, v *testVolume) string
	}{
		{"zfs", "", "zfs", func(h *harness, v *testVolume) string { return v.dataset }},
		{"ext4", "", "ext4", func(h *harness, v *testVolume) string { return resolve(h, v) }},
		{"xfs", "", "xfs", func(h *harness, v *testVolume) string { return resolve(h, v) }},
		{"btrfs", "", "btrfs", func(h *harness, v *testVolume) string { return resolve(h, v) }},
		{"block", node.BlockStagingFile, "devtmpfs", func(h *harness, v *testVolume) string { return "udev" }},
	} {
		t.Run("a "+test.fsType+" volume is mounted at the staging path", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", test.fsType)
			h.zfs.ResetCalls()
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			if calls := h.zfs.Calls(); calls["Inspect"] != 1 || h.zfs.TotalCalls() != 1 {
				t.Errorf("stage called %v, want one Inspect (the ioctl, no zfs command)", calls)
			}
			mount := h.mountAt(filepath.Join(v.staging, test.mountPoint))
			if mount == nil {
				t.Fatalf("nothing mounted at the staging path; mounts: %v", h.mountPoints())
			}
			if mount.FSType != test.wantFSType || mount.Source != test.wantSource(h, v) {
				t.Errorf("staged %s from %s, want %s from %s", mount.FSType, mount.Source, test.wantFSType, test.wantSource(h, v))
			}
			if len(h.host.MountTable()) != 1 {
				t.Errorf("mounts %v, want only the staging mount", h.mountPoints())
			}
		})
	}
}

func resolve(h *harness, v *testVolume) string {
	device, err := h.host.ResolveDevice(h.device(v))
	if err != nil {
		h.t.Fatal(err)
	}
	return device
}

func TestStageFormatsOnlyBlankZvols(t *testing.T) {
	t.Run("a blank zvol is formatted once, and staging it again formats nothing", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		if err := h.unstage(v); err != nil {
			t.Fatal(err)
		}
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		if fsType, _, formats := h.host.Filesystem(h.device(v)); fsType != "ext4" || formats != 1 {
			t.Errorf("the zvol holds %q after %d formats, want ext4 after 1", fsType, formats)
		}
	})
	t.Run("a zvol holding another filesystem is refused and left as it is", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		h.host.FormatDevice(h.device(v), "xfs", "")
		wantCode(t, h.stage(v), codes.FailedPrecondition)
		if fsType, _, formats := h.host.Filesystem(h.device(v)); fsType != "xfs" || formats != 0 {
			t.Errorf("the zvol holds %q after %d formats, want the xfs it had", fsType, formats)
		}
		if len(h.host.MountTable()) != 0 {
			t.Errorf("mounted %v", h.mountPoints())
		}
	})
	t.Run("a blank clone is refused rather than formatted: it may hold raw data", func(t *testing.T) {
		h := newHarness(t)
		clone := h.clone(h.volume("source", "ext4"), "clone")
		wantCode(t, h.stage(clone), codes.FailedPrecondition)
		if fsType, _, _ := h.host.Filesystem(h.device(clone)); fsType != "" {
			t.Errorf("the clone was formatted %s", fsType)
		}
	})
	for _, fsType := range []string{"ext4", "xfs", "btrfs"} {
		t.Run("an "+fsType+" clone mounts beside its mounted origin, with the origin's data", func(t *testing.T) {
			h := newHarness(t)
			source := h.volume("source", fsType)
			if err := h.stage(source); err != nil {
				t.Fatal(err)
			}
			clone := h.clone(source, "clone")
			if err := h.stage(clone); err != nil {
				t.Fatal(err)
			}
			if got, _, formats := h.host.Filesystem(h.device(clone)); got != fsType || formats != 0 {
				t.Errorf("the clone holds %s formatted %d times, want its origin's %s and no format", got, formats, fsType)
			}
			if mount := h.mountAt(clone.staging); mount == nil || mount.FSType != fsType {
				t.Errorf("the clone is staged as %+v", mount)
			}
		})
	}
}

// clone makes a clone of a zvol as the controller does, its device holding
// whatever the origin's holds, filesystem UUID and size included.
func (h *harness) clone(source *testVolume, name string) *testVolume {
	return h.cloneOfSize(source, name, 1<<30)
}

// cloneOfSize makes a clone with a zvol of the given size, as a restore
// into a larger volume is.
func (h *harness) cloneOfSize(source *testVolume, name string, size uint64) *testVolume {
	h.t.Helper()
	ctx := context.Background()
	snapshot := source.dataset + "@for-" + name
	if err := h.zfs.Snapshot(ctx, snapshot, nil); err != nil {
		h.t.Fatal(err)
	}
	clone := *source
	clone.dataset = "tank/csi/" + name
	clone.id = rules.VolumeID(testNode, clone.dataset)
	clone.staging, clone.target = filepath.Join(h.dir, name, "staging"), filepath.Join(h.dir, name, "target")
	if err := h.zfs.Clone(ctx, snapshot, clone.dataset, map[string]string{h.props.Managed: "true",
		h.props.FSType: source.fsType, h.props.Source: rules.SnapshotID(testNode, snapshot)}); err != nil {
		h.t.Fatal(err)
	}
	h.host.AddDevice(h.device(&clone), size)
	h.host.CopyFilesystem(h.device(source), h.device(&clone))
	return &clone
}

func TestStageIsIdempotentAndRefusesConflicts(t *testing.T) {
	t.Run("staging the same volume again at the same path runs no zfs command and mounts nothing more", func(t *testing.T) {
		h := newHarness(t)
		for _, fsType := range []string{"zfs", "ext4", "block"} {
			v := h.volume("vol-"+fsType, fsType)
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			before := len(h.host.MountTable())
			h.zfs.ResetCalls()
			if err := h.stage(v); err != nil {
				t.Fatalf("%s: %v", fsType, err)
			}
			if h.zfs.TotalCalls() != 0 || len(h.host.MountTable()) != before {
				t.Errorf("%s: the repeat ran %v and left mounts %v", fsType, h.zfs.Calls(), h.mountPoints())
			}
		}
	})
	for _, test := range []struct {
		name   string
		change func(h *harness, v *testVolume)
	}{
		{"another volume at the same staging path", func(h *harness, v *testVolume) {
			other := h.volume("other", "zfs")
			v.id, v.dataset = other.id, other.dataset
		}},
		{"other mount flags", func(h *harness, v *testVolume) {
			v.capability = mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "noexec")
		}},
		{"read-only where it was staged read-write", func(h *harness, v *testVolume) {
			v.capability = mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)
		}},
	} {
		t.Run("staging with "+test.name+" is ALREADY_EXISTS", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", "zfs")
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			test.change(h, v)
			wantCode(t, h.stage(v), codes.AlreadyExists)
			if len(h.host.MountTable()) != 1 {
				t.Errorf("mounts %v", h.mountPoints())
			}
		})
	}
	t.Run("staging a zvol for block access where it is staged as a filesystem is ALREADY_EXISTS", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		if err := h.stage(v); err != nil {
			t.Fatal(err)
		}
		v.capability = blockCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		wantCode(t, h.stage(v), codes.AlreadyExists)
	})
}

func TestStageEnforcesTheOwnershipGuard(t *testing.T) {
	for _, test := range []struct {
		name   string
		volume func(h *harness) *testVolume
		code   codes.Code
	}{
		{"a volume ID of another node is NOT_FOUND", func(h *harness) *testVolume {
			v := h.volume("vol", "zfs")
			v.id = rules.VolumeID("node-2", v.dataset)
			return v
		}, codes.NotFound},
		{"a dataset outside the parent datasets is NOT_FOUND", func(h *harness) *testVolume {
			v := h.volume("vol", "zfs")
			v.id = rules.VolumeID(testNode, "tank/vol")
			return v
		}, codes.NotFound},
		{"a malformed volume ID is NOT_FOUND", func(h *harness) *testVolume {
			v := h.volume("vol", "zfs")
			v.id = "not-an-id"
			return v
		}, codes.NotFound},
		{"a dataset without the managed mark is NOT_FOUND", func(h *harness) *testVolume {
			v := h.volume("vol", "zfs")
			if err := h.zfs.Set(context.Background(), v.dataset, map[string]string{h.props.Managed: "false"}); err != nil {
				h.t.Fatal(err)
			}
			return v
		}, codes.NotFound},
		{"a volume deleted while its snapshots have clones is NOT_FOUND", func(h *harness) *testVolume {
			v := h.volume("vol", "zfs")
			if err := h.zfs.Set(context.Background(), v.dataset, map[string]string{h.props.Deleted: "true"}); err != nil {
				h.t.Fatal(err)
			}
			return v
		}, codes.NotFound},
		{"a volume that does not exist is NOT_FOUND", func(h *harness) *testVolume {
			v := h.volume("vol", "zfs")
			if err := h.zfs.Destroy(context.Background(), v.dataset, zfs.DestroyOptions{}); err != nil {
				h.t.Fatal(err)
			}
			return v
		}, codes.NotFound},
		{"a volume_context that contradicts ZFS is INVALID_ARGUMENT", func(h *harness) *testVolume {
			v := h.volume("vol", "ext4")
			v.context[rules.ContextFSType] = "xfs"
			return v
		}, codes.InvalidArgument},
	} {
		t.Run(test.name, func(t *testing.T) {
			h := newHarness(t)
			v := test.volume(h)
			wantCode(t, h.stage(v), test.code)
			if len(h.host.MountTable()) != 0 {
				t.Errorf("mounted %v", h.mountPoints())
			}
		})
	}
}

func TestStageRefusesCapabilitiesTheVolumeCannotServe(t *testing.T) {
	for _, test := range []struct {
		name       string
		fsType     string
		capability *csi.VolumeCapability
		code       codes.Code
	}{
		{"block access to a dataset", "zfs", blockCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.FailedPrecondition},
		{"ext4 on a dataset", "zfs", mountCapability("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.FailedPrecondition},
		{"ext4 on an xfs zvol", "xfs", mountCapability("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.FailedPrecondition},
		{"a mount of a raw block zvol", "block", mountCapability("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.FailedPrecondition},
		{"block access to an ext4 zvol", "ext4", blockCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.FailedPrecondition},
		{"block access to an xfs zvol", "xfs", blockCapability(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.FailedPrecondition},
		{"a MULTI_NODE access mode", "zfs", mountCapability("", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), codes.FailedPrecondition},
		{"an unknown filesystem", "zfs", mountCapability("ntfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), codes.FailedPrecondition},
		{"no access mode", "zfs", mountCapability("", csi.VolumeCapability_AccessMode_UNKNOWN), codes.InvalidArgument},
		{"a volume mount group", "zfs", &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{VolumeMountGroup: "1000"}}}, codes.InvalidArgument},
		{"a mount flag ZFS would ignore", "zfs", mountCapability("", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "discard"), codes.InvalidArgument},
		{"a mount flag that is not one", "ext4", mountCapability("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "bind"), codes.InvalidArgument},
		{"an ext4 option the kernel refuses", "ext4", mountCapability("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "bogus=1"), codes.InvalidArgument},
	} {
		t.Run("staging with "+test.name+" is "+test.code.String(), func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", test.fsType)
			v.capability = test.capability
			wantCode(t, h.stage(v), test.code)
			if len(h.host.MountTable()) != 0 {
				t.Errorf("mounted %v", h.mountPoints())
			}
		})
	}
}

func TestStageAppliesMountFlags(t *testing.T) {
	h := newHarness(t)
	v := h.volume("vol", "ext4")
	v.capability = mountCapability("ext4", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "noatime,nosuid", "discard")
	if err := h.stage(v); err != nil {
		t.Fatal(err)
	}
	mount := h.mountAt(v.staging)
	if !mount.HasOption("noatime") || !mount.HasOption("nosuid") || !slices.Contains(mount.SuperOptions, "discard") {
		t.Errorf("staged with options %v and %v, want noatime, nosuid and discard", mount.Options, mount.SuperOptions)
	}
}

func TestFilesystemMountsAreAlwaysNosuidNodev(t *testing.T) {
	for _, fsType := range []string{"zfs", "ext4"} {
		t.Run("a "+fsType+" volume is staged and published nosuid,nodev without asking", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			h.mustStageAndPublish(v)
			for _, path := range []string{v.staging, v.target} {
				if mount := h.mountAt(path); !mount.HasOption("nosuid") || !mount.HasOption("nodev") {
					t.Errorf("%s is mounted %v", path, mount.Options)
				}
			}
		})
	}
}

func TestStageWaitsForTheDeviceWithADeadline(t *testing.T) {
	h := newHarness(t)
	v := h.volume("vol", "ext4")
	v.dataset, v.id = "tank/csi/no-device", rules.VolumeID(testNode, "tank/csi/no-device")
	if err := h.zfs.Create(context.Background(), v.dataset, zfs.CreateOptions{VolSize: 1 << 30,
		Properties: map[string]string{h.props.Managed: "true", h.props.FSType: "ext4"}}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.stage(v), codes.Unavailable)
}

func TestUnstage(t *testing.T) {
	t.Run("unstaging unmounts every kind of volume and leaves the staging directory to the CO", func(t *testing.T) {
		h := newHarness(t)
		for _, fsType := range []string{"zfs", "ext4", "block"} {
			v := h.volume("vol-"+fsType, fsType)
			if err := h.stage(v); err != nil {
				t.Fatal(err)
			}
			h.zfs.ResetCalls()
			if err := h.unstage(v); err != nil {
				t.Fatal(err)
			}
			if !exists(v.staging) || exists(filepath.Join(v.staging, node.BlockStagingFile)) || h.zfs.TotalCalls() != 0 {
				t.Errorf("%s: staging directory kept %v, block file kept %v, zfs calls %v", fsType,
					exists(v.staging), exists(filepath.Join(v.staging, node.BlockStagingFile)), h.zfs.Calls())
			}
		}
		if len(h.host.MountTable()) != 0 {
			t.Errorf("mounts left: %v", h.mountPoints())
		}
	})
	t.Run("unstaging what is not staged succeeds", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		if err := h.unstage(v); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unstaging where something else is mounted is refused and leaves it", func(t *testing.T) {
		h := newHarness(t)
		v, other := h.volume("vol", "zfs"), h.volume("other", "zfs")
		other.staging = v.staging
		if err := h.stage(other); err != nil {
			t.Fatal(err)
		}
		wantCode(t, h.unstage(v), codes.FailedPrecondition)
		if h.mountAt(v.staging) == nil {
			t.Error("the other volume was unmounted")
		}
	})
}

func TestCallsOnAVolumeInFlightAreAborted(t *testing.T) {
	h := newHarness(t)
	v := h.volume("vol", "zfs")
	release, err := h.server.Hold(v.id, v.dataset)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	wantCode(t, h.stage(v), codes.Aborted)
	wantCode(t, h.publish(v, false), codes.Aborted)
	wantCode(t, h.unpublish(v), codes.Aborted)
	wantCode(t, h.unstage(v), codes.Aborted)
}

func TestStageGrowsTheFilesystemOfALargerCloneToItsZvol(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs", "btrfs"} {
		t.Run("an "+fsType+" restored into a zvol twice its origin's size fills it", func(t *testing.T) {
			h := newHarness(t)
			source := h.volume("source", fsType)
			if err := h.stage(source); err != nil {
				t.Fatal(err)
			}
			clone := h.cloneOfSize(source, "clone", 2<<30)
			if err := h.stage(clone); err != nil {
				t.Fatal(err)
			}
			if _, size, formats := h.host.Filesystem(h.device(clone)); size != 2<<30 || formats != 0 {
				t.Errorf("the clone's filesystem has %d bytes after %d formats, want %d and none", size, formats, 2<<30)
			}
		})
	}
	t.Run("a clone of the same size is not resized", func(t *testing.T) {
		h := newHarness(t)
		source := h.volume("source", "ext4")
		if err := h.stage(source); err != nil {
			t.Fatal(err)
		}
		clone := h.clone(source, "clone")
		if err := h.stage(clone); err != nil {
			t.Fatal(err)
		}
		if _, size, _ := h.host.Filesystem(h.device(clone)); size != 1<<30 {
			t.Errorf("the clone's filesystem has %d bytes", size)
		}
	})
}

func TestStageAfterAnInterruptedFormat(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs", "btrfs"} {
		t.Run("an "+fsType+" zvol whose mkfs the deadline cut off is formatted anew by the next stage", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			h.host.InterruptNextFormat()
			if err := h.stage(v); err == nil {
				t.Fatal("the interrupted stage succeeded")
			}
			if err := h.stage(v); err != nil {
				t.Fatalf("the next stage: %v", err)
			}
			h.wantFormattedAndStaged(t, v, fsType, 2)
		})
	}
	t.Run("an unfinished filesystem on a clone is left alone: its blocks are its origin's", func(t *testing.T) {
		h := newHarness(t)
		source := h.volume("source", "xfs")
		h.host.InterruptNextFormat()
		if err := h.stage(source); err == nil {
			t.Fatal("the interrupted stage succeeded")
		}
		clone := h.clone(source, "clone")
		wantCode(t, h.stage(clone), codes.FailedPrecondition)
		if _, _, formats := h.host.Filesystem(h.device(clone)); formats != 0 {
			t.Errorf("the clone was formatted: %d formats", formats)
		}
	})
}

// wantFormattedAndStaged checks that v's zvol holds fsType after formats
// mkfs runs and is mounted at its staging path.
func (h *harness) wantFormattedAndStaged(t *testing.T, v *testVolume, fsType string, formats int) {
	t.Helper()
	if got, _, n := h.host.Filesystem(h.device(v)); got != fsType || n != formats {
		t.Errorf("the zvol holds %q after %d formats, want %s after %d", got, n, fsType, formats)
	}
	if mount := h.mountAt(v.staging); mount == nil || mount.FSType != fsType {
		t.Errorf("staged %+v", mount)
	}
}

func TestStageHoldsTheZvolOpenWhileZFSRefusesFirstOpens(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run("a blank "+fsType+" zvol is formatted and mounted while the kernel refuses its first opens", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			// Every open of mount(2), blkid and mkfs would be a first open,
			// each refused once with ERESTARTSYS, without the stage's hold.
			h.host.BusyFirstOpens(3)
			if err := h.stage(v); err != nil {
				t.Fatalf("stage: %v", err)
			}
			h.wantFormattedAndStaged(t, v, fsType, 1)
			if held := h.host.Held(h.device(v)); held != 0 {
				t.Errorf("the stage left %d opens of the zvol held", held)
			}
		})
	}
	t.Run("a zvol that cannot be opened before the deadline is not formatted", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "ext4")
		h.host.BusyFirstOpens(1 << 30)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := h.server.NodeStageVolume(ctx, h.stageRequest(v)); err == nil {
			t.Fatal("the stage succeeded")
		}
		if _, _, formats := h.host.Filesystem(h.device(v)); formats != 0 {
			t.Errorf("formatted %d times", formats)
		}
	})
}

func TestTeardownAfterTheNodeIDChanged(t *testing.T) {
	for _, fsType := range []string{"zfs", "ext4", "block"} {
		t.Run("a "+fsType+" volume published under the old node ID is unpublished and unstaged", func(t *testing.T) {
			h := newHarness(t)
			v := h.volume("vol", fsType)
			h.mustStageAndPublish(v)
			cfg := h.cfg
			cfg.NodeID = "node-1-renamed"
			h.server = node.New(cfg, h.zfs, h.host, zerolog.Nop(), h.opts)
			if err := h.unpublish(v); err != nil {
				t.Fatalf("unpublish: %v", err)
			}
			if err := h.unstage(v); err != nil {
				t.Fatalf("unstage: %v", err)
			}
			if len(h.host.MountTable()) != 0 {
				t.Errorf("mounts left: %v", h.mountPoints())
			}
		})
	}
	t.Run("teardown of a dataset outside the parent datasets is still NOT_FOUND", func(t *testing.T) {
		h := newHarness(t)
		v := h.volume("vol", "zfs")
		v.id = rules.VolumeID("node-0", "tank/vol")
		wantCode(t, h.unpublish(v), codes.NotFound)
		wantCode(t, h.unstage(v), codes.NotFound)
	})
}

// The kernel keeps a bind of a device node mounted after its zvol is
// destroyed and shows its root as "/zdN//deleted"; the operator reports
// (inventory's stale mounts) call such a mount the volume's remains, and so
// must teardown, or the CO retries forever.
func TestTeardownOfABlockVolumeWhoseZvolWasDestroyedBehindTheDriver(t *testing.T) {
	h := newHarness(t)
	v := h.volume("vol", "block")
	other := h.volume("other", "block")
	h.mustStageAndPublish(v)
	h.mustStageAndPublish(other)
	if err := h.zfs.Destroy(t.Context(), v.dataset, zfs.DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	h.host.RemoveDevice(h.device(v))
	if err := h.unpublish(v); err != nil {
		t.Fatalf("unpublish: %v", err)
	}
	if err := h.unstage(v); err != nil {
		t.Fatalf("unstage: %v", err)
	}
	if got := h.mountPoints(); len(got) != 2 || h.mountAt(other.target) == nil {
		t.Errorf("mounts left: %v; want only the other volume's two", got)
	}
	t.Run("a live volume's teardown still refuses a vanished device that is not its own", func(t *testing.T) {
		foreign := filepath.Join(h.dir, "foreign")
		if err := os.WriteFile(foreign, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		third := h.volume("third", "block")
		h.mustStageAndPublish(third)
		if err := h.host.Bind(h.device(third), foreign); err != nil {
			t.Fatal(err)
		}
		if err := h.zfs.Destroy(t.Context(), third.dataset, zfs.DestroyOptions{}); err != nil {
			t.Fatal(err)
		}
		h.host.RemoveDevice(h.device(third))
		wantCode(t, h.unpublish(&testVolume{id: other.id, dataset: other.dataset, target: foreign}), codes.FailedPrecondition)
	})
}
