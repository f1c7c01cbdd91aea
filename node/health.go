package node

import (
	"context"
	"errors"
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// poolStatus reads a pool's status; a pool that is gone is unreachable.
func (s *Server) poolStatus(ctx context.Context, pool string) (zfs.PoolStatus, error) {
	status, err := s.zfs.PoolStatus(ctx, pool)
	if errors.Is(err, zfs.ErrPoolNotFound) {
		return zfs.PoolStatus{Name: pool, State: "UNAVAIL"}, nil
	}
	return status, err
}

// NodeGetVolumeHealth implements csi.NodeServer: the volume's pool (one
// zpool status), its dataset (one zfs list, skipped when the pool cannot be
// read), its zvol's device, and the volume's mounts at the paths the CO
// names. It skips the lock, as NodeGetVolumeStats does: it only reads.
func (s *Server) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	volume, err := s.parseVolume(req.GetVolumeId(), ownNode)
	if err != nil {
		return nil, err
	}
	poolStatus, err := s.poolStatus(ctx, zfs.PoolOf(volume.dataset))
	if err != nil {
		return nil, err
	}
	entries := rules.PoolVolumeHealth(poolStatus)
	respond := func() (*csi.NodeGetVolumeHealthResponse, error) {
		return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: volume.id, HealthStatuses: entries}}, nil
	}
	if !rules.PoolReachable(poolStatus) {
		return respond()
	}
	row, err := zfs.Get(ctx, s.zfs, volume.dataset, s.props.All())
	switch {
	case errors.Is(err, zfs.ErrNotFound):
		// The spec's table: a volume that does not exist is NOT_FOUND, not
		// a health entry (the pool is readable, so ZFS would know it).
		return nil, volumeNotFound(volume.id, "its dataset does not exist")
	case err != nil:
		return nil, err
	case !s.owner.LiveVolume(row):
		return nil, volumeNotFound(volume.id, "it is not a live volume of "+s.cfg.DriverName)
	}
	recognise, err := s.mountsOf(volume)
	if err != nil {
		return nil, err
	}
	if row.Type == zfs.Volume && recognise.Device == "" {
		entries = append(entries, rules.VolumeHealthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, "DeviceMissing",
			"its zvol has no device %s (udev did not make it, or volmode hides it)", volume.devicePath()))
	}
	mounts, err := s.mounter.Mounts()
	if err != nil {
		return nil, err
	}
	for _, check := range []struct{ field, path, reason string }{
		{"staging_target_path", req.GetStagingTargetPath(), "StagingMountMissing"},
		{"volume_publish_path", req.GetVolumePublishPath(), "PublishMountMissing"},
	} {
		if check.path == "" {
			continue
		}
		path, err := s.hostPath(check.field, check.path)
		if err != nil {
			return nil, err
		}
		candidates := []string{path}
		if check.reason == "StagingMountMissing" {
			candidates = append(candidates, filepath.Join(path, blockStagingFile))
		}
		if !slices.ContainsFunc(candidates, func(candidate string) bool {
			mount := MountAt(mounts, candidate)
			return mount != nil && recognise.Shows(*mount)
		}) {
			entries = append(entries, rules.VolumeHealthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, check.reason,
				"the volume is not mounted at %s (unmounted outside the CO, or never staged or published there)", path))
		}
	}
	return respond()
}

// NodeGetStorageHealth implements csi.NodeServer: each pool that holds a
// parent dataset, as `zpool status` sees it (one command per pool). The spec
// allows one entry per (status, reason): pools in the same condition share
// one, whose message says it of each.
func (s *Server) NodeGetStorageHealth(ctx context.Context, _ *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	var pools []string
	response := &csi.NodeGetStorageHealthResponse{}
	add := func(entry *csi.NodeGetStorageHealthResponse_StorageBackendHealth) {
		for _, seen := range response.BackendHealth {
			if seen.Status == entry.Status && seen.Reason == entry.Reason {
				seen.Message += "; " + entry.Message
				return
			}
		}
		response.BackendHealth = append(response.BackendHealth, entry)
	}
	for _, parent := range s.cfg.ParentDatasets {
		pool := zfs.PoolOf(parent)
		if slices.Contains(pools, pool) {
			continue
		}
		pools = append(pools, pool)
		poolStatus, err := s.poolStatus(ctx, pool)
		if err != nil {
			return nil, err
		}
		for _, entry := range rules.PoolStorageHealth(poolStatus) {
			add(entry)
		}
	}
	return response, nil
}
