package controller

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// DeleteVolume implements csi.ControllerServer (ARCHITECTURE.md decision 7). A volume
// nothing depends on is destroyed with its leftover snapshots. A volume with
// CSI snapshots, or with snapshots that have clones, is marked deleted and
// read-only instead: hidden from listings, destroyed by the reaper once its
// last dependent is gone. The ownership check and the destroy are one zfs
// command (zfs.Guarded); marking is a second.
//
// Read top to bottom: the plan (planDelete: which dataset, without
// touching ZFS), the volume's lock, then the act (removeVolume).
func (s *Server) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	defer s.volumesChanged()
	plan, ours, err := s.planDelete(req)
	if err != nil {
		return nil, err
	}
	if !ours {
		return &csi.DeleteVolumeResponse{}, nil // nothing of ours to delete
	}
	release, err := s.inflight.Acquire(datasetLock(plan.dataset))
	if err != nil {
		return nil, err
	}
	defer release()
	defer s.sources.forgetVolume(plan.dataset)
	return s.removeVolume(ctx, plan)
}

// deletePlan is a validated DeleteVolume request.
type deletePlan struct {
	volumeID string
	dataset  string
}

// planDelete resolves the volume ID to its dataset without touching ZFS.
// ours is false for an ID that names nothing of this driver's: there is
// nothing of ours to delete, and the call succeeds.
func (s *Server) planDelete(req *csi.DeleteVolumeRequest) (plan deletePlan, ours bool, err error) {
	if req.GetVolumeId() == "" {
		return plan, false, invalid("volume_id is required")
	}
	dataset, err := s.volumeDataset(req.GetVolumeId())
	var foreign *rules.ForeignNodeError
	if errors.As(err, &foreign) {
		// Answering OK would make the CO forget a volume that still exists
		// on its node; the CO must ask that node.
		return plan, false, status.Errorf(codes.FailedPrecondition, "volume %q: %v", rules.Bounded(req.GetVolumeId()), err)
	}
	if err != nil {
		return plan, false, nil
	}
	return deletePlan{volumeID: req.GetVolumeId(), dataset: dataset}, true, nil
}

// removeVolume acts on a planned deletion: one guarded destroy, or, when
// something must outlive the volume, the mark that hides it until the
// reaper can destroy it.
func (s *Server) removeVolume(ctx context.Context, plan deletePlan) (*csi.DeleteVolumeResponse, error) {
	result, err := s.destroyVolume(ctx, plan.dataset)
	switch {
	case errors.Is(err, zfs.ErrNotFound):
		return &csi.DeleteVolumeResponse{}, nil
	case err != nil:
		return nil, err
	case result.Outcome == zfs.NotOwned:
		// Already marked deleted, or not ours: either way nothing to do
		// here; unless it is data an operator adopted to keep, which the
		// guard never lets a destroy touch: the driver forgets it instead.
		return &csi.DeleteVolumeResponse{}, s.forgetRetained(ctx, plan.dataset)
	case result.Outcome == zfs.Blocked:
		// Nothing was destroyed; an operator must act before a retry can.
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q cannot be deleted: %s", rules.Bounded(plan.volumeID), result.Reason)
	case result.Outcome == zfs.Done:
		if result.OriginMarked {
			// A clone's going can free what the reaper waits for: its
			// origin, when that is an internal snapshot a daemon that
			// stopped halfway did not destroy deferred, or its origin's
			// volume, when that is marked deleted. A pass reads only the
			// snapshots of volumes marked deleted and of those it is told
			// to look at.
			origin, _, _ := strings.Cut(result.Origin, "@")
			s.watchSnapshots(origin)
		}
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err := s.zfs.Set(ctx, plan.dataset, map[string]string{s.props.Deleted: "true", "readonly": "on"}); err != nil {
		return nil, err
	}
	s.log.Info().Str("dataset", plan.dataset).Msg("volume marked deleted; it goes when its snapshots and clones do")
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

// forgetRetained releases a volume adopted in retain mode that DeleteVolume
// was asked to delete: its data stays, the driver's marks go.
func (s *Server) forgetRetained(ctx context.Context, dataset string) error {
	row, err := zfs.Get(ctx, s.zfs, dataset, s.props.All())
	if errors.Is(err, zfs.ErrNotFound) || (err == nil && !s.owner.Retained(row)) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = s.release(ctx, row)
	return err
}
