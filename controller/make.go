package controller

import (
	"context"
	"errors"
	"strings"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// createLocks are the in-flight keys of a CreateVolume: its name, and its
// source volume, so that the reaper and a deletion keep off the source while
// an internal snapshot of it is being cloned.
func (s *Server) createLocks(plan volumePlan) []string {
	keys := []string{"volume-name/" + plan.name}
	if plan.sourceID != "" && !plan.fromSnap {
		if dataset, err := s.volumeDataset(plan.sourceID); err == nil {
			keys = append(keys, datasetLock(dataset))
		}
	}
	return keys
}

func datasetLock(dataset string) string { return "dataset/" + dataset }

// makeVolume creates the dataset or zvol in as few zfs commands as it can:
// one `zfs create` with every property for a new volume, one `zfs clone` for
// a volume from a snapshot. It returns the row the volume now has. locks are
// the call's; a copy that outlives the call takes them over.
func (s *Server) makeVolume(ctx context.Context, plan volumePlan, src *source, dataset string, size uint64, locks *heldLocks) (zfs.Dataset, error) {
	properties := s.volumeProperties(plan, size, src != nil)
	row := zfs.Dataset{Name: dataset, Type: zfs.Filesystem, RefQuota: size, User: map[string]string{}}
	if plan.zvol {
		row = zfs.Dataset{Name: dataset, Type: zfs.Volume, VolSize: size, User: map[string]string{}}
	}
	for key, value := range properties {
		if s.props.Owns(key) {
			row.User[key] = value
		}
	}
	if src != nil {
		return row, s.makeFromSource(ctx, plan, src, dataset, size, properties, locks)
	}
	options := zfs.CreateOptions{Properties: properties, Key: plan.key}
	if plan.zvol {
		options.VolSize, options.Sparse = size, plan.params.thin
	}
	return row, s.zfs.Create(ctx, dataset, options)
}

// volumeProperties are every property a new volume gets, driver-owned ones
// included, so that they are set by the command that creates it.
func (s *Server) volumeProperties(plan volumePlan, size uint64, fromSource bool) map[string]string {
	properties := make(map[string]string, len(plan.params.properties)+8)
	for key, value := range plan.params.properties {
		properties[key] = value
	}
	for key, value := range plan.params.metadata {
		properties[key] = value
	}
	properties[s.props.Managed] = "true"
	properties[s.props.CSIName] = driver.EncodeName(plan.name)
	properties[s.props.ParamsHash] = plan.params.hash
	if plan.fsType != "" {
		properties[s.props.FSType] = plan.fsType
	}
	if plan.sourceID != "" {
		properties[s.props.Source] = plan.sourceID
	}
	if plan.params.encryption != "" && !fromSource {
		properties["encryption"], properties["keyformat"], properties["keylocation"] = plan.params.encryption, plan.keyFormat, "prompt"
	}
	if !plan.zvol {
		properties["mountpoint"] = "legacy"
		properties["refquota"] = bytesString(size)
		if !plan.params.thin {
			properties["refreservation"] = bytesString(size)
		}
	} else if plan.params.volBlockSize != 0 && !fromSource {
		properties["volblocksize"] = bytesString(plan.params.volBlockSize)
	}
	return properties
}

// makeFromSource clones (or, in copy mode, sends and receives) the source
// into dataset. A volume source is first snapshotted under an internal name.
//
// A clone is one `zfs clone` whose properties include a zvol's new size and
// reservation: zfs sets them in the ioctl that makes the clone and destroys
// the clone if it cannot, so no retry ever meets a clone that is not what was
// asked for. A copy is received first and then grown (receive refuses
// volsize), apart from the call (copyVolume).
func (s *Server) makeFromSource(ctx context.Context, plan volumePlan, src *source, dataset string, size uint64,
	properties map[string]string, locks *heldLocks) error {
	snapshot := s.sentSnapshot(src, dataset)
	cleanup := func(context.Context) {}
	if src.volume != "" {
		// Internal snapshots (driver.InternalSnapshotPrefix) carry the
		// Internal mark, are never listed as CSI snapshots, and are
		// destroyed deferred at once, so ZFS removes them with their clone.
		err := s.zfs.Snapshot(ctx, snapshot, map[string]string{s.props.Internal: "true"})
		if err != nil && !errors.Is(err, zfs.ErrExists) {
			return err
		}
		// Deferred: destroyed now if nothing was cloned from it, else with its clone.
		cleanup = func(ctx context.Context) {
			if !s.destroyQuietly(context.WithoutCancel(ctx), snapshot, zfs.DestroyOptions{Defer: true}) {
				s.watchSnapshots(src.volume) // the reaper tries again
			}
		}
	}
	grow := sourceGrowth(plan, src.size, size)
	if plan.params.copySource {
		return s.copyVolume(ctx, plan, locks, snapshot, dataset, properties, grow, cleanup)
	}
	defer cleanup(ctx)
	for key, value := range grow {
		properties[key] = value
	}
	return s.zfs.Clone(ctx, snapshot, dataset, properties)
}

// sentSnapshot is the snapshot a volume from src is cloned or copied from:
// the source snapshot, or for a volume source the internal snapshot made for
// dataset.
func (s *Server) sentSnapshot(src *source, dataset string) string {
	if src.volume == "" {
		return src.snapshot
	}
	return src.volume + "@" + driver.InternalSnapshotPrefix + dataset[strings.LastIndexByte(dataset, '/')+1:]
}

// sourceGrowth are the properties a zvol made from a source of size has
// needs to be size: its volsize, and for a thick zvol the reservation ZFS
// computes for it.
func sourceGrowth(plan volumePlan, has, size uint64) map[string]string {
	grow := map[string]string{}
	if plan.zvol && size > has {
		grow["volsize"] = bytesString(size)
	}
	if plan.zvol && !plan.params.thin {
		grow["refreservation"] = "auto"
	}
	return grow
}

// completeCopy finishes a copy that an interrupted call received but did
// not finish (its received snapshot is still there: finishCopy). Any other
// existing volume is returned as it is.
func (s *Server) completeCopy(ctx context.Context, plan volumePlan, src *source, row zfs.Dataset, size uint64) (zfs.Dataset, error) {
	// A volume without a source has no copy to finish, whatever sourceMode says.
	if src == nil || !plan.params.copySource || row.User[s.props.Source] != plan.sourceID || row.User[s.props.ParamsHash] != plan.params.hash {
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

// destroyQuietly is for clean-up after another error: a failure is logged,
// not returned, and the reaper or an operator sees what is left. It reports
// whether name is gone (or going, deferred).
func (s *Server) destroyQuietly(ctx context.Context, name string, options zfs.DestroyOptions) bool {
	if err := s.zfs.Destroy(ctx, name, options); err != nil && !errors.Is(err, zfs.ErrNotFound) {
		s.log.Warn().Err(err).Str("dataset", name).Msg("clean-up failed")
		return false
	}
	return true
}
