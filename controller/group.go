package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/zfs-csi/zfs-csi/rules"
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
	if problem := rules.SpecNameProblem(req.GetName()); problem != "" {
		return nil, invalid("%s", problem)
	}
	// Stored as every CSI name is (a TAB or a newline would break zfs list
	// -H): the group mark, and the start of each member's name.
	stored := rules.EncodeName(req.GetName())
	for key := range req.GetParameters() {
		if !strings.HasPrefix(key, kubernetesPrefix) {
			return nil, invalid("unknown group snapshot parameter %q: group snapshots take none", rules.Bounded(key))
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
	others, indexed := s.snapshots.withPrefix(stored + "/")
	var parents []string
	for _, parent := range s.cfg.ParentDatasets {
		if zfs.PoolOf(parent) == pool && !indexed {
			parents = append(parents, parent)
		}
	}
	snapshot := s.groupComponent(req.GetName())
	if legacy := s.namer.SnapshotComponent(req.GetName()); s.indexedAt(stored+"/"+datasets[0]) == datasets[0]+"@"+legacy {
		snapshot = legacy // a group made before group names had their own name space: the same call finds it
	}
	result, err := s.zfs.SnapshotGroup(ctx, zfs.GroupSnapshotRequest{Datasets: datasets, Snapshot: snapshot,
		Guard: s.owner.VolumeGuard(), Group: s.props.Group, Name: stored, Named: s.props.SnapshotName,
		SizeProperty: s.props.Size, CountProperty: s.props.GroupMembers, Pending: s.props.Snapshotting,
		Others: others, Parents: parents})
	switch {
	case errors.Is(err, zfs.ErrUnsupported):
		return nil, status.Errorf(codes.FailedPrecondition,
			"group snapshots need channel programs that set properties (zfs.sync.set_prop); this ZFS has none: %v", err)
	case errors.Is(err, zfs.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "a source volume does not exist: %v", err)
	case errors.Is(err, zfs.ErrExists):
		return nil, status.Errorf(codes.AlreadyExists, "a snapshot of the group's name exists and is no member of group snapshot %q; it is left alone: %v",
			rules.Bounded(req.GetName()), err)
	case err != nil:
		return nil, err
	}
	switch result.Outcome {
	case zfs.NotOwned:
		return nil, volumeNotFound(rules.VolumeID(s.cfg.NodeID, result.At), zfs.ErrNotFound)
	case zfs.Taken:
		return nil, status.Errorf(codes.AlreadyExists, "group snapshot %q already exists, of other volumes (%s)", rules.Bounded(req.GetName()), result.At)
	}
	group := &csi.VolumeGroupSnapshot{GroupSnapshotId: rules.GroupSnapshotID(s.cfg.NodeID, pool, snapshot), ReadyToUse: true}
	for i, member := range result.Members {
		s.snapshots.add(stored+"/"+datasets[i], member.Name)
		rendered := s.csiSnapshot(member)
		rendered.GroupSnapshotId = group.GroupSnapshotId
		group.Snapshots = append(group.Snapshots, rendered)
		if group.CreationTime == nil {
			group.CreationTime = timestamppb.New(member.Creation)
		}
	}
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: group}, nil
}

// groupNameSpace starts the name a group's members are named by: NUL is in
// no CSI name (the spec bans U+0000), so no snapshot's name is ever
// "group\x00…", and the Namer, injective, maps it to a component that no
// snapshot's name maps to (sanitised and hashed: the NUL is never stored).
// A group "x" after a snapshot "x" of one of its volumes is then no clash.
const groupNameSpace = "group\x00"

// groupComponent is the snapshot component of a group's members.
func (s *Server) groupComponent(name string) string {
	return s.namer.SnapshotComponent(groupNameSpace + name)
}

