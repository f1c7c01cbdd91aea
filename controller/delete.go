package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// DeleteVolume implements csi.ControllerServer (ARCHITECTURE.md decision 7). A volume
// nothing depends on is destroyed with its leftover snapshots. A volume with
// CSI snapshots, or with snapshots that have clones, is marked deleted and
// read-only instead: hidden from listings, destroyed by the reaper once its
// last dependent is gone. The ownership check and the destroy are one zfs
// command (zfs.Guarded); marking is a second.
func (s *Server) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	defer s.volumesChanged()
	if req.GetVolumeId() == "" {
		return nil, invalid("volume_id is required")
	}
	dataset, err := s.volumeDataset(req.GetVolumeId())
	var foreign *driver.ForeignNodeError
	if errors.As(err, &foreign) {
		// Answering OK would make the CO forget a volume that still exists
		// on its node; the CO must ask that node.
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q: %v", driver.Bounded(req.GetVolumeId()), err)
	}
	if err != nil {
		return &csi.DeleteVolumeResponse{}, nil // not an ID of ours: nothing of ours to delete
	}
	release, err := s.inflight.Acquire(datasetLock(dataset))
	if err != nil {
		return nil, err
	}
	defer release()
	defer s.sources.forgetVolume(dataset)

	result, err := s.destroyVolume(ctx, dataset)
	switch {
	case errors.Is(err, zfs.ErrNotFound):
		return &csi.DeleteVolumeResponse{}, nil
	case err != nil:
		return nil, err
	case result.Outcome == zfs.NotOwned:
		// Already marked deleted, or not ours: either way nothing to do here.
		return &csi.DeleteVolumeResponse{}, nil
	case result.Outcome == zfs.Blocked:
		// Nothing was destroyed; an operator must act before a retry can.
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q cannot be deleted: %s", driver.Bounded(req.GetVolumeId()), result.Reason)
	case result.Outcome == zfs.Done:
		if result.OriginMarked {
			// A clone's going can free what the reaper waits for: its
			// origin, when that is an internal snapshot, or its origin's
			// volume, when that is marked deleted. A pass lists every
			// volume, so only then.
			s.kickReaper()
		}
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err := s.zfs.Set(ctx, dataset, map[string]string{s.props.Deleted: "true", "readonly": "on"}); err != nil {
		return nil, err
	}
	s.log.Info().Str("dataset", dataset).Msg("volume marked deleted; it goes when its snapshots and clones do")
	return &csi.DeleteVolumeResponse{}, nil
}

// zvolBusyRetries bounds how often destroying a zvol is retried while it is
// busy: right after a zvol appears, udev opens it to probe it (blkid), and
// `zfs destroy` fails with "dataset is busy" for that moment (seen on ZFS 2.1
// and 2.3 in the guest, in csi-sanity's create-then-delete specs). A dataset
// that is busy is mounted and in use: that is not retried.
const zvolBusyRetries = 5

// destroyVolume destroys a volume of the driver's with its leftover
// snapshots, unless something must outlive it (outcome Held) or it is not a
// live volume of the driver's (NotOwned): one guarded zfs command, retried
// while a zvol is busy.
func (s *Server) destroyVolume(ctx context.Context, dataset string) (zfs.DestroyResult, error) {
	guard := s.owner.VolumeGuard()
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		result, err := s.zfs.DestroyGuarded(ctx, zfs.DestroyRequest{Name: dataset, Guard: guard,
			Keep: []string{s.props.SnapshotName}, OriginMarks: []string{s.props.Internal, s.props.Deleted}})
		if !errors.Is(err, zfs.ErrBusy) || result.Type != zfs.Volume || attempt == zvolBusyRetries {
			return result, err
		}
		select {
		case <-ctx.Done():
			return result, err
		case <-time.After(delay):
		}
		delay *= 2
	}
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

// RunReaper destroys volumes marked deleted once nothing depends on them, and
// internal snapshots left without clones. It runs once at once, then every
// interval and whenever a deletion may have freed something, until ctx ends.
func (s *Server) RunReaper(ctx context.Context, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		start := time.Now()
		if err := s.Reap(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("reaper pass failed")
		} else {
			s.log.Debug().Dur("duration", time.Since(start)).Msg("reaper pass")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-s.reap:
		}
	}
}

// Reap makes one pass: one zfs list of everything under the parents, then one
// destroy per volume or snapshot that is due. A failed destroy does not stop
// the pass; it returns the last error, and what failed waits for the next.
func (s *Server) Reap(ctx context.Context) error {
	rows, err := s.listParents(ctx)
	if err != nil {
		return err
	}
	snapshotsOf := map[string][]zfs.Dataset{}
	for _, row := range rows {
		if dataset, _, found := strings.Cut(row.Name, "@"); found {
			snapshotsOf[dataset] = append(snapshotsOf[dataset], row)
		}
	}
	var failed error
	for _, row := range rows {
		var victim string
		var options zfs.DestroyOptions
		switch {
		case s.owner.DeletedVolume(row) && !s.held(snapshotsOf[row.Name]):
			victim = row.Name
		case s.owner.InternalSnapshot(row) && len(row.Clones) == 0:
			victim, options = row.Name, zfs.DestroyOptions{Defer: true}
		default:
			continue
		}
		if err := s.reapOne(ctx, victim, row.Type == zfs.Snapshot, options); err != nil {
			failed = err
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
	release, err := s.inflight.Acquire(datasetLock(dataset))
	if err != nil {
		return nil // busy: the next pass will see it again
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
		return err
	}
	s.log.Info().Str("dataset", name).Msg("reaped")
	return nil
}
