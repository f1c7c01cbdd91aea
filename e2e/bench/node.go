package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// nodeCalls is section 4: NodeStageVolume + NodePublishVolume of one
// dataset and of one ext4 zvol, against the same mounts made bare, in two
// ways: the three mount(2) calls the driver makes (the filesystem at the
// staging path with nodev,nosuid; a bind mount at the target; its remount
// with nodev,nosuid), made from the bench's own process as the driver makes
// them from its own, which is the cheapest way and the target's measure
// (every bare side makes the target directory first, as publish does);
// and the mount commands a person would run for them, forked (mount -t zfs
// runs the mount.zfs helper too). Two more bare sides split the driver's
// margin: the mounts with the reads that must come before them (the checks
// done bare), and those with two empty CSI calls (NodeGetCapabilities) to the
// same daemon over the same socket, which any CSI driver's stage and publish
// cost a CO. All sides mount the same volume at the same paths; each round
// unmounts again, untimed. Beside the wall time, rows of CPU time (the
// bench's and the daemon's together) show the work each side does apart
// from waiting, which a loaded emulated host inflates unevenly; every
// side's CPU includes its unmounts (the driver's: its unpublish and
// unstage), which the wall times leave out. The ext4 zvol is
// formatted by a first, untimed stage.
//
// long: the section's sides, each mounting the same volume at the same paths
func (b *bench) nodeCalls(ctx context.Context) error {
	d, err := startDaemon(ctx, b.daemonConfig("seq"))
	if err != nil {
		return err
	}
	defer d.stop()
	kinds := []struct {
		what       string
		name       string
		capability *csi.VolumeCapability
		fsType     string
	}{
		{"NodeStage+NodePublish dataset", "node-fs", mountCapability(""), "zfs"},
		{"NodeStage+NodePublish ext4 zvol", "node-ext4", mountCapability("ext4"), "ext4"},
	}
	for _, kind := range kinds {
		volume, err := createVolume(ctx, d, volumeRequest(kind.name, kind.capability, false))
		if err != nil {
			return err
		}
		dataset := strings.TrimPrefix(volume.GetVolumeId(), nodeID+":")
		source := dataset
		if kind.fsType != "zfs" {
			source = "/dev/zvol/" + dataset
		}
		staging := filepath.Join(b.cfg.work, "node", kind.name, "staging")
		target := filepath.Join(b.cfg.work, "node", kind.name, "target")
		if err := os.MkdirAll(staging, 0o755); err != nil {
			return err
		}
		stagePublish := func(ctx context.Context) error {
			if _, err := d.node.NodeStageVolume(ctx, stageRequest(volume, staging, kind.capability)); err != nil {
				return err
			}
			_, err := d.node.NodePublishVolume(ctx, publishRequest(volume, staging, target, kind.capability))
			return err
		}
		unpublishUnstage := func(ctx context.Context) error {
			if _, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volume.GetVolumeId(), TargetPath: target}); err != nil {
				return err
			}
			_, err := d.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volume.GetVolumeId(), StagingTargetPath: staging})
			return err
		}
		// The first stage formats the zvol (and makes the target directory).
		if _, err := timed(ctx, stagePublish); err != nil {
			return fmt.Errorf("%s: first stage: %w", kind.name, err)
		}
		if _, err := timed(ctx, unpublishUnstage); err != nil {
			return err
		}
		zfsDevice, err := unix.Open("/dev/zfs", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(zfsDevice)
		// As in ownershipReads: a size known only at run time keeps dst on
		// the heap, where the address the kernel is given stays put.
		cmd, dst := make([]byte, zcSize), make([]byte, 64<<10+len(dataset))
		checkedMounts := func(context.Context) error {
			return checkedMountSyscalls(zfsDevice, dataset, source, staging, target, kind.fsType, cmd, dst)
		}
		var drv, syscalls, forked, checked, called samples
		// CPU time of the bench and the daemon together, for the sides whose
		// work all happens in those two processes.
		var drvCPU, syscallsCPU, checkedCPU, calledCPU samples
		pid := d.cmd.Process.Pid
		withCPU := func(into *samples, fn func() (time.Duration, error)) func() (time.Duration, error) {
			return func() (time.Duration, error) {
				took, cpu, err := cpuSpent(pid, fn)
				*into = append(*into, cpu)
				return took, err
			}
		}
		for i := range b.cfg.nodeN {
			err := interleaveSides(i, d, []side{
				{withCPU(&drvCPU, func() (time.Duration, error) {
					took, err := timed(ctx, stagePublish)
					if err == nil {
						_, err = timed(ctx, unpublishUnstage)
					}
					return took, err
				}), &drv, true},
				{withCPU(&syscallsCPU, func() (time.Duration, error) {
					return b.bareMounts(ctx, target, staging, func(context.Context) error {
						return mountSyscalls(source, staging, target, kind.fsType)
					})
				}), &syscalls, false},
				{func() (time.Duration, error) {
					return b.bareMounts(ctx, target, staging, func(ctx context.Context) error {
						return b.mountCommands(ctx, source, staging, target, kind.fsType)
					})
				}, &forked, false},
				{withCPU(&checkedCPU, func() (time.Duration, error) {
					return b.bareMounts(ctx, target, staging, checkedMounts)
				}), &checked, false},
				{withCPU(&calledCPU, func() (time.Duration, error) {
					return b.bareMounts(ctx, target, staging, func(ctx context.Context) error {
						for range 2 {
							if _, err := d.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{}); err != nil {
								return err
							}
						}
						return checkedMounts(ctx)
					})
				}), &called, false},
			}, nil)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", kind.what, i, err)
			}
		}
		r := compare("4", kind.what+" vs mount(2) ×3 in-process", drv, syscalls, 1.10)
		stageCount, publishCount := b.counts["NodeStageVolume "+countKind(kind.fsType)], b.counts["NodePublishVolume "+countKind(kind.fsType)]
		r.commands = fmt.Sprintf("stage %s; publish %s", stageCount, publishCount)
		b.rows["4"] = append(b.rows["4"], r,
			compare("4", kind.what+" vs mount -t "+kind.fsType+" + mount --bind + remount, forked", drv, forked, 1.10),
			compare("4", kind.what+" vs the checks done bare: ownership ioctl, mount table read ×2, mount(2) ×3", drv, checked, 1.10),
			compare("4", kind.what+" vs the checks done bare and two empty CSI calls to the daemon", drv, called, 1.10),
			compare("4", kind.what+", CPU of bench and daemon, unmounts too, vs mount(2) ×3", drvCPU, syscallsCPU, 0),
			compare("4", kind.what+", CPU of bench and daemon, unmounts too, vs the checks done bare", drvCPU, checkedCPU, 0),
			compare("4", kind.what+", CPU of bench and daemon, unmounts too, vs the checks bare and two empty calls", drvCPU, calledCPU, 0))
		fmt.Printf("=== bench: %s: driver p50 %s, mount(2) p50 %s, forked mount p50 %s, checks and mount(2) p50 %s, with two empty CSI calls p50 %s\n",
			kind.what, ms(drv.p50()), ms(syscalls.p50()), ms(forked.p50()), ms(checked.p50()), ms(called.p50()))
		ownership, err := b.ownershipReads(ctx, countKind(kind.fsType), dataset, b.cfg.nodeN)
		if err != nil {
			// Its failure is a finding, not the section's end.
			b.notes = append(b.notes, fmt.Sprintf("section 4: the ownership read: %v", err))
			continue
		}
		b.rows["4"] = append(b.rows["4"], ownership...)
	}
	return nil
}