// indexedAt is the snapshot the index says carries a CSI name, or "".
func (s *Server) indexedAt(name string) string {
	snapshot, _ := s.snapshots.lookup(name)
	return snapshot
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
	nodes := map[string]bool{}
	for _, volumeID := range volumeIDs {
		if nodeID, _, err := rules.ParseVolumeID(volumeID); err == nil {
			nodes[nodeID] = true
		}
	}
	if len(nodes) > 1 {
		// The volumes exist, on different nodes: ZFS snapshots together
		// only what one pool holds.
		return nil, status.Errorf(codes.FailedPrecondition, "source_volume_ids name volumes of %d nodes: a group snapshot is of one node's volumes", len(nodes))
	}
	var datasets []string
	for _, volumeID := range volumeIDs {
		dataset, err := s.volumeDataset(volumeID)
		if err != nil {
			return nil, volumeNotFound(volumeID, err)
		}
		if slices.Contains(datasets, dataset) {
			return nil, invalid("source_volume_ids names %q twice", rules.Bounded(volumeID))
		}
		if len(datasets) > 0 && zfs.PoolOf(dataset) != zfs.PoolOf(datasets[0]) {
			return nil, status.Errorf(codes.FailedPrecondition,
				"%s and %s are in different pools (%s, %s): ZFS snapshots volumes together only within one pool",
				rules.Bounded(volumeIDs[0]), rules.Bounded(volumeID), zfs.PoolOf(datasets[0]), zfs.PoolOf(dataset))
		}
		datasets = append(datasets, dataset)
	}
	return datasets, nil
}

// GetVolumeGroupSnapshot implements csi.GroupControllerServer with one zfs
// list of the members the CO names. A group none of whose members is left
// (deleted, or kept only for a clone), or one whose delete is under way, is
// NOT_FOUND.
func (g *GroupServer) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	read, err := g.s.readGroup(ctx, req.GetGroupSnapshotId(), req.GetSnapshotIds())
	if err != nil {
		return nil, err
	}
	if len(read.live) == 0 || read.count > 0 && len(read.live) != read.count {
		return nil, status.Errorf(codes.NotFound, "group snapshot %q does not exist (%d of its members are left)", rules.Bounded(read.id), len(read.live))
	}
	group := &csi.VolumeGroupSnapshot{GroupSnapshotId: read.id, ReadyToUse: true, CreationTime: timestamppb.New(read.live[0].Creation)}
	for _, member := range read.live {
		rendered := g.s.csiSnapshot(member)
		rendered.GroupSnapshotId = read.id
		group.Snapshots = append(group.Snapshots, rendered)
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: group}, nil
}

// DeleteVolumeGroupSnapshot implements csi.GroupControllerServer: one zfs
// list of the members the CO names, then one guarded destroy each (deferred
// for a member with clones, as DeleteSnapshot does). Members already gone,
// or kept only for a clone, are done: a retry after a delete cut off between
// members, or after one deferred, deletes what is left and answers OK. A
// member that fails does not stop the others; the first error is the answer.
func (g *GroupServer) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	s := g.s
	var foreign *rules.ForeignNodeError
	if _, _, err := s.cfg.GroupSnapshot(req.GetGroupSnapshotId()); errors.As(err, &foreign) {
		return nil, status.Errorf(codes.FailedPrecondition, "group snapshot %q: %v", rules.Bounded(req.GetGroupSnapshotId()), markOtherNode(err))
	}
	read, err := s.readGroup(ctx, req.GetGroupSnapshotId(), req.GetSnapshotIds())
	if status.Code(err) == codes.NotFound {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil // not an ID of ours: nothing of ours to delete
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, member := range read.live {
		dataset, _, _ := strings.Cut(member.Name, "@")
		keys = append(keys, datasetLock(dataset))
	}
	release, err := s.inflight.Acquire(keys...)
	if err != nil {
		return nil, err
	}
	defer release()
	wakeReaper := false
	var failed error
	for _, member := range read.live {
		s.sources.forget(member.Name)
		result, err := s.zfs.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: member.Name,
			Named: s.props.SnapshotName, Excluded: s.props.Internal, Report: s.props.Deleted})
		if err != nil && !errors.Is(err, zfs.ErrNotFound) && failed == nil {
			failed = err
		}
		wakeReaper = wakeReaper || result.Outcome == zfs.Done && result.Reported == "true"
	}
	if wakeReaper {
		s.kickReaper() // a member's volume, marked deleted, waits for it
	}
	if failed != nil {
		return nil, failed
	}
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// groupRead is what ZFS shows of a group snapshot.
type groupRead struct {
	id string
	// live are the members neither destroyed nor marked for deferred
	// destruction, in the order the CO named them.
	live []zfs.Dataset
	// count is how many members the group was made with (its members carry
	// it), or how many a listing of the pool found for a group made before
	// they did; 0 when no member is left to say.
	count int
}

