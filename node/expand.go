package node

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

// NodeExpandVolume implements csi.NodeServer: it grows a zvol's filesystem
// to the size ControllerExpandVolume gave the zvol, online (resize2fs,
// xfs_growfs, btrfs filesystem resize). A dataset needs nothing (its
// refquota is its size) and neither does a raw block device. It takes the
// volume's lock: a resize must not race an unstage.
func (s *Server) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "volume_path", req.GetVolumePath()); err != nil {
		return nil, err
	}
	if capability := req.GetVolumeCapability(); capability != nil {
		if problem := rules.CapabilityProblem(capability); problem != "" {
			return nil, invalid("%s", problem)
		}
	}
	if req.GetCapacityRange().GetRequiredBytes() < 0 || req.GetCapacityRange().GetLimitBytes() < 0 {
		return nil, status.Error(codes.OutOfRange, "capacity_range bytes must not be negative")
	}
	volume, err := s.parseVolume(req.GetVolumeId(), ownNode)
	if err != nil {
		return nil, err
	}
	release, err := s.lock(volume)
	if err != nil {
		return nil, err
	}
	defer release()
	mount, recognise, err := s.volumeMountAt(volume, req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	if capability := req.GetVolumeCapability(); capability != nil {
		// The spec's code for a capability the volume does not have is
		// INVALID_ARGUMENT here, where stage and publish answer
		// FAILED_PRECONDITION; the rule is the same.
		kind, fsType := mountedKind(recognise, mount, nil)
		if problem := rules.KindServes(kind, fsType, capability); problem != "" {
			return nil, invalid("volume %q: %s", volume.id, problem)
		}
	}
	if mount.FSType == "zfs" {
		return &csi.NodeExpandVolumeResponse{}, nil
	}
	size, err := s.mounter.DeviceSize(volume.devicePath())
	if err != nil {
		return nil, err
	}
	if required := req.GetCapacityRange().GetRequiredBytes(); uint64(required) > size {
		return nil, status.Errorf(codes.OutOfRange, "the zvol has %d bytes, fewer than the %d required: ControllerExpandVolume grows it first",
			size, required)
	}
	if !recognise.IsDeviceBind(mount) {
		if err := s.mounter.Resize(ctx, mount.FSType, mount.Source, mount.MountPoint); err != nil {
			return nil, err
		}
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: rules.SizeBytes(size)}, nil
}
