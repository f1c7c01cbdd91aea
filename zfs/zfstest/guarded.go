// Package zfstest holds what tests of ZFS code share: Fake, a stateful
// in-memory ZFS that refuses what ZFS refuses, and the table of guarded
// changes (the channel programs) that runs against the Fake in
// `go test` and against real ZFS in `make e2e`, so that the two cannot drift
// apart. A case that passes on one and fails on the other is a fake that
// does not behave like ZFS.
package zfstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Pool is a ZFS to run cases on, with what only an operator does.
type Pool interface {
	zfs.Interface
	// Hold places a user hold on a snapshot (`zfs hold`).
	Hold(ctx context.Context, snapshot string) error
	// Release takes the hold away (`zfs release`).
	Release(ctx context.Context, snapshot string) error
}

// GuardedCase is one behaviour of a guarded change. Run builds what it needs
// under root (an empty filesystem of its own) and returns a problem, or ""
// when the pool behaved as ZFS does.
type GuardedCase struct {
	Name string
	Run  func(ctx context.Context, p Pool, root string) (problem string, err error)
}

// The user properties the cases use, as the driver uses its own.
const (
	owned    = "zfstest.dev:managed"
	deleted  = "zfstest.dev:deleted"
	named    = "zfstest.dev:snapshot-name"
	internal = "zfstest.dev:internal"
	keep     = "zfstest.dev:keep"
	size     = "zfstest.dev:size"
	mark     = "zfstest.dev:mark"
	pending  = "zfstest.dev:snapshotting"
)

var guard = zfs.Guard{Owned: owned, Excluded: deleted}

// RunGuardedCase runs one case: its own root under parent, destroyed after.
// ErrUnsupported from SnapshotGuarded (no zfs.sync.set_prop) skips the case: skip
// reports it.
func RunGuardedCase(ctx context.Context, p Pool, parent string, index int, c GuardedCase) (problem string, skip bool, err error) {
	root := fmt.Sprintf("%s/case-%d", parent, index)
	if err := p.Create(ctx, root, zfs.CreateOptions{}); err != nil {
		return "", false, err
	}
	defer p.Destroy(context.WithoutCancel(ctx), root, zfs.DestroyOptions{Recursive: true})
	problem, err = c.Run(ctx, p, root)
	if errors.Is(err, zfs.ErrUnsupported) {
		return "", true, nil
	}
	return problem, false, err
}

