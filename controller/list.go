package controller

import (
	"context"
	"errors"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Pagination: entries are sorted by ID and a token is the last ID of the
// previous page, so a token is a position, not a cursor held in memory. It
// survives restarts, and entries added or removed between pages neither
// repeat nor vanish from the rest of the listing.

// ListVolumes implements csi.ControllerServer: one zfs list per page.
func (s *Server) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if err := s.checkToken(req.GetStartingToken(), req.GetMaxEntries(), false); err != nil {
		return nil, err
	}
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: s.cfg.ParentDatasets, Depth: 1, UserProps: s.props.All(), SkipMissing: true})
	if err != nil {
		return nil, err
	}
	var volumes []*csi.Volume
	for _, row := range rows {
		if s.isVolume(row) {
			volumes = append(volumes, s.csiVolume(row))
		}
	}
	page, next := paginate(volumes, (*csi.Volume).GetVolumeId, req.GetStartingToken(), req.GetMaxEntries())
	response := &csi.ListVolumesResponse{NextToken: next}
	for _, volume := range page {
		response.Entries = append(response.Entries, &csi.ListVolumesResponse_Entry{Volume: volume})
	}
	return response, nil
}

// ListSnapshots implements csi.ControllerServer: one zfs list per page, of
// one snapshot, of one volume's snapshots, or of all.
func (s *Server) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if err := s.checkToken(req.GetStartingToken(), req.GetMaxEntries(), true); err != nil {
		return nil, err
	}
	options := zfs.ListOptions{Roots: s.cfg.ParentDatasets, Depth: 2, Types: []zfs.Type{zfs.Snapshot},
		UserProps: s.props.All(), SkipMissing: true}
	switch {
	case req.GetSnapshotId() != "":
		snapshot, _, err := s.snapshotName(req.GetSnapshotId())
		if err != nil {
			return &csi.ListSnapshotsResponse{}, nil // an unknown ID lists nothing
		}
		options.Roots, options.Depth = []string{snapshot}, 0
	case req.GetSourceVolumeId() != "":
		dataset, err := s.volumeDataset(req.GetSourceVolumeId())
		if err != nil {
			return &csi.ListSnapshotsResponse{}, nil
		}
		options.Roots, options.Depth = []string{dataset}, 1
	}
	rows, err := s.zfs.List(ctx, options)
	if err != nil && !errors.Is(err, zfs.ErrNotFound) {
		return nil, err
	}
	var snapshots []*csi.Snapshot
	for _, row := range rows {
		if s.isSnapshot(row) {
			snapshots = append(snapshots, s.csiSnapshot(row))
		}
	}
	page, next := paginate(snapshots, (*csi.Snapshot).GetSnapshotId, req.GetStartingToken(), req.GetMaxEntries())
	response := &csi.ListSnapshotsResponse{NextToken: next}
	for _, snapshot := range page {
		response.Entries = append(response.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshot})
	}
	return response, nil
}

// checkToken refuses a negative page size (INVALID_ARGUMENT) and a token this
// node could not have issued (ABORTED: the CO restarts the listing).
func (s *Server) checkToken(token string, maxEntries int32, snapshots bool) error {
	if maxEntries < 0 {
		return invalid("max_entries must not be negative")
	}
	if token == "" {
		return nil
	}
	var nodeID string
	var err error
	if snapshots {
		nodeID, _, _, err = driver.ParseSnapshotID(token)
	} else {
		nodeID, _, err = driver.ParseVolumeID(token)
	}
	if err != nil || nodeID != s.cfg.NodeID {
		return status.Errorf(codes.Aborted, "starting_token %q was not issued by this plugin", token)
	}
	return nil
}

// paginate returns the entries after token, sorted by ID, at most maxEntries
// of them (0: all), and the token for the next page ("" on the last).
func paginate[T any](entries []T, id func(T) string, token string, maxEntries int32) ([]T, string) {
	sort.Slice(entries, func(i, j int) bool { return id(entries[i]) < id(entries[j]) })
	start := sort.Search(len(entries), func(i int) bool { return id(entries[i]) > token })
	if token == "" {
		start = 0
	}
	rest := entries[start:]
	if maxEntries == 0 || int(maxEntries) >= len(rest) {
		return rest, ""
	}
	page := rest[:maxEntries]
	return page, id(page[len(page)-1])
}
