package controller

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// poolHealth reads a pool's status (one zpool status) as volume health; a
// pool that is gone is unreachable.
func (s *Server) poolHealth(ctx context.Context, pool string) (zfs.PoolStatus, []*csi.VolumeHealth_VolumeHealthEntry, error) {
	poolStatus, err := s.zfs.PoolStatus(ctx, pool)
	if errors.Is(err, zfs.ErrPoolNotFound) {
		poolStatus = zfs.PoolStatus{Name: pool, State: "UNAVAIL"}
	} else if err != nil {
		return zfs.PoolStatus{}, nil, err
	}
	return poolStatus, rules.PoolVolumeHealth(poolStatus), nil
}

// ControllerGetVolumeHealth implements csi.ControllerServer: the volume's
// pool as `zpool status` sees it, and whether its dataset is still there
// (one zpool status and one zfs list; the list is skipped when the pool
// cannot be read).
func (s *Server) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume_id is required")
	}
	dataset, err := s.volumeDataset(req.GetVolumeId())
	if err != nil {
		return nil, volumeNotFound(req.GetVolumeId(), err)
	}
	poolStatus, entries, err := s.poolHealth(ctx, zfs.PoolOf(dataset))
	if err != nil {
		return nil, err
	}
	if rules.PoolReachable(poolStatus) {
		row, err := zfs.Get(ctx, s.zfs, dataset, s.props.All())
		switch {
		case errors.Is(err, zfs.ErrNotFound):
			// The spec's table: a volume that does not exist is NOT_FOUND,
			// not a health entry; ZFS can tell, the pool being readable.
			return nil, volumeNotFound(req.GetVolumeId(), err)
		case err != nil:
			return nil, err
		case !s.owner.LiveVolume(row):
			return nil, volumeNotFound(req.GetVolumeId(), zfs.ErrNotFound)
		}
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: req.GetVolumeId(), HealthStatuses: entries}}, nil
}

// ControllerListVolumeHealth implements csi.ControllerServer: the volumes
// with an adverse condition, which on one node are the volumes of unhealthy
// pools (one zpool status per pool; one zfs list only when a pool is
// unhealthy). A volume whose dataset was destroyed outside the driver is
// not listed (nothing names it any more; ControllerGetVolumeHealth answers
// NOT_FOUND for it). The token is the offset of the next entry.
func (s *Server) ControllerListVolumeHealth(ctx context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalid("max_entries must not be negative")
	}
	start := 0
	if token := req.GetStartingToken(); token != "" {
		offset, err := strconv.Atoi(token)
		if err != nil || offset < 0 {
			return nil, status.Errorf(codes.Aborted, "starting_token %q was not issued by this plugin", rules.Bounded(token))
		}
		start = offset
	}
	byPool := map[string][]*csi.VolumeHealth_VolumeHealthEntry{}
	for _, parent := range s.cfg.ParentDatasets {
		pool := zfs.PoolOf(parent)
		if _, seen := byPool[pool]; seen {
			continue
		}
		_, entries, err := s.poolHealth(ctx, pool)
		if err != nil {
			return nil, err
		}
		byPool[pool] = entries
	}
	var all []*csi.VolumeHealth
	var roots []string
	for _, parent := range s.cfg.ParentDatasets {
		if len(byPool[zfs.PoolOf(parent)]) > 0 {
			roots = append(roots, parent)
		}
	}
	if len(roots) > 0 {
		rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: roots, Depth: 1, Types: []zfs.Type{zfs.Filesystem, zfs.Volume},
			UserProps: s.props.All(), SkipMissing: true, SkipSuspended: true})
		if err != nil && !errors.Is(err, zfs.ErrNotFound) {
			return nil, err
		}
		for _, row := range rows {
			if s.owner.LiveVolume(row) {
				all = append(all, &csi.VolumeHealth{VolumeId: rules.VolumeID(s.cfg.NodeID, row.Name), HealthStatuses: byPool[zfs.PoolOf(row.Name)]})
			}
		}
	}
	slices.SortFunc(all, func(a, b *csi.VolumeHealth) int {
		if a.GetVolumeId() < b.GetVolumeId() {
			return -1
		}
		if a.GetVolumeId() > b.GetVolumeId() {
			return 1
		}
		return 0
	})
	if start > len(all) {
		return nil, status.Errorf(codes.Aborted, "starting_token %q is past the %d entries", rules.Bounded(req.GetStartingToken()), len(all))
	}
	page := all[start:]
	response := &csi.ControllerListVolumeHealthResponse{}
	if limit := int(req.GetMaxEntries()); limit > 0 && len(page) > limit {
		page = page[:limit]
		response.NextToken = strconv.Itoa(start + limit)
	}
	response.Entries = page
	return response, nil
}
