package zfstest

import (
	"context"
	"errors"
	"fmt"

	"github.com/zfs-csi/zfs-csi/zfs"
)

const (
	group   = "zfstest.dev:group"
	members = "zfstest.dev:members"
)

// groupRequest snapshots the members a, b (a zvol) and c under root.
func groupRequest(root string) zfs.GroupSnapshotRequest {
	return zfs.GroupSnapshotRequest{Datasets: []string{root + "/a", root + "/b", root + "/c"}, Snapshot: "g1", Guard: guard,
		Group: group, Name: "group-1", Named: named, SizeProperty: size, Parents: []string{root}, Pending: pending, CountProperty: members}
}

// refusedGroup runs req, which must change nothing, and returns its result.
func refusedGroup(ctx context.Context, p Pool, root string, req zfs.GroupSnapshotRequest) (zfs.GroupSnapshotResult, string, error) {
	var result zfs.GroupSnapshotResult
	problem, err := unchanged(ctx, p, root, func() (err error) {
		result, err = p.SnapshotGroup(ctx, req)
		return err
	})
	return result, problem, err
}

// takenBy runs req, which must find its name Taken at snapshot and change
// nothing.
func takenBy(ctx context.Context, p Pool, root string, req zfs.GroupSnapshotRequest, snapshot string) (string, error) {
	result, problem, err := refusedGroup(ctx, p, root, req)
	if problem != "" || err != nil {
		return problem, err
	}
	return firstProblem(want("outcome", result.Outcome, zfs.Taken), want("at", result.At, snapshot)), nil
}

// refusedAtTheName is a case: a snapshot b@g1 with props, no member of the
// group, makes groupRequest ErrExists and changes nothing.
func refusedAtTheName(props map[string]string) func(context.Context, Pool, string) (string, error) {
	return func(ctx context.Context, p Pool, root string) (string, error) {
		if err := groupMembers(ctx, p, root); err != nil {
			return "", err
		}
		if err := p.Snapshot(ctx, root+"/b@g1", props); err != nil {
			return "", err
		}
		var refused error
		problem, err := unchanged(ctx, p, root, func() error {
			_, refused = p.SnapshotGroup(ctx, groupRequest(root))
			return nil
		})
		if problem != "" || err != nil {
			return problem, err
		}
		return want(fmt.Sprintf("%v is ErrExists", refused), errors.Is(refused, zfs.ErrExists), true), nil
	}
}

// groupTaken makes the members of groupRequest and takes the group.
func groupTaken(ctx context.Context, p Pool, root string) (zfs.GroupSnapshotRequest, zfs.GroupSnapshotResult, error) {
	req := groupRequest(root)
	if err := groupMembers(ctx, p, root); err != nil {
		return req, zfs.GroupSnapshotResult{}, err
	}
	result, err := p.SnapshotGroup(ctx, req)
	return req, result, err
}

// groupMembers makes the owned members of groupRequest.
func groupMembers(ctx context.Context, p Pool, root string) error {
	for _, member := range []struct {
		name string
		zvol bool
	}{{"a", false}, {"b", true}, {"c", false}} {
		if err := volume(ctx, p, root+"/"+member.name, member.zvol); err != nil {
			return err
		}
	}
	return nil
}