func countKind(fsType string) string {
	if fsType == "zfs" {
		return "dataset"
	}
	return fsType + " zvol"
}

// bareMounts times mount (the bare side's mounts of a volume at staging and
// target) with the making of the target directory, which the driver's
// publish makes too (the spec has the plugin create the target path, and
// its unpublish removes it again); then it unmounts both and removes the
// target, untimed.
func (b *bench) bareMounts(ctx context.Context, target, staging string, mount func(context.Context) error) (time.Duration, error) {
	took, err := timed(ctx, func(ctx context.Context) error {
		if err := os.Mkdir(target, 0o750); err != nil {
			return err
		}
		return mount(ctx)
	})
	for _, path := range []string{target, staging} {
		if unmountErr := unix.Unmount(path, 0); err == nil {
			err = unmountErr
		}
	}
	if removeErr := os.Remove(target); err == nil {
		err = removeErr
	}
	return took, err
}

// mountSyscalls makes the driver's three mounts of a volume: the filesystem
// at staging (nodev,nosuid: the flags the driver adds to every filesystem
// mount), bound at target, and the bind mount remounted with those flags
// (a bind mount takes new flags only by a remount).
func mountSyscalls(source, staging, target, fsType string) error {
	if err := stageMount(source, staging, fsType); err != nil {
		return err
	}
	return publishMounts(staging, target)
}

