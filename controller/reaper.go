package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// The reaper destroys what the driver keeps past its deletion: volumes marked
// deleted once nothing depends on them, and internal snapshots (volume from
// volume) left without a clone.
//
// Its passes must not grow with the node: reading every snapshot of every
// volume took 302 s at 10,000 volumes in the emulated guest (make bench),
// longer than the interval between passes. So a pass lists only the volumes,
// with their marks (one zfs list of the parents' children), and reads the
// snapshots of the few datasets that can hold something due: the volumes
// marked deleted, and the datasets it was told to look at (the origin of a
// clone that went, a volume whose internal snapshot could not be destroyed
// at once). Internal snapshots are destroyed deferred right after their
// clone is made, so ZFS removes them with the clone; only a daemon that died
// in between leaves one behind, which the sweep at start finds: one listing
// of everything, as a pass used to be, which also fills the snapshot index.

// reapWatch holds the datasets, besides the volumes marked deleted, whose
// snapshots the next pass reads.
type reapWatch struct {
	mu       sync.Mutex
	datasets map[string]bool
}

func (w *reapWatch) add(datasets ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.datasets == nil {
		w.datasets = map[string]bool{}
	}
	for _, dataset := range datasets {
		w.datasets[dataset] = true
	}
}

// take empties the set and returns what it held, sorted.
func (w *reapWatch) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	taken := make([]string, 0, len(w.datasets))
	for dataset := range w.datasets {
		taken = append(taken, dataset)
	}
	w.datasets = nil
	sort.Strings(taken)
	return taken
}

// watchSnapshots asks the next pass to read the snapshots of a volume (an
// internal snapshot on it may be due), and wakes the reaper.
func (s *Server) watchSnapshots(dataset string) {
	s.watch.add(dataset)
	s.kickReaper()
}

// held reports whether any of a volume's snapshots must outlive it: a CSI
// snapshot the CO still knows, or any snapshot with clones.
func (s *Server) held(snapshots []zfs.Dataset) bool {
	for _, snapshot := range snapshots {
		if snapshot.Type == zfs.Snapshot && (s.owner.LiveSnapshot(snapshot) || len(snapshot.Clones) > 0) {
			return true
		}
	}
	return false
}

// kickReaper asks the reaper for a pass soon, without waiting for it.
func (s *Server) kickReaper() {
	select {
	case s.reap <- struct{}{}:
	default:
	}
}

// RunReaper sweeps once (again after every failure, until one succeeds),
// then makes a pass every interval and whenever a deletion may have freed
// something, until ctx ends.
func (s *Server) RunReaper(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	swept := false
	for {
		start := time.Now()
		what, work := "reaper pass", s.Reap
		if !swept {
			what, work = "reaper sweep", s.Sweep
		}
		if err := work(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg(what + " failed")
		} else {
			swept = true
			s.log.Debug().Dur("duration", time.Since(start)).Msg(what)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-s.reap:
		}
	}
}

// Sweep reaps from one zfs list of everything under the parents, volumes
// and snapshots (and fills the snapshot index from it): what a daemon that
// stopped halfway may have left anywhere.
func (s *Server) Sweep(ctx context.Context) error {
	watched := s.watch.take() // the listing sees their snapshots too
	rows, err := s.listParents(ctx)
	if err != nil {
		s.watch.add(watched...)
		return err
	}
	var volumes, snapshots []zfs.Dataset
	for _, row := range rows {
		if row.Type == zfs.Snapshot {
			snapshots = append(snapshots, row)
		} else {
			volumes = append(volumes, row)
		}
	}
	return s.reapRows(ctx, volumes, snapshots)
}

