package zfs

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A group snapshot is a snapshot of several datasets of one pool taken in
// one transaction group, by one channel program: the members are
// crash-consistent with each other, as if the power had gone at one instant
// for all of them. The members are ordinary snapshots ("dataset@Snapshot")
// that carry the group's mark.

// GroupSnapshotRequest describes a SnapshotGroup call.
type GroupSnapshotRequest struct {
	// Datasets are the filesystems and volumes to snapshot, all in one pool.
	Datasets []string
	// Snapshot is the snapshot name every member gets: "dataset@Snapshot".
	Snapshot string
	// Guard is checked on every dataset: one that fails it makes the
	// outcome NotOwned and nothing is made.
	Guard Guard
	// Group is the user property that marks a member, with the value Name.
	Group, Name string
	// Named is a user property each member gets with the value
	// Name + "/" + dataset: unique per member, so that each is also an
	// ordinary named snapshot.
	Named string
	// SizeProperty, when set, is a user property each member gets with its
	// dataset's size in the same transaction (volsize or refquota).
	SizeProperty string
	// CountProperty, when set, is a user property each member gets with the
	// number of members: what tells a partial list of them from the group.
	CountProperty string
	// Pending, when set, is a user property every dataset carries, with
	// Name, from before its member is made until the member's marks are
	// set: a bare snapshot at the name is an interrupted run's leftover only
	// on a dataset so marked (SnapshotRequest.Pending); anywhere else it is
	// someone else's, and the outcome ErrExists.
	Pending string
	// Others are snapshots that may be members of a group of this Name on
	// datasets outside Datasets (the name is then Taken): the caller's
	// index of snapshot names. Only they are read.
	Others []string
	// Parents, when the caller has no index yet, are searched instead: every
	// child's snapshot of this name is read (the cost grows with the
	// number of volumes).
	Parents []string
}

// GroupSnapshotResult describes a SnapshotGroup call.
type GroupSnapshotResult struct {
	// Outcome is Done (made now), Present (made before, whole), Taken (the
	// name marks snapshots of other datasets: At is one) or NotOwned (At
	// failed the guard; nothing changed).
	Outcome Outcome
	At      string
	// Members are the group's snapshots in the order of Datasets (Done and
	// Present): Name, Referenced, Creation, VolSize, CreateTxg and, when
	// set, User[SizeProperty].
	Members []Dataset
	// Volumes are the snapshotted datasets as the transaction saw them, in
	// the same order: Name, Type, VolSize, VolBlockSize or RefQuota.
	Volumes []Dataset
}

// groupSnapshotProgram: argv = snapshot, owned, excluded, group, name,
// named, size property, pending property, count property, datasets…, "--",
// parents…, "--", others….
//
// A signal can end a program between two sync calls, keeping what they did
// (program.go): an earlier run may have left some members, with or without
// their marks. Members of different transaction groups would not be
// crash-consistent, so such leftovers are destroyed and the outcome is
// "retry": the caller runs the program again, which takes every member anew.
// Members are all made before any is marked, so marked members beside a
// missing one are no leftover but a group of other datasets: Taken. The
// excluded mark of the Guard stops only a change: a whole group is Present
// even when a member's volume was deleted since.
//
//go:embed programs/group_snapshot.lua
var groupSnapshotProgram string

//go:embed programs/probe.lua
var probeProgram string

// ProgramsSetProperties implements Guarded with one `zfs program` that only
// looks.
func (e *Exec) ProgramsSetProperties(ctx context.Context, pool string) (bool, error) {
	result, err := e.program(ctx, "probe", probeProgram, pool)
	return result.Outcome == "done", err
}

// groupMember is one member as groupSnapshotProgram reports it.
type groupMember struct {
	Referenced int64  `json:"referenced"`
	Creation   int64  `json:"creation"`
	CreateTxg  int64  `json:"createtxg"`
	Type       string `json:"type"`
	VolSize    int64  `json:"volsize"`
	BlockSize  int64  `json:"volblocksize"`
	RefQuota   int64  `json:"refquota"`
	Size       string `json:"size"`
}

