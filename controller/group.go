package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// The GroupController service: a group snapshot is one snapshot of several
// volumes of one pool taken in one transaction group (zfs.SnapshotGroup),
// crash-consistent across the volumes. Its members are ordinary CSI
// snapshots ("<node>:<dataset>@<snapshot>", usable as content sources) that
// carry the group's mark and cannot be deleted alone; the group's ID is
// "<node>:<pool>#<snapshot>".

// GroupServer implements csi.GroupControllerServer on a controller Server.
type GroupServer struct {
	csi.UnimplementedGroupControllerServer
	s *Server
}

// Group returns the GroupController service of this controller.
func (s *Server) Group() *GroupServer { return &GroupServer{s: s} }

// GroupControllerGetCapabilities implements csi.GroupControllerServer: the
// group snapshot capability only where ZFS can take a group (its channel
// programs can set properties; one zfs program asks, the first time).
func (g *GroupServer) GroupControllerGetCapabilities(ctx context.Context, _ *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	supported, err := g.s.groupSupport(ctx)
	if err != nil {
		return nil, err
	}
	if !supported {
		return &csi.GroupControllerGetCapabilitiesResponse{}, nil
	}
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT}}}}}, nil
}

// CreateVolumeGroupSnapshot implements csi.GroupControllerServer in one zfs
// command (zfs.SnapshotGroup): the guard on every volume, the name's
// idempotency and all the snapshots in one transaction group.
func (g *GroupServer) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	s := g.s
	if problem := driver.NameProblem(req.GetName()); problem != "" {
		return nil, invalid("%s", problem)
	}
	for key := range req.GetParameters() {
		if !strings.HasPrefix(key, kubernetesPrefix) {
			return nil, invalid("unknown group snapshot parameter %q: group snapshots take none", driver.Bounded(key))
		}
	}
	datasets, err := s.groupSources(req.GetSourceVolumeIds())
	if err != nil {
		return nil, err
	}
	pool := zfs.PoolOf(datasets[0])
	keys := []string{"group-name/" + req.GetName()}
	for _, dataset := range datasets {
		keys = append(keys, datasetLock(dataset))
	}
	release, err := s.inflight.Acquire(keys...)
	if err != nil {
		return nil, err
	}
	defer release()
	// Members are named "<group>/<dataset>": the index names the snapshots
	// that may belong to a group of this name elsewhere, so the program reads
	// those instead of every volume's (before the first listing it must).
	others, indexed := s.snapshots.withPrefix(req.GetName() + "/")
	var parents []string
	for _, parent := range s.cfg.ParentDatasets {
		if zfs.PoolOf(parent) == pool && !indexed {
			parents = append(parents, parent)
		}
	}
	snapshot := s.namer.SnapshotComponent(req.GetName())
	result, err := s.zfs.SnapshotGroup(ctx, zfs.GroupSnapshotRequest{Datasets: datasets, Snapshot: snapshot,
		Guard: s.owner.VolumeGuard(), Group: s.props.Group, Name: req.GetName(), Named: s.props.SnapshotName,
		SizeProperty: s.props.Size, Others: others, Parents: parents})
	switch {
	case errors.Is(err, zfs.ErrUnsupported):
		return nil, status.Errorf(codes.FailedPrecondition,
			"group snapshots need channel programs that set properties (zfs.sync.set_prop); this ZFS has none: %v", err)
	case errors.Is(err, zfs.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "a source volume does not exist: %v", err)
	case errors.Is(err, zfs.ErrExists):
		return nil, status.Errorf(codes.AlreadyExists, "a snapshot of the group's name exists and is no member of group snapshot %q; it is left alone: %v",
			driver.Bounded(req.GetName()), err)
	case err != nil:
		return nil, err
	}
	switch result.Outcome {
	case zfs.NotOwned:
		return nil, volumeNotFound(driver.VolumeID(s.cfg.NodeID, result.At), zfs.ErrNotFound)
	case zfs.Taken:
		return nil, status.Errorf(codes.AlreadyExists, "group snapshot %q already exists, of other volumes (%s)", driver.Bounded(req.GetName()), result.At)
	}
	group := &csi.VolumeGroupSnapshot{GroupSnapshotId: driver.GroupSnapshotID(s.cfg.NodeID, pool, snapshot), ReadyToUse: true}
	for i, member := range result.Members {
		s.snapshots.add(req.GetName()+"/"+datasets[i], member.Name)
		rendered := s.csiSnapshot(member)
		rendered.GroupSnapshotId = group.GroupSnapshotId
		group.Snapshots = append(group.Snapshots, rendered)
		if group.CreationTime == nil {
			group.CreationTime = timestamppb.New(member.Creation)
		}
	}
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: group}, nil
}

