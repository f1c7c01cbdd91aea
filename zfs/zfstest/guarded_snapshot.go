package zfstest

import (
	"context"
	"errors"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// long: the table of snapshot cases, one a row
func snapshotCases() []GuardedCase {
	request := func(v, snapshot, value string) zfs.SnapshotRequest {
		return zfs.SnapshotRequest{Name: v + "@" + snapshot, Properties: map[string]string{named: value}, Guard: guard,
			Unique: named, SizeProperty: size, Internal: internal, Pending: pending}
	}
	return []GuardedCase{
		{"snapshot: a new one gets its properties and its volume's size, type and block size", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, true); err != nil {
				return "", err
			}
			result, row, err := snapshotRead(ctx, p, request(v, "s", "one"))
			if err != nil {
				return "", err
			}
			volumeRow, err := zfs.Get(ctx, p, v, []string{pending})
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Done), want("name property", row.User[named], "one"),
				want("pending mark left on the volume", volumeRow.User[pending], ""),
				want("reported creation is the snapshot's creation property", result.Snapshot.Creation.Unix(), row.Creation.Unix()),
				want("pending mark on the snapshot", row.User[pending], ""),
				want("size property", row.User[size], "67108864"), want("volume type", result.Volume.Type, zfs.Volume),
				want("volume size", result.Volume.VolSize, 64<<20), want("block size", result.Volume.VolBlockSize, 32768),
				want("reported size", result.Snapshot.User[size], "67108864")), nil
		}},
		{"snapshot: a filesystem's size is its refquota", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false); err != nil {
				return "", err
			}
			result, err := p.SnapshotGuarded(ctx, request(v, "s", "one"))
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Done), want("refquota", result.Volume.RefQuota, 32<<20),
				want("reported size", result.Snapshot.User[size], "33554432")), nil
		}},
		{"snapshot: the value on one of the others of the same volume is Present, nothing made", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false, "one"); err != nil {
				return "", err
			}
			req := request(v, "other", "one")
			req.Others = []string{v + "@one"}
			result, problem, err := snapshotUnchanged(ctx, p, root, req)
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Present), want("snapshot", result.Snapshot.Name, v+"@one"), problem), nil
		}},
		{"snapshot: the value at the requested name is Present (a retry), nothing made", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false, "one"); err != nil {
				return "", err
			}
			result, problem, err := snapshotUnchanged(ctx, p, root, request(v, "one", "one"))
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Present), want("snapshot", result.Snapshot.Name, v+"@one"),
				want("volume type", result.Volume.Type, zfs.Filesystem), problem), nil
		}},
		{"snapshot: the value on one of the others is Taken, nothing made", func(ctx context.Context, p Pool, root string) (string, error) {
			v, w := root+"/v", root+"/w"
			if err := volume(ctx, p, v, false); err != nil {
				return "", err
			}
			if err := volume(ctx, p, w, false, "one"); err != nil {
				return "", err
			}
			req := request(v, "one", "one")
			req.Others = []string{w + "@one", root + "/missing@one"}
			result, problem, err := snapshotUnchanged(ctx, p, root, req)
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Taken), want("snapshot", result.Snapshot.Name, w+"@one"), problem), nil
		}},
		{"snapshot: one an interrupted run left without properties is taken over", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false); err != nil {
				return "", err
			}
			// What a run cut off between its snapshot and its properties
			// leaves: the volume marked pending with the value, the snapshot bare.
			if err := p.Set(ctx, v, map[string]string{pending: "one"}); err != nil {
				return "", err
			}
			if err := p.Snapshot(ctx, v+"@s", nil); err != nil {
				return "", err
			}
			result, row, err := snapshotRead(ctx, p, request(v, "s", "one"))
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.Done), want("name property", row.User[named], "one"),
				want("size property", row.User[size], "33554432"), want("pending mark", row.User[pending], "")), nil
		}},
		{"snapshot: an unmarked snapshot at the name (an operator's) is ErrExists and kept bare, also while another value is pending", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false); err != nil {
				return "", err
			}
			if err := p.Snapshot(ctx, v+"@s", nil); err != nil {
				return "", err
			}
			var errs []error
			problem, err := unchanged(ctx, p, root, func() error {
				for _, mark := range []string{"", "another"} {
					if mark != "" {
						if err := p.Set(ctx, v, map[string]string{pending: mark}); err != nil {
							return err
						}
					}
					_, refused := p.SnapshotGuarded(ctx, request(v, "s", "one"))
					if errors.Is(refused, zfs.ErrUnsupported) {
						return refused
					}
					errs = append(errs, refused)
				}
				return nil
			})
			if err != nil {
				return "", err
			}
			row, err := zfs.Get(ctx, p, v+"@s", []string{named, size})
			if err != nil {
				return "", err
			}
			return firstProblem(problem, want("unmarked: ErrExists", errors.Is(errs[0], zfs.ErrExists), true),
				want("another value pending: ErrExists", errors.Is(errs[1], zfs.ErrExists), true),
				want("name property", row.User[named], ""), want("size property", row.User[size], "")), nil
		}},
		{"snapshot: a retry after its volume was marked deleted finds the snapshot it cut, and makes none", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false, "one"); err != nil {
				return "", err
			}
			if err := p.Set(ctx, v, map[string]string{deleted: "true"}); err != nil {
				return "", err
			}
			var again, fresh zfs.SnapshotResult
			problem, err := unchanged(ctx, p, root, func() (err error) {
				if again, err = p.SnapshotGuarded(ctx, request(v, "one", "one")); err != nil {
					return err
				}
				fresh, err = p.SnapshotGuarded(ctx, request(v, "two", "two"))
				return err
			})
			if err != nil {
				return "", err
			}
			return firstProblem(problem, want("outcome of the retry", again.Outcome, zfs.Present),
				want("snapshot", again.Snapshot.Name, v+"@one"), want("creation reported", again.Snapshot.Creation.Unix() > 0, true),
				want("outcome of a new name", fresh.Outcome, zfs.NotOwned)), nil
		}},
		{"snapshot: one marked internal at the name is ErrExists", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false); err != nil {
				return "", err
			}
			if err := p.Snapshot(ctx, v+"@s", map[string]string{internal: "true"}); err != nil {
				return "", err
			}
			_, err := p.SnapshotGuarded(ctx, request(v, "s", "one"))
			if errors.Is(err, zfs.ErrUnsupported) {
				return "", err
			}
			return want("error is ErrExists", errors.Is(err, zfs.ErrExists), true), nil
		}},
		{"snapshot: a volume without the owned mark is not snapshotted", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := p.Create(ctx, v, zfs.CreateOptions{}); err != nil {
				return "", err
			}
			result, problem, err := snapshotUnchanged(ctx, p, root, request(v, "s", "one"))
			if err != nil {
				return "", err
			}
			return firstProblem(want("outcome", result.Outcome, zfs.NotOwned), problem), nil
		}},
		{"snapshot: a snapshot destroyed deferred does not keep its value", func(ctx context.Context, p Pool, root string) (string, error) {
			v := root + "/v"
			if err := volume(ctx, p, v, false, "one"); err != nil {
				return "", err
			}
			if err := p.Clone(ctx, v+"@one", root+"/clone", nil); err != nil {
				return "", err
			}
			if err := p.Destroy(ctx, v+"@one", zfs.DestroyOptions{Defer: true}); err != nil {
				return "", err
			}
			result, err := p.SnapshotGuarded(ctx, request(v, "again", "one"))
			if err != nil {
				return "", err
			}
			return want("outcome", result.Outcome, zfs.Done), nil
		}},
	}
}

// snapshotRead runs SnapshotGuarded and reads the snapshot's properties.
func snapshotRead(ctx context.Context, p Pool, req zfs.SnapshotRequest) (zfs.SnapshotResult, zfs.Dataset, error) {
	result, err := p.SnapshotGuarded(ctx, req)
	if err != nil {
		return result, zfs.Dataset{}, err
	}
	row, err := zfs.Get(ctx, p, req.Name, []string{named, size, pending})
	return result, row, err
}