// Reap makes one pass: one zfs list of the parents' children with the
// deletion mark, then, only if some volume is marked or some dataset is
// watched, one zfs list of their snapshots; then one destroy per volume or
// snapshot that is due. A failed destroy does not stop the pass; it returns
// the last error, and what failed waits for the next.
func (s *Server) Reap(ctx context.Context) error {
	watched := s.watch.take()
	volumes, err := s.zfs.List(ctx, zfs.ListOptions{Roots: s.cfg.ParentDatasets, Depth: 1,
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume}, UserProps: []string{s.props.Managed, s.props.Deleted},
		SkipMissing: true, SkipSuspended: true})
	if err != nil {
		s.watch.add(watched...)
		return err
	}
	roots := slices.Clone(watched)
	for _, row := range volumes {
		if s.owner.DeletedVolume(row) && !slices.Contains(watched, row.Name) {
			roots = append(roots, row.Name)
		}
	}
	if len(roots) == 0 {
		return nil
	}
	sort.Strings(roots)
	snapshots, err := s.zfs.List(ctx, zfs.ListOptions{Roots: roots, Depth: 1, Types: []zfs.Type{zfs.Snapshot},
		UserProps: s.props.All(), SkipMissing: true, SkipSuspended: true})
	if err != nil {
		s.watch.add(watched...)
		return err
	}
	return s.reapRows(ctx, volumes, snapshots)
}

// reapRows destroys what is due among listed volumes and snapshots: a
// volume marked deleted whose listed snapshots do not hold it (the caller
// lists every snapshot of each such volume), and an internal snapshot
// without clones.
func (s *Server) reapRows(ctx context.Context, volumes, snapshots []zfs.Dataset) error {
	snapshotsOf := map[string][]zfs.Dataset{}
	for _, row := range snapshots {
		dataset, _, _ := strings.Cut(row.Name, "@")
		snapshotsOf[dataset] = append(snapshotsOf[dataset], row)
	}
	var failed error
	for _, row := range volumes {
		if s.owner.DeletedVolume(row) && !s.held(snapshotsOf[row.Name]) {
			if err := s.reapOne(ctx, row.Name, false, zfs.DestroyOptions{}); err != nil {
				failed = err
			}
		}
	}
	for _, row := range snapshots {
		// A pull's round is internal and has no clone, but another node
		// may be receiving it or need it as the base of the next round:
		// it goes when that pull ends (pulls.go), not here.
		if s.owner.InternalSnapshot(row) && len(row.Clones) == 0 && row.User[s.props.PullFor] == "" {
			if err := s.reapOne(ctx, row.Name, true, zfs.DestroyOptions{Defer: true}); err != nil {
				failed = err
			}
		}
	}
	return failed
}

// reapCommandTimeout bounds each destroy of a reaper pass: a command stuck
// in the kernel (a suspended pool) must give its volume's lock back, and the
// pass must go on to the other volumes.
const reapCommandTimeout = 2 * time.Minute

// reapOne destroys one internal snapshot, or one volume marked deleted with
// the same guarded destroy as DeleteVolume: it checks, in the transaction,
// that the volume still carries the deleted mark and that nothing (a child
// dataset, a user hold, a snapshot the CO knows, a clone) stops it, so a
// destroy never goes further than the driver's own volume.
func (s *Server) reapOne(ctx context.Context, name string, snapshot bool, options zfs.DestroyOptions) error {
	dataset, _, _ := strings.Cut(name, "@")
	// Busy: the holder (a DeleteSnapshot that has just freed this volume,
	// say) wakes the reaper when it lets go.
	release, err := s.inflight.AcquireOrWake(s.reap, datasetLock(dataset))
	if err != nil {
		if snapshot {
			s.watch.add(dataset) // busy: the next pass looks again
		}
		return nil // a volume marked deleted is in every pass's listing
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, reapCommandTimeout)
	defer cancel()
	if snapshot {
		err = s.zfs.Destroy(ctx, name, options)
	} else {
		var result zfs.DestroyResult
		result, err = s.zfs.DestroyGuarded(ctx, zfs.DestroyRequest{Name: name, Guard: zfs.Guard{Owned: s.props.Deleted},
			Keep: []string{s.props.SnapshotName}})
		switch {
		case err != nil:
		case result.Outcome == zfs.Blocked:
			err = fmt.Errorf("%s is deleted but cannot be destroyed: %s", name, result.Reason)
		case result.Outcome != zfs.Done:
			return nil // no longer due; the next pass sees it as it is
		}
	}
	if err != nil && !errors.Is(err, zfs.ErrNotFound) {
		if snapshot {
			s.watch.add(dataset) // not in the next pass's listing of marked volumes otherwise
		}
		return err
	}
	s.log.Info().Str("dataset", name).Msg("reaped")
	return nil
}