// oneGroup reports a problem unless result is the whole group of req, every
// member carrying its marks, all made in one transaction group.
func oneGroup(ctx context.Context, p Pool, req zfs.GroupSnapshotRequest, result zfs.GroupSnapshotResult) (string, error) {
	if len(result.Members) != len(req.Datasets) || len(result.Volumes) != len(req.Datasets) {
		return fmt.Sprintf("%d members and %d volumes, want %d", len(result.Members), len(result.Volumes), len(req.Datasets)), nil
	}
	for i, member := range result.Members {
		dataset := req.Datasets[i]
		if problem := firstProblem(
			want("member name", member.Name, dataset+"@"+req.Snapshot),
			want(member.Name+" transaction group", member.CreateTxg, result.Members[0].CreateTxg),
			want(member.Name+" volume", result.Volumes[i].Name, dataset)); problem != "" {
			return problem, nil
		}
		if member.CreateTxg == 0 {
			return member.Name + ": no transaction group reported", nil
		}
		row, err := zfs.Get(ctx, p, member.Name, []string{group, named, size, members, pending})
		if err != nil {
			return "", err
		}
		wantSize := "33554432"
		if result.Volumes[i].Type == zfs.Volume {
			wantSize = "67108864"
		}
		if problem := firstProblem(
			want(member.Name+" group mark", row.User[group], req.Name),
			want(member.Name+" name", row.User[named], req.Name+"/"+dataset),
			want(member.Name+" size", row.User[size], wantSize),
			want(member.Name+" member count", row.User[members], fmt.Sprint(len(req.Datasets))),
			want(member.Name+" creation reported", member.Creation.Unix(), row.Creation.Unix()),
			want(member.Name+" pending mark left", row.User[pending], ""),
			want(member.Name+" reported size", member.User[size], wantSize)); problem != "" {
			return problem, nil
		}
	}
	return "", nil
}