// groupSupport asks ZFS once whether it can take group snapshots.
func (s *Server) groupSupport(ctx context.Context) (bool, error) {
	s.groupProbe.Lock()
	defer s.groupProbe.Unlock()
	if s.groupProbe.known {
		return s.groupProbe.supported, nil
	}
	supported, err := s.zfs.ProgramsSetProperties(ctx, zfs.PoolOf(s.cfg.ParentDatasets[0]))
	if err != nil {
		return false, err
	}
	s.groupProbe.known, s.groupProbe.supported = true, supported
	return supported, nil
}

// groupSources resolves the source volume IDs of a group to datasets of one
// pool, each named once.
func (s *Server) groupSources(volumeIDs []string) ([]string, error) {
	if len(volumeIDs) == 0 {
		return nil, invalid("source_volume_ids is required")
	}
	var datasets []string
	for _, volumeID := range volumeIDs {
		dataset, err := s.volumeDataset(volumeID)
		if err != nil {
			return nil, volumeNotFound(volumeID, err)
		}
		if slices.Contains(datasets, dataset) {
			return nil, invalid("source_volume_ids names %q twice", driver.Bounded(volumeID))
		}
		if len(datasets) > 0 && zfs.PoolOf(dataset) != zfs.PoolOf(datasets[0]) {
			return nil, status.Errorf(codes.FailedPrecondition,
				"%s and %s are in different pools (%s, %s): ZFS snapshots volumes together only within one pool",
				driver.Bounded(volumeIDs[0]), driver.Bounded(volumeID), zfs.PoolOf(datasets[0]), zfs.PoolOf(dataset))
		}
		datasets = append(datasets, dataset)
	}
	return datasets, nil
}

// GetVolumeGroupSnapshot implements csi.GroupControllerServer with one zfs
// list of the members the CO names.
func (g *GroupServer) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	members, groupID, err := g.s.groupMembers(ctx, req.GetGroupSnapshotId(), req.GetSnapshotIds())
	if err != nil {
		return nil, err
	}
	if len(members) == 0 {
		return nil, status.Errorf(codes.NotFound, "group snapshot %q does not exist", driver.Bounded(groupID))
	}
	if len(req.GetSnapshotIds()) > 0 && len(members) != len(req.GetSnapshotIds()) {
		return nil, invalid("snapshot_ids do not match group snapshot %q: %d of %d exist", driver.Bounded(groupID), len(members), len(req.GetSnapshotIds()))
	}
	group := &csi.VolumeGroupSnapshot{GroupSnapshotId: groupID, ReadyToUse: true, CreationTime: timestamppb.New(members[0].Creation)}
	for _, member := range members {
		rendered := g.s.csiSnapshot(member)
		rendered.GroupSnapshotId = groupID
		group.Snapshots = append(group.Snapshots, rendered)
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: group}, nil
}

