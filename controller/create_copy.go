package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// createCopy makes a volume an independent copy of a snapshot or volume of
// this node (sourceMode=copy): its source resolved and checked against the
// plan (resolveSource), then `zfs send | zfs receive` through pipes, apart
// from the call (create_jobs.go), which waits for it as long as it can. A
// copy costs a send of the whole source, so the volume an earlier call
// copied is looked for first, and finished when a call was cut off before
// it was (completeCopy).
func (s *Server) createCopy(ctx context.Context, plan volumePlan, locks *heldLocks) (*csi.CreateVolumeResponse, error) {
	src, size, err := s.checkedSource(ctx, plan)
	if err != nil {
		return nil, err
	}
	existing, _, err := s.findByName(ctx, plan)
	if err == nil && existing != nil {
		*existing, err = s.completeCopy(ctx, plan, src, *existing, size)
	}
	if err != nil || existing != nil {
		return s.existingVolume(plan, existing, err)
	}
	for generation, attempts := 1, 0; attempts < rules.MaxGenerations; attempts++ {
		row, err := s.copyInto(ctx, plan, src, s.generationDataset(plan, generation), size, locks)
		if err == nil {
			return &csi.CreateVolumeResponse{Volume: s.csiVolume(row)}, nil
		}
		if !errors.Is(err, zfs.ErrExists) {
			return nil, err
		}
		existing, free, err := s.findByName(ctx, plan)
		if err == nil && existing != nil {
			*existing, err = s.completeCopy(ctx, plan, src, *existing, size)
		}
		if err != nil || existing != nil {
			return s.existingVolume(plan, existing, err)
		}
		if free == 0 {
			break
		}
		generation = free
	}
	return nil, generationsHeld(plan)
}

// copyInto copies the source into dataset. The copy is received first and
// grown after (receive refuses volsize): finishCopy.
func (s *Server) copyInto(ctx context.Context, plan volumePlan, src *source, dataset string, size uint64, locks *heldLocks) (zfs.Dataset, error) {
	properties := s.volumeProperties(plan, size, true)
	row := s.madeRow(plan, dataset, size, properties)
	snapshot, cleanup, err := s.takeSentSnapshot(ctx, src, dataset)
	if err != nil {
		return row, err
	}
	grow := sourceGrowth(plan, src.size, size)
	return row, s.copyVolume(ctx, plan, locks, snapshot, dataset, properties, grow, cleanup)
}

// copyVolume makes dataset an independent copy of snapshot and finishes it,
// apart from the call (see copyJobs), which waits for it as long as it can.
func (s *Server) copyVolume(ctx context.Context, plan volumePlan, locks *heldLocks, snapshot, dataset string,
	properties, grow map[string]string, cleanup func(context.Context)) error {
	job := s.copies.start(plan.name, snapshot, dataset, func(ctx context.Context, received *atomic.Uint64) error {
		defer cleanup(ctx)
		err := s.zfs.Copy(ctx, snapshot, dataset, zfs.CopyOptions{Properties: properties, Received: received})
		if err != nil {
			return err
		}
		return s.finishCopy(ctx, dataset, snapshot, grow)
	})
	handedOver, err := job.await(ctx, locks.release)
	if handedOver {
		locks.take()
	}
	return err
}

// finishCopy is what a copy needs after its receive: a zvol's new size and
// reservation (receive refuses volsize), then the received snapshot goes.
// The snapshot goes last because it marks the copy unfinished: a retry
// after a crash between the two meets it and finishes the copy
// (completeCopy) instead of finding a volume smaller than was asked for.
func (s *Server) finishCopy(ctx context.Context, dataset, sourceSnapshot string, grow map[string]string) error {
	if len(grow) > 0 {
		if err := s.zfs.Set(ctx, dataset, grow); err != nil {
			if errors.Is(err, zfs.ErrNoSpace) || errors.Is(err, zfs.ErrInvalid) {
				// It would fail the same way on every retry: take it back.
				s.destroyQuietly(context.WithoutCancel(ctx), dataset, zfs.DestroyOptions{Recursive: true})
			}
			return err
		}
	}
	err := s.zfs.Destroy(ctx, receivedSnapshot(dataset, sourceSnapshot), zfs.DestroyOptions{})
	if errors.Is(err, zfs.ErrNotFound) {
		return nil
	}
	return err
}

// receivedSnapshot is the snapshot a receive leaves on the copy: the sent
// snapshot's name on the new dataset.
func receivedSnapshot(dataset, sourceSnapshot string) string {
	return dataset + "@" + sourceSnapshot[strings.IndexByte(sourceSnapshot, '@')+1:]
}

// completeCopy finishes a copy that an interrupted call received but did
// not finish (its received snapshot is still there: finishCopy). Any other
// existing volume is returned as it is.
func (s *Server) completeCopy(ctx context.Context, plan volumePlan, src *source, row zfs.Dataset, size uint64) (zfs.Dataset, error) {
	if !plan.params.copySource || row.User[s.props.Source] != plan.sourceID || row.User[s.props.ParamsHash] != plan.params.hash {
		return row, nil
	}
	sent := s.sentSnapshot(src, row.Name)
	_, err := zfs.Get(ctx, s.zfs, receivedSnapshot(row.Name, sent), nil)
	switch {
	case errors.Is(err, zfs.ErrNotFound):
		return row, nil
	case err != nil:
		return row, err
	}
	s.log.Info().Str("dataset", row.Name).Msg("finishing a copy an interrupted call received")
	if err := s.finishCopy(ctx, row.Name, sent, sourceGrowth(plan, capacity(row), size)); err != nil {
		return row, err
	}
	if row.Type == zfs.Volume && size > row.VolSize {
		row.VolSize = size
	}
	return row, nil
}