// long: the table of group snapshot cases, one a row
func groupCases() []GuardedCase {
	return []GuardedCase{
		{"a group snapshot takes every member in one transaction group, and again finds the same group", func(ctx context.Context, p Pool, root string) (string, error) {
			req, first, err := groupTaken(ctx, p, root)
			if err != nil {
				return "", err
			}
			if problem := want("outcome", first.Outcome, zfs.Done); problem != "" {
				return problem, nil
			}
			if problem, err := oneGroup(ctx, p, req, first); problem != "" || err != nil {
				return problem, err
			}
			var again zfs.GroupSnapshotResult
			problem, err := unchanged(ctx, p, root, func() (err error) {
				again, err = p.SnapshotGroup(ctx, req)
				return err
			})
			if problem != "" || err != nil {
				return "again: " + problem, err
			}
			return firstProblem(want("outcome again", again.Outcome, zfs.Present),
				want("transaction group again", again.Members[0].CreateTxg, first.Members[0].CreateTxg)), nil
		}},
		{"a member that fails the guard makes nothing", func(ctx context.Context, p Pool, root string) (string, error) {
			if err := groupMembers(ctx, p, root); err != nil {
				return "", err
			}
			if err := p.Set(ctx, root+"/c", map[string]string{deleted: "true"}); err != nil {
				return "", err
			}
			var result zfs.GroupSnapshotResult
			problem, err := unchanged(ctx, p, root, func() (err error) {
				result, err = p.SnapshotGroup(ctx, groupRequest(root))
				return err
			})
			if problem != "" || err != nil {
				return problem, err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.NotOwned), want("at", result.At, root+"/c")), nil
		}},
		{"a group name that marks snapshots of other datasets is taken", func(ctx context.Context, p Pool, root string) (string, error) {
			if err := groupMembers(ctx, p, root); err != nil {
				return "", err
			}
			req := groupRequest(root)
			other := req
			other.Datasets = req.Datasets[:2]
			if _, err := p.SnapshotGroup(ctx, other); err != nil {
				return "", err
			}
			req.Datasets = req.Datasets[1:]
			return takenBy(ctx, p, root, req, root+"/a@g1")
		}},
		{"a group name on other datasets is taken when Others names one, without Parents", func(ctx context.Context, p Pool, root string) (string, error) {
			if err := groupMembers(ctx, p, root); err != nil {
				return "", err
			}
			req := groupRequest(root)
			other := req
			other.Datasets = req.Datasets[:1]
			if _, err := p.SnapshotGroup(ctx, other); err != nil {
				return "", err
			}
			req.Datasets, req.Parents = req.Datasets[1:], nil
			req.Others = []string{root + "/b@g1", root + "/a@g1"} // b's is requested: skipped; a's is the group's
			return takenBy(ctx, p, root, req, root+"/a@g1")
		}},
		{"Others that are gone or of another group are no obstacle", func(ctx context.Context, p Pool, root string) (string, error) {
			if err := groupMembers(ctx, p, root); err != nil {
				return "", err
			}
			req := groupRequest(root)
			other := req
			other.Datasets, other.Name = req.Datasets[:1], "group-2"
			if _, err := p.SnapshotGroup(ctx, other); err != nil {
				return "", err
			}
			req.Datasets, req.Parents = req.Datasets[1:], nil
			req.Others = []string{root + "/a@g1", root + "/gone@g1"}
			result, err := p.SnapshotGroup(ctx, req)
			if err != nil {
				return "", err
			}
			return want("outcome", result.Outcome, zfs.Done), nil
		}},
		{"a group name used on fewer of the datasets is taken, and that group is kept", func(ctx context.Context, p Pool, root string) (string, error) {
			if err := groupMembers(ctx, p, root); err != nil {
				return "", err
			}
			req := groupRequest(root)
			smaller := req
			smaller.Datasets = req.Datasets[:2]
			if _, err := p.SnapshotGroup(ctx, smaller); err != nil {
				return "", err
			}
			result, problem, err := refusedGroup(ctx, p, root, req)
			if problem != "" || err != nil {
				return problem, err
			}
			return want("outcome", result.Outcome, zfs.Taken), nil
		}},
		{"a snapshot of the name that is no member is refused as existing", refusedAtTheName(map[string]string{named: "someone-else"})},
		{"destroy snapshot: a group's member is refused alone and kept", func(ctx context.Context, p Pool, root string) (string, error) {
			if err := groupMembers(ctx, p, root); err != nil {
				return "", err
			}
			req := groupRequest(root)
			if _, err := p.SnapshotGroup(ctx, req); err != nil {
				return "", err
			}
			var result zfs.SnapshotDestroyResult
			problem, err := unchanged(ctx, p, root, func() (err error) {
				result, err = p.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: root + "/a@g1", Named: named, Refused: group})
				return err
			})
			if problem != "" || err != nil {
				return problem, err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Refused), want("reported", result.Reported, req.Name)), nil
		}},
		{"an interrupted group's leftovers are taken anew with the rest, in one transaction group", func(ctx context.Context, p Pool, root string) (string, error) {
			if err := groupMembers(ctx, p, root); err != nil {
				return "", err
			}
			// What a program cut off by a signal leaves: every dataset
			// marked pending, snapshots made, one marked, the others not.
			for _, dataset := range []string{"a", "b", "c"} {
				if err := p.Set(ctx, root+"/"+dataset, map[string]string{pending: "group-1"}); err != nil {
					return "", err
				}
			}
			if err := p.Snapshot(ctx, root+"/a@g1", nil); err != nil {
				return "", err
			}
			if err := p.Snapshot(ctx, root+"/b@g1", map[string]string{group: "group-1"}); err != nil {
				return "", err
			}
			req := groupRequest(root)
			result, err := p.SnapshotGroup(ctx, req)
			if err != nil {
				return "", err
			}
			if problem := want("outcome", result.Outcome, zfs.Done); problem != "" {
				return problem, nil
			}
			return oneGroup(ctx, p, req, result)
		}},
		{"a bare snapshot of the group's name on a dataset not marked pending is someone else's: refused, nothing destroyed", refusedAtTheName(nil)},
		{"a whole group is found again after a member's volume was marked deleted; a new group on it is not made", func(ctx context.Context, p Pool, root string) (string, error) {
			req, first, err := groupTaken(ctx, p, root)
			if err != nil {
				return "", err
			}
			if err := p.Set(ctx, root+"/b", map[string]string{deleted: "true"}); err != nil {
				return "", err
			}
			again, problem, err := refusedGroup(ctx, p, root, req)
			if problem != "" || err != nil {
				return "again: " + problem, err
			}
			other := req
			other.Snapshot, other.Name = "g2", "group-2"
			fresh, problem, err := refusedGroup(ctx, p, root, other)
			if problem != "" || err != nil {
				return "a new group: " + problem, err
			}
			return firstProblem(want("outcome again", again.Outcome, zfs.Present),
				want("transaction group again", again.Members[0].CreateTxg, first.Members[0].CreateTxg),
				want("outcome of a new group", fresh.Outcome, zfs.NotOwned), want("at", fresh.At, root+"/b")), nil
		}},
	}
}