// DeleteVolumeGroupSnapshot implements csi.GroupControllerServer: one zfs
// list of the members the CO names, then one guarded destroy each (deferred
// for a member with clones, as DeleteSnapshot does).
func (g *GroupServer) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	s := g.s
	var foreign *driver.ForeignNodeError
	if _, _, err := s.cfg.GroupSnapshot(req.GetGroupSnapshotId()); errors.As(err, &foreign) {
		return nil, status.Errorf(codes.FailedPrecondition, "group snapshot %q: %v", driver.Bounded(req.GetGroupSnapshotId()), markOtherNode(err))
	}
	members, _, err := s.groupMembers(ctx, req.GetGroupSnapshotId(), req.GetSnapshotIds())
	if status.Code(err) == codes.NotFound {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil // not an ID of ours: nothing of ours to delete
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, member := range members {
		dataset, _, _ := strings.Cut(member.Name, "@")
		keys = append(keys, datasetLock(dataset))
	}
	release, err := s.inflight.Acquire(keys...)
	if err != nil {
		return nil, err
	}
	defer release()
	wakeReaper := false
	for _, member := range members {
		s.sources.forget(member.Name)
		result, err := s.zfs.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: member.Name,
			Named: s.props.SnapshotName, Excluded: s.props.Internal, Report: s.props.Deleted})
		if err != nil && !errors.Is(err, zfs.ErrNotFound) {
			return nil, err
		}
		wakeReaper = wakeReaper || result.Outcome == zfs.Done && result.Reported == "true"
	}
	if wakeReaper {
		s.kickReaper() // a member's volume, marked deleted, waits for it
	}
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// groupMembers reads the members a CO names for a group snapshot (one zfs
// list), in the order named. Members already gone are left out; an ID that
// names anything but a member of this group is INVALID_ARGUMENT (the spec's
// snapshot list mismatch); a group ID that is not ours is NOT_FOUND.
func (s *Server) groupMembers(ctx context.Context, groupID string, snapshotIDs []string) ([]zfs.Dataset, string, error) {
	if groupID == "" {
		return nil, "", invalid("group_snapshot_id is required")
	}
	pool, component, err := s.cfg.GroupSnapshot(groupID)
	if err != nil {
		return nil, "", status.Errorf(codes.NotFound, "group snapshot %q does not exist here: %v", driver.Bounded(groupID), markOtherNode(err))
	}
	options := zfs.ListOptions{Types: []zfs.Type{zfs.Snapshot}, UserProps: s.props.All(), SkipMissing: true}
	var names []string
	for _, id := range snapshotIDs {
		snapshot, dataset, err := s.cfg.SnapshotName(id)
		if err != nil || zfs.PoolOf(dataset) != pool || !strings.HasSuffix(snapshot, "@"+component) {
			return nil, "", invalid("snapshot_ids do not match group snapshot %q: %q is no member", driver.Bounded(groupID), driver.Bounded(id))
		}
		names = append(names, snapshot)
	}
	options.Roots = names
	if len(names) == 0 {
		// Without the members' IDs, every snapshot under the pool's parents.
		for _, parent := range s.cfg.ParentDatasets {
			if zfs.PoolOf(parent) == pool {
				options.Roots = append(options.Roots, parent)
			}
		}
		options.Depth = 2
	}
	var rows []zfs.Dataset
	if len(options.Roots) > 0 {
		if rows, err = s.zfs.List(ctx, options); err != nil && !errors.Is(err, zfs.ErrNotFound) {
			return nil, "", err
		}
	}
	var members []zfs.Dataset
	var groupName string
	for _, row := range rows {
		if !strings.HasSuffix(row.Name, "@"+component) {
			continue
		}
		name := row.User[s.props.Group]
		switch {
		case len(names) == 0 && (name == "" || !s.owner.LiveSnapshot(row)):
			continue
		case !s.owner.LiveSnapshot(row) || name == "" || groupName != "" && name != groupName:
			return nil, "", invalid("snapshot_ids do not match group snapshot %q: %s is no member", driver.Bounded(groupID), row.Name)
		}
		groupName = name
		members = append(members, row)
	}
	if len(names) > 0 {
		slices.SortFunc(members, func(a, b zfs.Dataset) int { return slices.Index(names, a.Name) - slices.Index(names, b.Name) })
	}
	return members, groupID, nil
}

// groupOf is the ID of the group snapshot a snapshot row belongs to, or "".
func (s *Server) groupOf(row zfs.Dataset) string {
	if row.User[s.props.Group] == "" {
		return ""
	}
	dataset, snapshot, _ := strings.Cut(row.Name, "@")
	return driver.GroupSnapshotID(s.cfg.NodeID, zfs.PoolOf(dataset), snapshot)
}

// memberRefused is DeleteSnapshot's answer for a group's member.
func memberRefused(snapshotID, groupID string) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(
		"snapshot %q is part of group snapshot %q and cannot be deleted alone: delete the group with DeleteVolumeGroupSnapshot",
		driver.Bounded(snapshotID), groupID))
}
