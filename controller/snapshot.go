package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// snapshotName resolves a snapshot ID to the ZFS snapshot and its dataset,
// or NOT_FOUND.
func (s *Server) snapshotName(snapshotID string) (snapshot, dataset string, err error) {
	snapshot, dataset, err = s.cfg.SnapshotName(snapshotID)
	if err != nil {
		return "", "", status.Errorf(codes.NotFound, "snapshot %q does not exist here: %v", rules.Bounded(snapshotID), markOtherNode(err))
	}
	return snapshot, dataset, nil
}

// CreateSnapshot implements csi.ControllerServer in one zfs command: a
// guarded snapshot (zfs.Guarded) that checks the source's ownership and that
// the CSI name is free on it, and on the snapshot snapshotIndex says holds the
// name, in the transaction that makes it. Before the index has had its first
// full listing, and on a ZFS whose channel programs cannot set properties
// (no zfs.sync.set_prop), it is a zfs list and a zfs snapshot instead.
func (s *Server) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if problem := rules.SpecNameProblem(req.GetName()); problem != "" {
		return nil, invalid("%s", problem)
	}
	if req.GetSourceVolumeId() == "" {
		return nil, invalid("source_volume_id is required")
	}
	for key := range req.GetParameters() {
		if !strings.HasPrefix(key, kubernetesPrefix) {
			return nil, invalid("unknown snapshot parameter %q: snapshots take none", rules.Bounded(key))
		}
	}
	dataset, err := s.volumeDataset(req.GetSourceVolumeId())
	if err != nil {
		return nil, volumeNotFound(req.GetSourceVolumeId(), err)
	}
	// A snapshot lives where its volume does.
	if err := s.checkTopology(req.GetAccessibilityRequirements()); err != nil {
		return nil, err
	}
	release, err := s.inflight.Acquire("snapshot-name/"+req.GetName(), datasetLock(dataset))
	if err != nil {
		return nil, err
	}
	defer release()

	snapshot := dataset + "@" + s.namer.SnapshotComponent(req.GetName())
	if taken, ready := s.snapshots.lookup(req.GetName()); ready && !s.noGuardedSnapshots.Load() {
		response, err := s.snapshotGuarded(ctx, req, snapshot, taken)
		if !errors.Is(err, zfs.ErrUnsupported) {
			return response, err
		}
		s.noGuardedSnapshots.Store(true)
		s.log.Info().Msg("this ZFS has no zfs.sync.set_prop (OpenZFS < 2.2): CreateSnapshot lists, then snapshots")
	}
	return s.snapshotListed(ctx, req, dataset, snapshot)
}

// snapshotGuarded is CreateSnapshot as one guarded zfs command. taken is the
// snapshot the index says carries the name, if any.
func (s *Server) snapshotGuarded(ctx context.Context, req *csi.CreateSnapshotRequest, snapshot, taken string) (*csi.CreateSnapshotResponse, error) {
	// The index names the snapshot that carries the name, on this volume
	// (Present) or another (Taken); the program reads only that one and the
	// requested name, never all the volume's snapshots.
	var others []string
	if taken != "" && taken != snapshot {
		others = []string{taken}
	}
	epoch := s.sources.begin()
	result, err := s.zfs.SnapshotGuarded(ctx, zfs.SnapshotRequest{Name: snapshot,
		Properties: map[string]string{s.props.SnapshotName: rules.EncodeName(req.GetName())},
		Guard:      s.owner.VolumeGuard(),
		Unique:     s.props.SnapshotName, Others: others, Report: s.props.FSType,
		SizeProperty: s.props.Size, Internal: s.props.Internal, Pending: s.props.Snapshotting})
	switch {
	case errors.Is(err, zfs.ErrNotFound):
		return nil, volumeNotFound(req.GetSourceVolumeId(), err)
	case errors.Is(err, zfs.ErrExists):
		return nil, notThisSnapshot(snapshot, req.GetName())
	case err != nil:
		return nil, err
	}
	if taken != "" && result.Outcome != zfs.Taken {
		s.snapshots.forget(req.GetName(), taken) // gone, or renamed by hand
	}
	switch result.Outcome {
	case zfs.NotOwned:
		return nil, s.notSnapshotted(ctx, req.GetSourceVolumeId(), snapshot[:strings.IndexByte(snapshot, '@')])
	case zfs.Taken:
		return nil, takenElsewhere(req.GetName(), result.Snapshot.Name)
	}
	s.snapshots.add(req.GetName(), result.Snapshot.Name)
	// The program read the volume in its transaction: what a clone of the
	// snapshot needs to know, without a zfs list.
	described := result.Snapshot
	described.User = result.Volume.User
	s.sources.remember(epoch, s.snapshotSource(described, &result.Volume))
	return &csi.CreateSnapshotResponse{Snapshot: s.csiSnapshot(result.Snapshot)}, nil
}

// takenElsewhere is CreateSnapshot's answer when another volume's snapshot
// carries the CSI name.
func takenElsewhere(name, other string) error {
	return status.Errorf(codes.AlreadyExists, "snapshot %q already exists, of another volume (%s)", rules.Bounded(name), other)
}

