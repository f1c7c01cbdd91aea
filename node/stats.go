package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

// NodeGetVolumeStats implements csi.NodeServer: statfs(2) of a filesystem
// (bytes and inodes), the size of a raw block device (bytes). The path must
// be where this volume is staged or published. It skips the lock: it only
// reads, and the CO polls it while other calls on the volume may run.
func (s *Server) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "volume_path", req.GetVolumePath()); err != nil {
		return nil, err
	}
	volume, err := s.parseVolume(req.GetVolumeId(), ownNode)
	if err != nil {
		return nil, err
	}
	mount, recognise, err := s.volumeMountAt(volume, req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	if recognise.IsDeviceBind(mount) {
		size, err := s.mounter.DeviceSize(mount.MountPoint)
		if err != nil {
			return nil, err
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: rules.SizeBytes(size)}}}, nil
	}
	stats, err := s.mounter.Statfs(mount.MountPoint)
	if err != nil {
		return nil, err
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: rules.SizeBytes(stats.TotalBytes), Available: rules.SizeBytes(stats.AvailableBytes), Used: rules.SizeBytes(stats.UsedBytes)},
		{Unit: csi.VolumeUsage_INODES, Total: rules.SizeBytes(stats.TotalInodes), Available: rules.SizeBytes(stats.FreeInodes), Used: rules.SizeBytes(stats.UsedInodes)},
	}}, nil
}

// volumeMountAt finds the volume's mount at a path where it is staged or
// published: the path itself, or the device file in a raw block staging
// directory. A path that does not exist, or holds no mount of this volume,
// is NOT_FOUND.
func (s *Server) volumeMountAt(volume volumeRef, path string) (MountInfo, VolumeMounts, error) {
	if !filepath.IsAbs(path) {
		// Nothing is mounted at a relative path.
		return MountInfo{}, VolumeMounts{}, status.Errorf(codes.NotFound, "volume %q is not at %s: not an absolute path", volume.id, path)
	}
	path, err := s.hostPath("volume_path", path)
	if err != nil {
		return MountInfo{}, VolumeMounts{}, err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return MountInfo{}, VolumeMounts{}, status.Errorf(codes.NotFound, "%s does not exist", path)
	} else if err != nil {
		return MountInfo{}, VolumeMounts{}, err
	}
	mounts, err := s.mounter.Mounts()
	if err != nil {
		return MountInfo{}, VolumeMounts{}, err
	}
	recognise, err := s.mountsOf(volume)
	if err != nil {
		return MountInfo{}, VolumeMounts{}, err
	}
	for _, candidate := range []string{path, filepath.Join(path, blockStagingFile)} {
		if mount := MountAt(mounts, candidate); mount != nil && recognise.Shows(*mount) {
			return *mount, recognise, nil
		}
	}
	return MountInfo{}, VolumeMounts{}, status.Errorf(codes.NotFound, "volume %q is not staged or published at %s", volume.id, path)
}