// SnapshotGroup implements Guarded with one `zfs program` (two when an
// interrupted earlier call left part of the group).
func (e *Exec) SnapshotGroup(ctx context.Context, req GroupSnapshotRequest) (GroupSnapshotResult, error) {
	pool, err := checkGroupRequest(req)
	if err != nil {
		return GroupSnapshotResult{}, err
	}
	args := slices.Concat([]string{req.Snapshot, req.Guard.Owned, req.Guard.Excluded, req.Group, req.Name, req.Named, req.SizeProperty,
		req.Pending, req.CountProperty},
		req.Datasets, []string{"--"}, req.Parents, []string{"--"}, req.Others)
	for range 2 {
		result, err := e.program(ctx, "group-snapshot", groupSnapshotProgram, pool, args...)
		if err != nil {
			return GroupSnapshotResult{}, err
		}
		switch result.Outcome {
		case "unsupported":
			return GroupSnapshotResult{}, fmt.Errorf("zfs program: zfs.sync.set_prop: %w", ErrUnsupported)
		case "retry":
			continue
		}
		answer := GroupSnapshotResult{Outcome: Outcome(result.Outcome), At: result.At}
		for _, dataset := range req.Datasets {
			if answer.Outcome != Done && answer.Outcome != Present {
				break
			}
			var member groupMember
			if err := json.Unmarshal(result.Members[dataset], &member); err != nil {
				return GroupSnapshotResult{}, fmt.Errorf("zfs program: member %s: %w", dataset, err)
			}
			answer.Members = append(answer.Members, member.snapshot(dataset+"@"+req.Snapshot, req.SizeProperty))
			answer.Volumes = append(answer.Volumes, member.volume(dataset))
		}
		return answer, nil
	}
	return GroupSnapshotResult{}, fmt.Errorf("zfs program: group snapshot %s: part of the group reappeared after its leftovers were destroyed: %w",
		req.Snapshot, ErrBusy)
}

// checkGroupRequest checks what SnapshotGroup needs and returns the pool.
func checkGroupRequest(req GroupSnapshotRequest) (string, error) {
	if len(req.Datasets) == 0 || req.Snapshot == "" || strings.ContainsAny(req.Snapshot, "@/") || req.Group == "" || req.Named == "" || req.Name == "" {
		return "", fmt.Errorf("SnapshotGroup: %w: datasets, a snapshot name, the group and named properties and a name are required", ErrInvalid)
	}
	pool := PoolOf(req.Datasets[0])
	for _, dataset := range req.Datasets {
		if err := checkNames(dataset + "@" + req.Snapshot); err != nil {
			return "", err
		}
		if PoolOf(dataset) != pool {
			return "", fmt.Errorf("SnapshotGroup: %s and %s: %w", req.Datasets[0], dataset, ErrCrossPool)
		}
		if strings.Contains(dataset, "@") {
			return "", fmt.Errorf("SnapshotGroup: %w: %s is a snapshot", ErrInvalid, dataset)
		}
	}
	return pool, nil
}

func (m groupMember) snapshot(name, sizeProperty string) Dataset {
	snapshot := Dataset{Name: name, Type: Snapshot, Referenced: uint64(max(m.Referenced, 0)), Creation: time.Unix(m.Creation, 0),
		VolSize: uint64(max(m.VolSize, 0)), CreateTxg: uint64(max(m.CreateTxg, 0))}
	if sizeProperty != "" && m.Size != "" {
		snapshot.User = map[string]string{sizeProperty: m.Size}
	}
	return snapshot
}

func (m groupMember) volume(name string) Dataset {
	return Dataset{Name: name, Type: Type(m.Type), VolSize: uint64(max(m.VolSize, 0)), VolBlockSize: uint64(max(m.BlockSize, 0)),
		RefQuota: uint64(max(m.RefQuota, 0))}
}
