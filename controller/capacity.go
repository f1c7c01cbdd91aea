package controller

import (
	"cmp"
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Volume sizes.
const (
	// DefaultVolumeSize is what a volume gets when the request names no size.
	DefaultVolumeSize uint64 = 1 << 30
	// MinVolumeSize is the least a volume gets: smaller requests are rounded up.
	MinVolumeSize uint64 = 1 << 20
	// MaxVolumeSize is the most a volume can have: 8 EiB less 1 MiB. ZFS on
	// 64-bit hosts takes any volsize or refquota below 2^64, but CSI carries
	// sizes as int64 and Linux block devices and files are sized in a signed
	// 64-bit offset (loff_t), so 2^63 bytes is out of reach; 1 MiB less keeps
	// it a whole number of every volume block size up to 1 MiB, so rounding
	// a size up to its block size never passes it.
	MaxVolumeSize uint64 = 1<<63 - 1<<20
	// defaultVolBlockSize is OpenZFS ≥ 2.2's default (2.1's 8 KiB divides it):
	// zvol sizes are rounded up to it unless a volblocksize is given.
	defaultVolBlockSize uint64 = 16 << 10
)

// volumeSize picks a size within a capacity range: the required bytes (or
// fallback when none are required), at least minimum and MinVolumeSize,
// rounded up to granularity. OUT_OF_RANGE when that exceeds the limit or
// MaxVolumeSize.
func volumeSize(capacityRange *csi.CapacityRange, granularity, fallback, minimum uint64) (uint64, error) {
	required, limit := uint64(capacityRange.GetRequiredBytes()), uint64(capacityRange.GetLimitBytes())
	if capacityRange.GetRequiredBytes() < 0 || capacityRange.GetLimitBytes() < 0 {
		return 0, invalid("capacity_range bytes must not be negative")
	}
	size := required
	if size == 0 {
		size = fallback
		if limit > 0 {
			size = min(size, limit)
		}
	}
	size = max(size, minimum, MinVolumeSize)
	granularity = max(granularity, 1)
	// Rounding only below MaxVolumeSize, where it cannot wrap around:
	// MaxInt64 rounded up to 16 KiB is 2^63, a negative int64 to the CO.
	if size <= MaxVolumeSize {
		size = (size + granularity - 1) / granularity * granularity
	}
	if size > MaxVolumeSize {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range [%d, %d] cannot be met: a volume has at most %d bytes "+
			"(8 EiB less 1 MiB: CSI and Linux size volumes in signed 64-bit numbers)", required, limit, MaxVolumeSize)
	}
	if limit > 0 && size > limit {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range [%d, %d] cannot be met: the volume needs %d bytes (at least %d, in multiples of %d)",
			required, limit, size, max(minimum, MinVolumeSize), granularity)
	}
	return size, nil
}

// GetCapacity implements csi.ControllerServer: the space available under the
// parent dataset the parameters select (one zfs list), or 0 for topologies
// and capabilities this node cannot serve.
//
// Without capabilities (external-provisioner's capacity tracking sends only
// a StorageClass's parameters) the kind is open: the parameters need only
// suit a dataset or a zvol, as CreateVolume would accept them for some
// capability, and the largest volume is the smaller of the two kinds'.
func (s *Server) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	kinds, minimum := []bool{false, true}, MinVolumeSize
	if capabilities := req.GetVolumeCapabilities(); len(capabilities) > 0 {
		zvol, fsType, err := volumeKind(capabilities)
		if err != nil {
			return &csi.GetCapacityResponse{}, nil // no volume serves these here
		}
		kinds, minimum = []bool{zvol}, max(minimum, minimumFilesystemSize[fsType])
	}
	if segments := req.GetAccessibleTopology().GetSegments(); len(segments) > 0 && segments[s.cfg.TopologyKey()] != s.cfg.NodeID {
		return &csi.GetCapacityResponse{}, nil
	}
	var params createParams
	var refused error
	zvolPossible, accepted := false, false
	for _, zvol := range kinds {
		parsed, err := parseCreateParams(s.cfg, s.props, req.GetParameters(), nil, zvol)
		if err != nil {
			refused = cmp.Or(refused, err)
			continue
		}
		params, accepted, zvolPossible = parsed, true, zvolPossible || zvol
	}
	if !accepted {
		return nil, refused
	}
	parent, err := zfs.Get(ctx, s.zfs, params.parent, nil)
	if err != nil {
		return nil, err
	}
	maximum := parent.Available
	if zvolPossible && !params.thin {
		maximum = largestThickZvol(parent.Available, params.volBlockSize)
	}
	return &csi.GetCapacityResponse{
		AvailableCapacity: rules.SizeBytes(parent.Available),
		MaximumVolumeSize: wrapperspb.Int64(rules.SizeBytes(min(maximum, MaxVolumeSize))),
		MinimumVolumeSize: wrapperspb.Int64(rules.SizeBytes(minimum)),
	}, nil
}

