package node

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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