// mountFlags are the flags the driver adds to every filesystem mount.
const mountFlags = unix.MS_NODEV | unix.MS_NOSUID

// stageMount is the stage's mount(2): the filesystem at staging.
func stageMount(source, staging, fsType string) error {
	if err := unix.Mount(source, staging, fsType, mountFlags, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", source, staging, err)
	}
	return nil
}

// publishMounts are the publish's two: staging bound at target, and the
// bind mount remounted with the flags.
func publishMounts(staging, target string) error {
	if err := unix.Mount(staging, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", staging, target, err)
	}
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|mountFlags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", target, err)
	}
	return nil
}

// checkedMountSyscalls is the driver's mounts with the reads that must
// come before them, done bare: the volume's ownership read (the
// ZFS_IOC_OBJSET_STATS ioctl, nothing decoded), the mount table read before
// the stage and before the publish (what makes both idempotent), and for a
// zvol its device held open while it is mounted (the stage's Hold) and,
// through it, the grow check's reads of the device's size and of the ext4
// superblock. What it
// leaves out of the driver's work is the two gRPC calls, the decoding and
// the path checks.
func checkedMountSyscalls(zfsDevice int, dataset, source, staging, target, fsType string, cmd, dst []byte) error {
	if err := objsetStats(zfsDevice, dataset, cmd, dst); err != nil {
		return err
	}
	if _, err := os.ReadFile("/proc/self/mountinfo"); err != nil {
		return err
	}
	fd := -1
	if fsType != "zfs" {
		var err error
		if fd, err = unix.Open(source, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return &os.PathError{Op: "open", Path: source, Err: err}
		}
		defer unix.Close(fd)
	}
	if err := stageMount(source, staging, fsType); err != nil {
		return err
	}
	if fd >= 0 {
		// The grow check: the device's size and its filesystem's, through
		// the descriptor held.
		if _, err := unix.IoctlGetInt(fd, unix.BLKGETSIZE64); err != nil {
			return &os.PathError{Op: "ioctl BLKGETSIZE64", Path: source, Err: err}
		}
		if _, err := unix.Pread(fd, dst[:1024], 1024); err != nil {
			return &os.PathError{Op: "read", Path: source, Err: err}
		}
	}
	if _, err := os.ReadFile("/proc/self/mountinfo"); err != nil {
		return err
	}
	return publishMounts(staging, target)
}

// mountCommands makes the same mounts with the mount commands a person
// would run.
func (b *bench) mountCommands(ctx context.Context, source, staging, target, fsType string) error {
	for _, argv := range [][]string{
		{b.tools.mount, "-t", fsType, "-o", "nodev,nosuid", source, staging},
		{b.tools.mount, "--bind", staging, target},
		{b.tools.mount, "-o", "remount,bind,nodev,nosuid", target},
	} {
		if _, _, err := run(ctx, argv...); err != nil {
			return err
		}
	}
	return nil
}
