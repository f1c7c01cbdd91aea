package controller

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// ControllerExpandVolume implements csi.ControllerServer: a dataset's refquota
// or a zvol's volsize grows (with its reservation, when thick) in one zfs set.
// Volumes never shrink: a smaller request returns the current size. Only a
// formatted zvol needs the node to grow its filesystem afterwards. A
// volume_capability the volume cannot serve is INVALID_ARGUMENT, nothing
// changed.
func (s *Server) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	defer s.volumesChanged()
	switch {
	case req.GetVolumeId() == "":
		return nil, invalid("volume_id is required")
	case req.GetCapacityRange() == nil:
		return nil, invalid("capacity_range is required")
	}
	row, release, err := s.openVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	// The spec's "exceeds capabilities": the CO means to use the volume in a
	// way it cannot serve (block access to a dataset, another filesystem).
	// The same rule as ValidateVolumeCapabilities and NodeStage answer by.
	if capability := req.GetVolumeCapability(); capability != nil {
		if problem := s.capabilityMismatch(row, capability); problem != "" {
			return nil, invalid("volume %q: %s", rules.Bounded(req.GetVolumeId()), problem)
		}
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
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: rules.SizeBytes(size), NodeExpansionRequired: nodeExpansion}, nil
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
	row, release, err := s.openVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer release()
	properties, err := parseMutable(newPropertyPolicy(s.cfg, s.props, row.Type == zfs.Volume), req.GetMutableParameters())
	if err != nil {
		return nil, err
	}
	if err := s.zfs.Set(ctx, row.Name, properties); err != nil {
		return nil, err
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// openVolume is how the calls that change a live volume begin: take the
// in-flight key of its dataset and read it (NOT_FOUND unless it is a live
// volume of ours). release frees the key and drops what sourceIndex
// remembers of the volume's snapshots, which the change may have touched.
func (s *Server) openVolume(ctx context.Context, volumeID string) (row zfs.Dataset, release func(), err error) {
	dataset, err := s.volumeDataset(volumeID)
	if err != nil {
		return zfs.Dataset{}, nil, volumeNotFound(volumeID, err)
	}
	unlock, err := s.inflight.Acquire(datasetLock(dataset))
	if err != nil {
		return zfs.Dataset{}, nil, err
	}
	release = func() {
		s.sources.forgetVolume(dataset)
		unlock()
	}
	if row, err = s.getVolume(ctx, volumeID); err != nil {
		release()
		return zfs.Dataset{}, nil, err
	}
	if s.owner.Retained(row) {
		release()
		return zfs.Dataset{}, nil, retainedRefusal(row.Name, "expansion and property changes")
	}
	return row, release, nil
}