// notThisSnapshot is CreateSnapshot's answer when the ZFS snapshot the name
// maps to exists without carrying the name.
func notThisSnapshot(snapshot, name string) error {
	return status.Errorf(codes.AlreadyExists, "%s exists and is not CSI snapshot %q; it is left alone", snapshot, rules.Bounded(name))
}

// snapshotListed is CreateSnapshot as a zfs list (snapshotCandidates), then
// the guarded snapshot (where programs set properties: two commands, as the plain
// snapshot it replaces), or a zfs snapshot and a read of it.
func (s *Server) snapshotListed(ctx context.Context, req *csi.CreateSnapshotRequest, dataset, snapshot string) (*csi.CreateSnapshotResponse, error) {
	rows, err := s.snapshotCandidates(ctx, dataset, req.GetName())
	if err != nil {
		return nil, err
	}
	var source *zfs.Dataset
	for i, row := range rows {
		if row.Name == dataset && s.owner.LiveVolume(row) {
			source = &rows[i]
		}
		// Before the source's state: a retry after the volume was deleted
		// (kept by this very snapshot) answers with what it cut.
		if s.owner.LiveSnapshot(row) && rules.DecodeName(row.User[s.props.SnapshotName]) == req.GetName() {
			if !strings.HasPrefix(row.Name, dataset+"@") {
				return nil, takenElsewhere(req.GetName(), row.Name)
			}
			return &csi.CreateSnapshotResponse{Snapshot: s.csiSnapshot(row)}, nil
		}
	}
	if source == nil {
		return nil, volumeNotFound(req.GetSourceVolumeId(), zfs.ErrNotFound)
	}
	if s.owner.Retained(*source) {
		return nil, retainedRefusal(source.Name, "snapshots")
	}
	if !s.noGuardedSnapshots.Load() {
		// The listing found the name free everywhere: the program needs no
		// others. It takes over only its own interrupted run's leftover, and
		// reports the creation time ZFS recorded.
		response, err := s.snapshotGuarded(ctx, req, snapshot, "")
		if !errors.Is(err, zfs.ErrUnsupported) {
			return response, err
		}
		s.noGuardedSnapshots.Store(true)
		s.log.Info().Msg("this ZFS has no zfs.sync.set_prop (OpenZFS < 2.2): CreateSnapshot lists, then snapshots")
	}
	// Before 2.2 `zfs snapshot -o` sets the properties with the snapshot, so
	// no run leaves one bare; one at the name is someone else's. The dataset
	// lock keeps expansions of the volume off until it is made.
	properties := map[string]string{s.props.SnapshotName: rules.EncodeName(req.GetName()), s.props.Size: bytesString(capacity(*source))}
	err = s.zfs.Snapshot(ctx, snapshot, properties)
	if errors.Is(err, zfs.ErrExists) {
		return nil, notThisSnapshot(snapshot, req.GetName())
	}
	if err != nil {
		return nil, err
	}
	s.snapshots.add(req.GetName(), snapshot)
	// creation_time is what ZFS recorded (it stamps the snapshot when its
	// transaction group syncs), so that this answer and every later
	// GetSnapshot and ListSnapshots agree: one zfs list more, on ZFS before
	// 2.2 only, where the guarded program that reports it cannot run.
	row, err := zfs.Get(ctx, s.zfs, snapshot, s.props.All())
	if err != nil {
		return nil, err
	}
	return &csi.CreateSnapshotResponse{Snapshot: s.csiSnapshot(row)}, nil
}

// snapshotCandidates lists what CreateSnapshot decides on: the source
// volume, its snapshots, and the snapshots of the volume snapshotIndex says
// holds the name; or, before the index has had a full listing, everything
// under the parents (which then fills the index). An index entry that the
// listing does not confirm is dropped.
// listParents lists everything under the parents: volumes and their
// snapshots. A parent in a pool whose I/O is suspended is left out, so that
// one stuck pool stops no work on the others; the snapshot index takes the
// listing as the whole truth only when every parent is in it.
func (s *Server) listParents(ctx context.Context) ([]zfs.Dataset, error) {
	listedFrom := time.Now()
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: s.cfg.ParentDatasets, Depth: 2,
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}, UserProps: s.props.All(),
		SkipMissing: true, SkipSuspended: true})
	if err != nil {
		return nil, err
	}
	listed := 0
	for _, row := range rows {
		if slices.Contains(s.cfg.ParentDatasets, row.Name) {
			listed++
		}
	}
	if listed == len(s.cfg.ParentDatasets) {
		s.snapshots.refresh(s.snapshotNames(rows), listedFrom)
	}
	return rows, nil
}

func (s *Server) snapshotCandidates(ctx context.Context, dataset, name string) ([]zfs.Dataset, error) {
	types := []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}
	taken, ready := s.snapshots.lookup(name)
	if !ready {
		return s.listParents(ctx)
	}
	roots := []string{dataset}
	if holder, _, _ := strings.Cut(taken, "@"); taken != "" && holder != dataset {
		roots = append(roots, holder)
	}
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: roots, Depth: 1, Types: types, UserProps: s.props.All(), SkipMissing: true})
	if err != nil {
		return nil, err
	}
	if taken != "" && !slices.ContainsFunc(rows, func(row zfs.Dataset) bool {
		return row.Name == taken && s.owner.LiveSnapshot(row) && rules.DecodeName(row.User[s.props.SnapshotName]) == name
	}) {
		s.snapshots.forget(name, taken)
	}
	return rows, nil
}

