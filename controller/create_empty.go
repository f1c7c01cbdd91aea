package controller

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// createEmpty makes a volume without a content source: one `zfs create`
// with every property in it. Only when ZFS answers that the dataset exists
// does it look (findByName), so a retry after a lost reply is answered from
// ZFS itself. lookFirst looks before (a name an earlier call's copy made).
func (s *Server) createEmpty(ctx context.Context, plan volumePlan, lookFirst bool) (*csi.CreateVolumeResponse, error) {
	_, size, err := s.checkedSource(ctx, plan)
	if err != nil {
		return nil, err
	}
	if lookFirst {
		if existing, _, err := s.findByName(ctx, plan); err != nil || existing != nil {
			return s.existingVolume(plan, existing, err)
		}
	}
	for generation, attempts := 1, 0; attempts < rules.MaxGenerations; attempts++ {
		row, err := s.makeEmpty(ctx, plan, s.generationDataset(plan, generation), size)
		if err == nil {
			return &csi.CreateVolumeResponse{Volume: s.csiVolume(row)}, nil
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

// makeEmpty runs the one `zfs create` of dataset, a new key on stdin when
// the plan encrypts it.
func (s *Server) makeEmpty(ctx context.Context, plan volumePlan, dataset string, size uint64) (zfs.Dataset, error) {
	properties := s.volumeProperties(plan, size, false)
	row := s.madeRow(plan, dataset, size, properties)
	options := zfs.CreateOptions{Properties: properties, Key: plan.key}
	if plan.zvol {
		options.VolSize, options.Sparse = size, plan.params.thin
	}
	return row, s.zfs.Create(ctx, dataset, options)
}
