package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
)

// NodeStageVolume implements csi.NodeServer. It takes the volume's lock: it
// changes the volume's mounts, and a concurrent unstage or publish would
// see them half made.
//
// On the happy path it reads the volume once (the ownership guard:
// zfs.Inspect, an ioctl, no zfs command unless that read cannot answer) and
// makes one mount(2): the dataset at the staging path, the zvol's
// filesystem there (after mkfs on first use), or the zvol's device node onto
// a file in the staging directory. A volume already staged there reads
// nothing.
func (s *Server) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	capability := req.GetVolumeCapability()
	options, err := checkCapability(capability)
	if err != nil {
		return nil, err
	}
	volume, recognise, release, err := s.openVolume(req.GetVolumeId(), ownNode)
	if err != nil {
		return nil, err
	}
	defer release()
	staging, err := s.hostPath("staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	mounts, err := s.mounter.Mounts()
	if err != nil {
		return nil, err
	}
	if staged, err := checkStaged(mounts, recognise, staging, capability, options); staged || err != nil {
		return &csi.NodeStageVolumeResponse{}, err
	}

	row, err := s.lookupVolume(ctx, volume, req.GetVolumeContext())
	if err != nil {
		return nil, err
	}
	kind, fsType := s.owner.Kind(row)
	if problem := driver.KindServes(kind, fsType, capability); problem != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q: %s", volume.id, problem)
	}
	if err := s.loadKey(ctx, volume, row, req.GetSecrets()); err != nil {
		return nil, err
	}
	if err := makeStagingDir(staging, capability.GetBlock() != nil); err != nil {
		return nil, err
	}
	switch {
	case capability.GetBlock() != nil:
		err = s.stageBlock(ctx, volume, staging)
	case kind == driver.KindDataset:
		err = s.mounter.Mount(volume.dataset, staging, "zfs", options.mountFlags(), options.data)
	default:
		err = s.stageFormatted(ctx, volume, row, staging, fsType, options)
	}
	if err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// checkStaged looks at what is mounted at the staging path: nothing (false),
// this volume as asked (true), or something else (ALREADY_EXISTS, the
// spec's code for a staged volume that is incompatible with the request).
func checkStaged(mounts []MountInfo, recognise VolumeMounts, staging string, capability *csi.VolumeCapability, options mountOptions) (bool, error) {
	fsMount := MountAt(mounts, staging)
	blockMount := MountAt(mounts, filepath.Join(staging, blockStagingFile))
	existing := fsMount
	if existing == nil {
		existing = blockMount
	}
	if existing == nil {
		return false, nil
	}
	conflict := func(format string, args ...any) (bool, error) {
		return false, status.Errorf(codes.AlreadyExists, "staging path %s: "+format, append([]any{staging}, args...)...)
	}
	block := recognise.IsDeviceBind(*existing)
	switch {
	case !recognise.Shows(*existing):
		return conflict("it holds another mount (%s from %s)", existing.FSType, existing.Source)
	case block != (capability.GetBlock() != nil):
		return conflict("the volume is staged for %s access, the request asks for %s", accessName(block), accessName(!block))
	case block:
		return true, nil
	}
	if requested := requestedFSType(capability); existing.FSType != requested {
		return conflict("the volume is staged as %s, the request asks for %s", existing.FSType, requested)
	}
	if problem := options.mismatch(*existing); problem != "" {
		return conflict("the volume is staged but %s", problem)
	}
	return true, nil
}

func accessName(block bool) string {
	if block {
		return "block"
	}
	return "mount"
}

