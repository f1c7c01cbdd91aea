package node

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// stageFormatted mounts a zvol's filesystem at the staging path, formatting
// the zvol first if, and only if, it is blank or holds what an interrupted
// format of this driver left (mountOrFormat), and grows the filesystem when
// the zvol is larger. Mounting comes first: a volume formatted before (the
// usual case) costs no probe.
func (s *Server) stageFormatted(ctx context.Context, plan stagePlan) error {
	volume, row, staging, fsType, options := plan.volume, plan.row, plan.staging, plan.fsType, plan.options
	device, err := s.waitForDevice(ctx, volume)
	if err != nil {
		return err
	}
	held, err := s.mounter.Hold(ctx, device)
	if err != nil {
		return fmt.Errorf("opening the zvol of volume %q: %w", volume.id, err)
	}
	defer held.Release()
	data := options.data
	if fsType == "xfs" && !contains(data, "nouuid") {
		// A clone carries its origin's UUID, which XFS refuses to mount twice.
		data = append(append([]string{}, data...), "nouuid")
	}
	mount := func() error { return s.mounter.Mount(device, staging, fsType, options.mountFlags(), data) }
	if err := s.mountOrFormat(ctx, volume, row, held, device, fsType, mount); err != nil {
		return mountRefused(err, options)
	}
	if err := s.growToDevice(ctx, volume, fsType, held, device, staging); err != nil {
		// Unmounted again so that the CO's retry grows it: a volume found
		// staged is not looked at again.
		if unmountErr := s.mounter.Unmount(staging); unmountErr != nil {
			s.log.Warn().Err(unmountErr).Str("staging", staging).Msg("taking back a stage whose filesystem did not grow")
		}
		return fmt.Errorf("growing the %s on %s to its zvol: %w", fsType, device, err)
	}
	return nil
}

// mountOrFormat mounts the zvol's filesystem, formatting it first only when
// nothing can be lost.
//
// A zvol made for mount access is written by nobody but this driver's mkfs
// and the mounts of the filesystem it made: block access to it is refused
// (serves). So what lies on such a zvol before its filesystem is finished
// is the work of an mkfs of ours that the CO's deadline cut off, and the
// filesystems mark that state themselves (Superblock.Complete): mke2fs and
// mkfs.btrfs write the mark blkid recognises last, so blkid finds the zvol
// blank and it is formatted as a blank one is; mkfs.xfs marks its
// superblock in progress until done, which blkid recognises as XFS and the
// kernel refuses to mount, so it is formatted again over it (mkfs -f). A
// filesystem nobody finished was never mounted and holds no data.
//
// Never formatted: a finished filesystem that does not mount (the error is
// the answer), a zvol holding anything else blkid recognises, and any zvol
// cloned or copied from another (its blocks are its origin's, whatever they
// are).
func (s *Server) mountOrFormat(ctx context.Context, volume volumeRef, row zfs.Dataset, held Held, device, fsType string, mount func() error) error {
	mountErr := mount()
	if mountErr == nil {
		return nil
	}
	found, err := s.mounter.Probe(ctx, device)
	overwrite := false
	switch {
	case err != nil:
		return fmt.Errorf("mounting %s failed (%v), and so did probing it: %w", device, mountErr, err)
	case found == fsType && fsType == "btrfs" && errors.Is(mountErr, unix.EEXIST) && madeFromSource(row, s.props):
		// A clone's btrfs has its origin's UUID, and btrfs takes it for
		// another device of the origin's filesystem when that is mounted.
		s.log.Info().Str("volume_id", volume.id).Str("device", device).Msg("giving a cloned btrfs a new UUID")
		if err := s.mounter.NewUUID(ctx, fsType, device); err != nil {
			return fmt.Errorf("mounting %s failed (%v), and so did giving it a new UUID: %w", device, mountErr, err)
		}
		return mount()
	case found == fsType && !unfinished(held, fsType):
		return mountErr
	case found == fsType && madeFromSource(row, s.props):
		return status.Errorf(codes.FailedPrecondition, "volume %q was made from %s but its device %s holds an unfinished %s "+
			"(an mkfs of its origin was cut off); it is left as it is", volume.id, sourceOf(row, s.props), device, fsType)
	case found == fsType:
		overwrite = true
	case found != "":
		return status.Errorf(codes.FailedPrecondition, "volume %q should hold %s but its device %s holds %s; it is left as it is",
			volume.id, fsType, device, found)
	case madeFromSource(row, s.props):
		return status.Errorf(codes.FailedPrecondition, "volume %q was made from %s but its device %s holds no filesystem; "+
			"it is not formatted, as it may hold data written as raw blocks", volume.id, sourceOf(row, s.props), device)
	}
	s.log.Info().Str("volume_id", volume.id).Str("device", device).Str("fstype", fsType).Bool("over_unfinished", overwrite).
		Msg("formatting zvol")
	if err := s.mounter.Format(ctx, device, fsType, overwrite); err != nil {
		return err
	}
	return mount()
}

// unfinished reports whether the device holds a filesystem of fsType whose
// mkfs did not finish; a superblock that cannot be read is not taken for
// one.
func unfinished(device Held, fsType string) bool {
	superblock, err := device.Superblock(fsType)
	return err == nil && !superblock.Complete
}

// growSlack is how much larger than its filesystem a zvol must be for stage
// to grow the filesystem: mke2fs leaves off a last block group too small for
// its own metadata and mkfs.xfs a last allocation group under 16 MiB, which
// the resize tools cannot use either, and stage must not run them on every
// first mount for nothing.
const growSlack = 32 << 20

// growToDevice grows the filesystem to its zvol when the zvol is larger, as
// a restore or clone into a larger volume is: the spec wants the volume's
// capacity usable once it is published, and no NodeExpandVolume follows a
// CreateVolume. Size and superblock are read through the descriptor stage
// holds on the device node; what the superblock says of the size does not
// change when the filesystem is mounted.
func (s *Server) growToDevice(ctx context.Context, volume volumeRef, fsType string, held Held, device, staging string) error {
	size, err := held.Size()
	if err != nil {
		return err
	}
	superblock, err := held.Superblock(fsType)
	if err != nil {
		return err
	}
	if size <= superblock.Size+growSlack {
		return nil
	}
	s.log.Info().Str("volume_id", volume.id).Str("device", device).Uint64("filesystem_bytes", superblock.Size).
		Uint64("device_bytes", size).Msg("growing the filesystem to its zvol")
	return s.mounter.Resize(ctx, fsType, device, staging)
}

// mountRefused turns the kernel's EINVAL for a filesystem that was asked
// for options of its own into INVALID_ARGUMENT: it refused them (OpenZFS
// ignores unknown options instead, hence zfsDataOptions).
func mountRefused(err error, options mountOptions) error {
	if errors.Is(err, unix.EINVAL) && len(options.data) > 0 {
		return invalid("the kernel refused the mount options %v (the kernel log says why): %v", options.data, err)
	}
	return err
}

// madeFromSource reports whether a volume was cloned or copied from another.
func madeFromSource(row zfs.Dataset, props rules.UserProps) bool {
	return row.Origin != "" || row.User[props.Source] != ""
}

func sourceOf(row zfs.Dataset, props rules.UserProps) string {
	if source := row.User[props.Source]; source != "" {
		return source
	}
	return row.Origin
}