// names lists everything under root, snapshots included, sorted.
func names(ctx context.Context, p Pool, root string) ([]string, error) {
	rows, err := p.List(ctx, zfs.ListOptions{Roots: []string{root}, Depth: -1,
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(rows))
	for _, row := range rows {
		out = append(out, row.Name)
	}
	slices.Sort(out)
	return out, nil
}

// unchanged runs change and reports a problem when anything under root
// appeared or went.
func unchanged(ctx context.Context, p Pool, root string, change func() error) (string, error) {
	before, err := names(ctx, p, root)
	if err != nil {
		return "", err
	}
	if err := change(); err != nil {
		return "", err
	}
	after, err := names(ctx, p, root)
	if err != nil {
		return "", err
	}
	if !slices.Equal(before, after) {
		return fmt.Sprintf("changed %v into %v", before, after), nil
	}
	return "", nil
}

// volume makes an owned filesystem (or a 64 MiB zvol) with snapshots.
func volume(ctx context.Context, p Pool, name string, zvol bool, snapshots ...string) error {
	options := zfs.CreateOptions{Properties: map[string]string{owned: "true"}}
	if zvol {
		// A block size that is neither 2.1's default (8K) nor 2.2's (16K):
		// the cases must read the volume's, not assume the default.
		options.VolSize = 64 << 20
		options.Properties["volblocksize"] = "32768"
	} else {
		options.Properties["refquota"] = "33554432"
	}
	if err := p.Create(ctx, name, options); err != nil {
		return err
	}
	for _, snapshot := range snapshots {
		if err := p.Snapshot(ctx, name+"@"+snapshot, map[string]string{named: snapshot}); err != nil {
			return err
		}
	}
	return nil
}

// snapshotUnchanged runs SnapshotGuarded where it must change nothing.
func snapshotUnchanged(ctx context.Context, p Pool, root string, req zfs.SnapshotRequest) (zfs.SnapshotResult, string, error) {
	var result zfs.SnapshotResult
	problem, err := unchanged(ctx, p, root, func() (err error) {
		result, err = p.SnapshotGuarded(ctx, req)
		return err
	})
	return result, problem, err
}

func want(what string, got, wanted any) string {
	if fmt.Sprint(got) == fmt.Sprint(wanted) {
		return ""
	}
	return fmt.Sprintf("%s: got %v, want %v", what, got, wanted)
}

func firstProblem(problems ...string) string {
	for _, problem := range problems {
		if problem != "" {
			return problem
		}
	}
	return ""
}

// GuardedCases are the behaviours of DestroyGuarded, SnapshotGuarded,
// DestroySnapshotGuarded and SnapshotGroup the driver relies on.
func GuardedCases() []GuardedCase {
	return slices.Concat(destroyCases(), snapshotCases(), snapshotDestroyCases(), groupCases())
}

// long: the table of destroy cases, one a row
func destroyCases() []GuardedCase {
	outcome := func(setup func(ctx context.Context, p Pool, v string) error, req func(v string) zfs.DestroyRequest, wanted zfs.Outcome) func(context.Context, Pool, string) (string, error) {
		return func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := setup(ctx, p, v); err != nil {
				return "", err
			}
			var result zfs.DestroyResult
			problem, err := unchanged(ctx, p, root, func() (err error) {
				result, err = p.DestroyGuarded(ctx, req(v))
				return err
			})
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, wanted), problem), nil
		}
	}
	plain := func(v string) zfs.DestroyRequest {
		return zfs.DestroyRequest{Name: v, Guard: guard, Keep: []string{keep}}
	}
	return []GuardedCase{
		{"destroy: a dataset without the owned mark is not touched", outcome(func(ctx context.Context, p Pool, v string) error {
			return p.Create(ctx, v, zfs.CreateOptions{})
		}, plain, zfs.NotOwned)},
		{"destroy: a dataset with the excluded mark is not touched", outcome(func(ctx context.Context, p Pool, v string) error {
			return p.Create(ctx, v, zfs.CreateOptions{Properties: map[string]string{owned: "true", deleted: "1"}})
		}, plain, zfs.NotOwned)},
		{"destroy: a snapshot with a clone holds the volume", outcome(func(ctx context.Context, p Pool, v string) error {
			if err := volume(ctx, p, v, false, "a", "b"); err != nil {
				return err
			}
			return p.Clone(ctx, v+"@b", v+"-clone", nil)
		}, plain, zfs.Held)},
		{"destroy: a snapshot carrying a keep property holds the volume", outcome(func(ctx context.Context, p Pool, v string) error {
			if err := volume(ctx, p, v, true, "a", "b"); err != nil {
				return err
			}
			return p.Set(ctx, v+"@b", map[string]string{keep: "yes"})
		}, plain, zfs.Held)},
		{"destroy: a child dataset blocks it before anything is destroyed", outcome(func(ctx context.Context, p Pool, v string) error {
			if err := volume(ctx, p, v, false, "a", "b"); err != nil {
				return err
			}
			return p.Create(ctx, v+"/by-hand", zfs.CreateOptions{})
		}, plain, zfs.Blocked)},
		{"destroy: a user hold on its last snapshot blocks it before anything is destroyed", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, true, "a", "b", "c"); err != nil {
				return "", err
			}
			if err := p.Hold(ctx, v+"@c"); err != nil {
				return "", err
			}
			defer p.Release(context.WithoutCancel(ctx), v+"@c")
			var result zfs.DestroyResult
			problem, err := unchanged(ctx, p, root, func() (err error) {
				result, err = p.DestroyGuarded(ctx, plain(v))
				return err
			})
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Blocked), problem,
				want("reason names the snapshot", strings.Contains(result.Reason, v+"@c"), true)), nil
		}},
		{"destroy: an owned volume goes with its snapshots", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, true, "a", "b"); err != nil {
				return "", err
			}
			result, err := p.DestroyGuarded(ctx, plain(v))
			if err != nil {
				return "", err
			}
			left, err := names(ctx, p, root)
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Done), want("type", result.Type, zfs.Volume),
				want("left", left, []string{root})), nil
		}},
		{"destroy: a clone reports its origin and the origin's inherited mark", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false, "a"); err != nil {
				return "", err
			}
			if err := p.Set(ctx, v, map[string]string{mark: "x"}); err != nil {
				return "", err
			}
			clone := root + "/clone"
			// Legacy-mounted, as the driver's are: ZFS would mount it, and a
			// mounted dataset is busy.
			if err := p.Clone(ctx, v+"@a", clone, map[string]string{owned: "true", "mountpoint": "legacy"}); err != nil {
				return "", err
			}
			result, err := p.DestroyGuarded(ctx, zfs.DestroyRequest{Name: clone, Guard: guard, OriginMarks: []string{mark}})
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Done), want("origin", result.Origin, v+"@a"),
				want("origin marked", result.OriginMarked, true)), nil
		}},
		{"destroy: a missing dataset is ErrNotFound", func(ctx context.Context, p Pool, root string) (string, error) {
			_, err := p.DestroyGuarded(ctx, plain(root+"/nothing"))
			return want("error is ErrNotFound", errors.Is(err, zfs.ErrNotFound), true), nil
		}},
	}
}