// makeStagingDir makes the staging directory, or checks the one there.
// A filesystem volume is mounted over it, so it must be empty: a caller may
// name any directory below the roots, another workload's among them, and a
// mount there would hide its files and take in what the host writes there
// next. A raw block volume's device is bound onto a file in it, which may
// be there already (a stage cut off before its bind leaves it; stageBlock
// checks that it is empty), and nothing else may. A retry of a stage that
// succeeded never comes here: checkStaged answers it.
func makeStagingDir(staging string, block bool) error {
	if err := makeDirs(filepath.Dir(staging)); err != nil {
		return err
	}
	if !block {
		_, err := makeMountPoint(staging, false)
		return err
	}
	if err := makeDirs(staging); err != nil {
		return err
	}
	fd, err := openBeneath(staging, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return &os.PathError{Op: "open", Path: staging, Err: err}
	}
	names, err := namesIn(fd, 2)
	if err != nil {
		return &os.PathError{Op: "read", Path: staging, Err: err}
	}
	if len(names) > 1 || len(names) == 1 && names[0] != blockStagingFile {
		return status.Errorf(codes.FailedPrecondition, "staging path %s holds files the driver did not make; a raw block "+
			"volume is staged only in an empty directory: remove them, or name another path", staging)
	}
	return nil
}

// stageBlock bind-mounts the zvol's device node onto a file in the staging
// directory: the mark that the volume passed the ownership guard, from which
// publish binds it on.
func (s *Server) stageBlock(ctx context.Context, volume volumeRef, staging string) error {
	device, err := s.waitForDevice(ctx, volume)
	if err != nil {
		return err
	}
	file, err := s.hostPath("staging_target_path", filepath.Join(staging, blockStagingFile))
	if err != nil {
		return err
	}
	made, err := makeMountPoint(file, true)
	if err != nil {
		return err
	}
	if err := s.mounter.Bind(device, file); err != nil {
		if made {
			_ = removeMountPoint(file)
		}
		return err
	}
	return nil
}

// NodeUnstageVolume implements csi.NodeServer: it unmounts whatever of the
// volume is mounted at the staging path, and then at the file in it a raw
// block volume was bound onto (removing that file); nothing mounted is
// success. The staging directory is the CO's and stays. It takes the
// volume's lock, as stage does. No zfs command runs.
//
// The staging mount goes first, and only then is anything below the staging
// path looked at: while a filesystem volume is mounted there, staging/zvol
// is a name in the workload's own files (a link it made must not wedge the
// teardown, ARCHITECTURE.md decision 13).
func (s *Server) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	_, recognise, release, err := s.openVolume(req.GetVolumeId(), anyNode)
	if err != nil {
		return nil, err
	}
	defer release()
	staging, err := s.hostPath("staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	removed, err := s.unmountAll(recognise, staging)
	if err != nil {
		return nil, err
	}
	if removed != nil {
		// A filesystem staging is never also a raw block one: the file is
		// not looked for.
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	file, err := s.hostPath("staging_target_path", filepath.Join(staging, blockStagingFile))
	if err != nil {
		return nil, err
	}
	removed, err = s.unmountAll(recognise, file)
	if err != nil {
		return nil, err
	}
	if removed != nil {
		if err := removeMountPoint(file); err != nil {
			return nil, err
		}
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unmountAll unmounts the volume's mounts stacked at path, refusing to touch
// a mount of anything else. It returns the last mount it removed, if any.
func (s *Server) unmountAll(recognise VolumeMounts, path string) (*MountInfo, error) {
	var removed *MountInfo
	for range maxStackedMounts {
		mounts, err := s.mounter.Mounts()
		if err != nil {
			return removed, err
		}
		mount := MountAt(mounts, path)
		if mount == nil {
			return removed, nil
		}
		if !recognise.Remains(*mount) {
			return removed, status.Errorf(codes.FailedPrecondition,
				"%s holds a mount of something else (%s from %s, root %s); it is left alone", path, mount.FSType, mount.Source, mount.Root)
		}
		if err := s.mounter.Unmount(path); err != nil {
			return removed, err
		}
		removed = mount
	}
	return removed, fmt.Errorf("%s: still mounted after %d unmounts", path, maxStackedMounts)
}

// maxStackedMounts bounds the unmounts of one path: a few mounts stack up
// when a call is cut off between mount and reply and the CO repeats it.
const maxStackedMounts = 16