// largestThickZvol is the largest thick zvol CreateVolume can make in
// available bytes: its size rounded as CreateVolume rounds it, its
// reservation as ZFS computes it. Without a volblocksize parameter the zvol
// gets the ZFS version's default; 8 KiB (OpenZFS 2.1's) needs the most
// metadata, so it is the one counted.
func largestThickZvol(available, volBlockSize uint64) uint64 {
	granularity := max(volBlockSize, defaultVolBlockSize)
	if volBlockSize == 0 {
		volBlockSize = 8 << 10
	}
	largest := zfs.LargestThickVolume(available, volBlockSize)
	return largest / granularity * granularity
}

// ValidateVolumeCapabilities implements csi.ControllerServer: capabilities are
// confirmed when this volume's kind serves them all; parameters and context,
// when given, only when they are the ones the volume was made with.
func (s *Server) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, invalid("volume_id is required")
	case len(req.GetVolumeCapabilities()) == 0:
		return nil, invalid("volume_capabilities are required")
	}
	row, err := s.getVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	for _, capability := range req.GetVolumeCapabilities() {
		if problem := s.capabilityMismatch(row, capability); problem != "" {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: problem}, nil
		}
	}
	if problem := s.creationMismatch(row, req); problem != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: problem}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
		MutableParameters:  req.GetMutableParameters(),
	}}, nil
}

// creationMismatch explains why a request's parameters or volume context are
// not this volume's, or is "".
func (s *Server) creationMismatch(row zfs.Dataset, req *csi.ValidateVolumeCapabilitiesRequest) string {
	if len(req.GetParameters())+len(req.GetMutableParameters()) > 0 {
		if _, err := parseCreateParams(s.cfg, s.props, req.GetParameters(), req.GetMutableParameters(), row.Type == zfs.Volume); err != nil {
			return status.Convert(err).Message()
		}
		if fingerprint(req.GetParameters(), req.GetMutableParameters()) != row.User[s.props.ParamsHash] {
			return "the parameters are not the ones the volume was created with"
		}
	}
	for key, want := range s.csiVolume(row).GetVolumeContext() {
		if got, given := req.GetVolumeContext()[key]; given && got != want {
			return fmt.Sprintf("volume context %s=%q, the volume's is %q", key, rules.Bounded(got), want)
		}
	}
	return ""
}

// capabilityMismatch explains why a volume cannot serve a capability, or is "".
func (s *Server) capabilityMismatch(row zfs.Dataset, capability *csi.VolumeCapability) string {
	if problem := rules.CapabilityProblem(capability); problem != "" {
		return problem
	}
	kind, fsType := s.owner.Kind(row)
	return rules.KindServes(kind, fsType, capability)
}

// ControllerGetVolume implements csi.ControllerServer.
func (s *Server) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume_id is required")
	}
	row, err := s.getVolume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeResponse{Volume: s.csiVolume(row), Status: &csi.ControllerGetVolumeResponse_VolumeStatus{}}, nil
}