// snapshotNames maps the CSI name of each CSI snapshot among rows to it.
func (s *Server) snapshotNames(rows []zfs.Dataset) map[string]string {
	names := map[string]string{}
	for _, row := range rows {
		if s.owner.LiveSnapshot(row) {
			names[rules.DecodeName(row.User[s.props.SnapshotName])] = row.Name
		}
	}
	return names
}

// DeleteSnapshot implements csi.ControllerServer in one zfs command: a
// guarded destroy (zfs.Guarded) that checks the snapshot is a CSI snapshot of
// the driver's and destroys it as `zfs destroy -d` does: at once, or, when it
// has clones, hidden at once and gone with its last clone.
func (s *Server) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, invalid("snapshot_id is required")
	}
	var foreign *rules.ForeignNodeError
	if _, _, err := s.cfg.SnapshotName(req.GetSnapshotId()); errors.As(err, &foreign) {
		return nil, status.Errorf(codes.FailedPrecondition, "snapshot %q: %v", rules.Bounded(req.GetSnapshotId()), markOtherNode(err))
	}
	snapshot, dataset, err := s.snapshotName(req.GetSnapshotId())
	if err != nil {
		return &csi.DeleteSnapshotResponse{}, nil // not an ID of ours: nothing of ours to delete
	}
	release, err := s.inflight.Acquire(datasetLock(dataset))
	if err != nil {
		return nil, err
	}
	defer release()
	defer s.sources.forget(snapshot)
	result, err := s.zfs.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: snapshot,
		Named: s.props.SnapshotName, Excluded: s.props.Internal, Report: s.props.Deleted, Refused: s.props.Group})
	switch {
	case errors.Is(err, zfs.ErrNotFound):
		return &csi.DeleteSnapshotResponse{}, nil
	case err != nil:
		return nil, err
	case result.Outcome == zfs.Refused:
		return nil, memberRefused(req.GetSnapshotId(), s.groupOf(zfs.Dataset{Name: snapshot, User: map[string]string{s.props.Group: result.Reported}}))
	}
	// NotOwned: already deleted (deferred), or not a CSI snapshot: nothing to do.
	if result.Outcome == zfs.Done && result.Reported == "true" {
		s.kickReaper() // inherited: its volume, marked deleted, waits for it
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// GetSnapshot implements csi.ControllerServer.
func (s *Server) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, invalid("snapshot_id is required")
	}
	snapshot, _, err := s.snapshotName(req.GetSnapshotId())
	if err != nil {
		return nil, err
	}
	row, err := zfs.Get(ctx, s.zfs, snapshot, s.props.All())
	if errors.Is(err, zfs.ErrNotFound) || (err == nil && !s.owner.LiveSnapshot(row)) {
		return nil, status.Errorf(codes.NotFound, "snapshot %q does not exist", rules.Bounded(req.GetSnapshotId()))
	}
	if err != nil {
		return nil, err
	}
	return &csi.GetSnapshotResponse{Snapshot: s.csiSnapshot(row)}, nil
}

// csiSnapshot renders a snapshot row: always ready, sized by what a volume
// made from it needs (Kubernetes' restoreSize), usable on this node only.
func (s *Server) csiSnapshot(row zfs.Dataset) *csi.Snapshot {
	dataset, _, _ := strings.Cut(row.Name, "@")
	return &csi.Snapshot{
		SnapshotId:         rules.SnapshotID(s.cfg.NodeID, row.Name),
		SourceVolumeId:     rules.VolumeID(s.cfg.NodeID, dataset),
		SizeBytes:          rules.SizeBytes(s.restoreSize(row, nil)),
		CreationTime:       timestamppb.New(row.Creation),
		ReadyToUse:         true,
		AccessibleTopology: []*csi.Topology{{Segments: s.cfg.Topology()}},
		GroupSnapshotId:    s.groupOf(row),
	}
}

// notSnapshotted answers a snapshot the guard refused: the volume is not a
// live one of ours, or it is data adopted to keep as it is.
func (s *Server) notSnapshotted(ctx context.Context, volumeID, dataset string) error {
	if row, err := zfs.Get(ctx, s.zfs, dataset, s.props.All()); err == nil && s.owner.Retained(row) {
		return retainedRefusal(dataset, "snapshots")
	}
	return volumeNotFound(volumeID, zfs.ErrNotFound)
}

// retainedRefusal is the answer to what a volume adopted in retain mode is
// never given: snapshots, clones, expansion, property changes.
func retainedRefusal(dataset, what string) error {
	return status.Errorf(codes.FailedPrecondition, "volume %s is data an operator adopted to keep as it is (retain mode): %s are refused; "+
		"adopt it in own mode for them", dataset, what)
}