func snapshotDestroyCases() []GuardedCase {
	return []GuardedCase{
		{"destroy snapshot: a named one goes, and the mark inherited from its volume is reported", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false, "s"); err != nil {
				return "", err
			}
			if err := p.Set(ctx, v, map[string]string{mark: "x"}); err != nil {
				return "", err
			}
			result, err := p.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: v + "@s", Named: named, Excluded: internal, Report: mark})
			if err != nil {
				return "", err
			}
			left, err := names(ctx, p, root)
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Done), want("reported", result.Reported, "x"),
				want("left", left, []string{root, v})), nil
		}},
		{"destroy snapshot: one with a clone is marked and stays until the clone goes", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false, "s"); err != nil {
				return "", err
			}
			if err := p.Clone(ctx, v+"@s", root+"/clone", nil); err != nil {
				return "", err
			}
			result, err := p.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: v + "@s", Named: named})
			if err != nil {
				return "", err
			}
			row, err := zfs.Get(ctx, p, v+"@s", nil)
			if err != nil {
				return "", err
			}
			again, err := p.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: v + "@s", Named: named})
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Done), want("defer_destroy", row.DeferDestroy, true),
				want("outcome of a second destroy", again.Outcome, zfs.NotOwned)), nil
		}},
		{"destroy snapshot: one without the name or with the excluded mark is not touched", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false, "s"); err != nil {
				return "", err
			}
			if err := p.Snapshot(ctx, v+"@plain", nil); err != nil {
				return "", err
			}
			if err := p.Set(ctx, v+"@s", map[string]string{internal: "true"}); err != nil {
				return "", err
			}
			var outcomes []zfs.Outcome
			problem, err := unchanged(ctx, p, root, func() error {
				for _, name := range []string{v + "@plain", v + "@s"} {
					result, err := p.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: name, Named: named, Excluded: internal})
					if err != nil {
						return err
					}
					outcomes = append(outcomes, result.Outcome)
				}
				return nil
			})
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcomes", outcomes, []zfs.Outcome{zfs.NotOwned, zfs.NotOwned}), problem), nil
		}},
		{"destroy snapshot: a missing one is ErrNotFound", func(ctx context.Context, p Pool, root string) (string, error) {
			_, err := p.DestroySnapshotGuarded(ctx, zfs.SnapshotDestroyRequest{Name: root + "@nothing", Named: named})
			return want("error is ErrNotFound", errors.Is(err, zfs.ErrNotFound), true), nil
		}},
	}
}