// readGroup reads the members a CO names for a group snapshot (one zfs
// list), or, when it names none, every member under the pool's parents. The
// spec's snapshot list mismatch is INVALID_ARGUMENT: an ID that is no
// member of this group, one named twice, or a list of some of the members
// only. A group ID that is not ours is NOT_FOUND.
func (s *Server) readGroup(ctx context.Context, groupID string, snapshotIDs []string) (groupRead, error) {
	if groupID == "" {
		return groupRead{}, invalid("group_snapshot_id is required")
	}
	pool, component, err := s.cfg.GroupSnapshot(groupID)
	if err != nil {
		return groupRead{}, status.Errorf(codes.NotFound, "group snapshot %q does not exist here: %v", rules.Bounded(groupID), markOtherNode(err))
	}
	mismatch := func(format string, args ...any) error {
		return invalid("snapshot_ids do not match group snapshot %q: %s", rules.Bounded(groupID), fmt.Sprintf(format, args...))
	}
	var names []string
	for _, id := range snapshotIDs {
		snapshot, dataset, err := s.cfg.SnapshotName(id)
		switch {
		case err != nil || zfs.PoolOf(dataset) != pool || !strings.HasSuffix(snapshot, "@"+component):
			return groupRead{}, mismatch("%q is no member", rules.Bounded(id))
		case slices.Contains(names, snapshot):
			return groupRead{}, mismatch("%q is named twice", rules.Bounded(id))
		}
		names = append(names, snapshot)
	}
	rows, err := s.groupRows(ctx, pool, component, names)
	if err != nil {
		return groupRead{}, err
	}
	read := groupRead{id: groupID}
	var groupName string
	for _, row := range rows {
		name := row.User[s.props.Group]
		if name == "" || row.User[s.props.SnapshotName] == "" || row.User[s.props.Internal] != "" || groupName != "" && name != groupName {
			return groupRead{}, mismatch("%s is no member", row.Name)
		}
		groupName = name
		if count, err := strconv.Atoi(row.User[s.props.GroupMembers]); err == nil {
			read.count = count
		}
		if !row.DeferDestroy {
			read.live = append(read.live, row)
		}
	}
	if len(names) > 0 && len(rows) > 0 && read.count == 0 {
		// Made before members carried their count: the pool's listing says.
		all, err := s.groupRows(ctx, pool, component, nil)
		if err != nil {
			return groupRead{}, err
		}
		read.count = len(all)
	}
	if len(names) > 0 && read.count > 0 && len(names) != read.count {
		return groupRead{}, mismatch("%d snapshot IDs for a group of %d", len(names), read.count)
	}
	slices.SortFunc(read.live, func(a, b zfs.Dataset) int { return slices.Index(names, a.Name) - slices.Index(names, b.Name) })
	return read, nil
}

// groupRows lists the snapshots named (they may be gone), or, for none,
// every snapshot of the component that carries a group mark under the pool's
// parents: deferred ones too.
func (s *Server) groupRows(ctx context.Context, pool, component string, names []string) ([]zfs.Dataset, error) {
	options := zfs.ListOptions{Types: []zfs.Type{zfs.Snapshot}, UserProps: append(s.props.All(), s.props.GroupMembers),
		SkipMissing: true, Roots: names}
	if len(names) == 0 {
		for _, parent := range s.cfg.ParentDatasets {
			if zfs.PoolOf(parent) == pool {
				options.Roots = append(options.Roots, parent)
			}
		}
		options.Depth = 2
	}
	if len(options.Roots) == 0 {
		return nil, nil
	}
	rows, err := s.zfs.List(ctx, options)
	if err != nil && !errors.Is(err, zfs.ErrNotFound) {
		return nil, err
	}
	var found []zfs.Dataset
	for _, row := range rows {
		dataset, _, _ := strings.Cut(row.Name, "@")
		if !strings.HasSuffix(row.Name, "@"+component) || !s.cfg.OwnedDataset(dataset) {
			continue
		}
		if len(names) == 0 && (row.User[s.props.Group] == "" || row.User[s.props.SnapshotName] == "") {
			continue // not a member of any group: no ID named it
		}
		found = append(found, row)
	}
	return found, nil
}

// groupOf is the ID of the group snapshot a snapshot row belongs to, or "".
func (s *Server) groupOf(row zfs.Dataset) string {
	if row.User[s.props.Group] == "" {
		return ""
	}
	dataset, snapshot, _ := strings.Cut(row.Name, "@")
	return rules.GroupSnapshotID(s.cfg.NodeID, zfs.PoolOf(dataset), snapshot)
}

// memberRefused is DeleteSnapshot's answer for a group's member.
func memberRefused(snapshotID, groupID string) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(
		"snapshot %q is part of group snapshot %q and cannot be deleted alone: delete the group with DeleteVolumeGroupSnapshot",
		rules.Bounded(snapshotID), groupID))
}
