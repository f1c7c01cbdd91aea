package controller

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// createClone makes a volume a clone of a snapshot of this node, or of a
// volume of it through an internal snapshot (ARCHITECTURE.md decision 6):
// its source resolved and checked against the plan (resolveSource), then
// one `zfs clone` with every property. lookFirst looks for the volume
// before (a name an earlier call's copy made).
func (s *Server) createClone(ctx context.Context, plan volumePlan, lookFirst bool) (*csi.CreateVolumeResponse, error) {
	src, size, err := s.checkedSource(ctx, plan)
	if err != nil {
		return nil, err
	}
	if lookFirst {
		if existing, _, err := s.findByName(ctx, plan); err != nil || existing != nil {
			return s.existingVolume(plan, existing, err)
		}
	}
	for generation, attempts := 1, 0; attempts < rules.MaxGenerations; attempts++ {
		row, err := s.cloneInto(ctx, plan, src, s.generationDataset(plan, generation), size)
		if err == nil {
			return &csi.CreateVolumeResponse{Volume: s.csiVolume(row)}, nil
		}
		if src.remembered && errors.Is(err, zfs.ErrNotFound) {
			// The snapshot went since it was remembered: ask ZFS this time.
			s.sources.forget(src.snapshot)
			if src, err = s.resolveSource(ctx, plan); err != nil {
				return nil, err
			}
			if size, err = plannedSize(plan, src); err != nil {
				return nil, err
			}
			continue
		}
		if !errors.Is(err, zfs.ErrExists) {
			return nil, err
		}
		existing, free, err := s.findByName(ctx, plan)
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

// cloneInto clones the source into dataset. The clone's properties include
// a zvol's new size and reservation: zfs sets them in the ioctl that makes
// the clone and destroys the clone if it cannot, so no retry ever meets a
// clone that is not what was asked for.
func (s *Server) cloneInto(ctx context.Context, plan volumePlan, src *source, dataset string, size uint64) (zfs.Dataset, error) {
	properties := s.volumeProperties(plan, size, true)
	row := s.madeRow(plan, dataset, size, properties)
	snapshot, cleanup, err := s.takeSentSnapshot(ctx, src, dataset)
	if err != nil {
		return row, err
	}
	defer cleanup(ctx)
	for key, value := range sourceGrowth(plan, src.size, size) {
		properties[key] = value
	}
	return row, s.zfs.Clone(ctx, snapshot, dataset, properties)
}
