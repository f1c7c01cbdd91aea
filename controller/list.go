package controller

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Pagination: entries are sorted by ID and a token is the last ID of the
// previous page, so a token is a position, not a cursor held in memory. It
// survives restarts, and entries added or removed between pages neither
// repeat nor vanish from the rest of the listing.

// ListVolumes implements csi.ControllerServer: one zfs list for the first
// page, and for a later page whose listing volumePages no longer holds.
func (s *Server) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if err := s.checkToken(req.GetStartingToken(), req.GetMaxEntries(), false); err != nil {
		return nil, err
	}
	changes := s.changes.Load() // before any list: a change it may miss moves the counter on
	volumes := s.pages.get(req.GetStartingToken(), changes)
	listed := volumes == nil
	if listed {
		rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: s.cfg.ParentDatasets, Depth: 1, UserProps: s.props.All(), SkipMissing: true})
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			if s.owner.LiveVolume(row) {
				volumes = append(volumes, s.csiVolume(row))
			}
		}
		sort.Slice(volumes, func(i, j int) bool { return volumes[i].GetVolumeId() < volumes[j].GetVolumeId() })
	}
	page, next := paginate(slices.Clone(volumes), (*csi.Volume).GetVolumeId, req.GetStartingToken(), req.GetMaxEntries())
	switch {
	case next == "":
		s.pages.drop()
	case listed:
		s.pages.put(volumes, changes)
	}
	response := &csi.ListVolumesResponse{NextToken: next}
	for _, volume := range page {
		response.Entries = append(response.Entries, &csi.ListVolumesResponse_Entry{Volume: volume})
	}
	return response, nil
}

// pageCacheFor is how long volumePages keeps a listing for the pages after
// the first; a CO asks for them one right after the other.
const pageCacheFor = 30 * time.Second

// volumePages keeps the listing a paged ListVolumes began with, so that the
// pages after the first cost no zfs command: a CO paging through 1,000
// volumes by 100 would otherwise have all 1,000 listed ten times. A page
// with a token is served from it while nothing this service did changed a
// volume since (Server.changes), for pageCacheFor; otherwise ZFS is listed
// again and the token finds its place, as ever. The last page drops it.
// Changes made with the zfs tools meanwhile are not seen by the pages of that
// listing, which the spec allows: the CO "SHALL NOT expect a consistent
// view" across pages.
type volumePages struct {
	mu      sync.Mutex
	volumes []*csi.Volume // every live volume, sorted by ID
	changes uint64        // Server.changes before the listing
	listed  time.Time
}

// get returns the kept listing for a later page (token set) if it is still
// good, or nil.
func (p *volumePages) get(token string, changes uint64) []*csi.Volume {
	p.mu.Lock()
	defer p.mu.Unlock()
	if token == "" || p.volumes == nil || p.changes != changes || time.Since(p.listed) > pageCacheFor {
		return nil
	}
	return p.volumes
}

func (p *volumePages) put(volumes []*csi.Volume, changes uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.volumes, p.changes, p.listed = volumes, changes, time.Now()
}

func (p *volumePages) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.volumes = nil
}

// volumesChanged moves the change counter on; every call that creates,
// deletes or alters a volume defers it, so that it counts once the change
// is done.
func (s *Server) volumesChanged() { s.changes.Add(1) }

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
		if s.owner.LiveSnapshot(row) {
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
		nodeID, _, _, err = rules.ParseSnapshotID(token)
	} else {
		nodeID, _, err = rules.ParseVolumeID(token)
	}
	if err != nil || nodeID != s.cfg.NodeID {
		return status.Errorf(codes.Aborted, "starting_token %q was not issued by this plugin", rules.Bounded(token))
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
