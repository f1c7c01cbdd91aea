package controller

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// ControllerExpandVolume implements csi.ControllerServer: a dataset's refquota
// or a zvol's volsize grows (with its reservation, when thick) in one zfs set.
// Volumes never shrink: a smaller request returns the current size. Only a
// formatted zvol needs the node to grow its filesystem afterwards.
func (s *Server) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	defer s.volumesChanged()
	switch {
	case req.GetVolumeId() == "":
		return nil, invalid("volume_id is required")
	case req.GetCapacityRange() == nil:
		return nil, invalid("capacity_range is required")
	}
	release, err := s.lockVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	defer s.forgetSources(req.GetVolumeId())
	row, err := s.getVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	current := capacity(row)
	granularity := uint64(1)
	if row.Type == zfs.Volume {
		granularity = row.VolBlockSize
	}
	size, err := volumeSize(req.GetCapacityRange(), granularity, current, current)
	if err != nil {
		return nil, err
	}
	nodeExpansion := row.Type == zfs.Volume && row.User[s.props.FSType] != ""
	if size > current {
		if err := s.zfs.Set(ctx, row.Name, resizeProperties(row, size)); err != nil {
			return nil, err
		}
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(size), NodeExpansionRequired: nodeExpansion}, nil
}

// resizeProperties are the properties that give a volume a new size; a thick
// volume's reservation grows with it.
func resizeProperties(row zfs.Dataset, size uint64) map[string]string {
	thick := row.RefReservation > 0
	if row.Type == zfs.Volume {
		properties := map[string]string{"volsize": bytesString(size)}
		if thick {
			properties["refreservation"] = "auto"
		}
		return properties
	}
	properties := map[string]string{"refquota": bytesString(size)}
	if thick {
		properties["refreservation"] = bytesString(size)
	}
	return properties
}

// ControllerModifyVolume implements csi.ControllerServer: the mutable ZFS
// properties in mutable_parameters are set in one zfs set, under the same
// rules as at creation.
func (s *Server) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	defer s.volumesChanged()
	if req.GetVolumeId() == "" {
		return nil, invalid("volume_id is required")
	}
	release, err := s.lockVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	defer s.forgetSources(req.GetVolumeId())
	row, err := s.getVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	properties, err := parseMutable(s.props, req.GetMutableParameters(), row.Type == zfs.Volume)
	if err != nil {
		return nil, err
	}
	if err := s.zfs.Set(ctx, row.Name, properties); err != nil {
		return nil, err
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// lockVolume takes the in-flight key of a volume ID's dataset; IDs that name
// no dataset of ours lock nothing (the lookup that follows reports them).
func (s *Server) lockVolume(volumeID string) (func(), error) {
	dataset, err := s.volumeDataset(volumeID)
	if err != nil {
		return func() {}, nil
	}
	return s.inflight.Acquire(datasetLock(dataset))
}

// forgetSources drops what sourceIndex remembers of a volume's snapshots,
// after a change to the volume.
func (s *Server) forgetSources(volumeID string) {
	if dataset, err := s.volumeDataset(volumeID); err == nil {
		s.sources.forgetVolume(dataset)
	}
}
