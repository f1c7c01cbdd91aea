// Package controller implements the CSI Controller service on ZFS: volumes
// (datasets and zvols), snapshots, clones, capacity, expansion and property
// changes. ZFS is its only state (ARCHITECTURE.md decision 1): every answer is read
// from `zfs list`, and what the driver made carries user properties naming it.
package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Server is the CSI Controller service.
type Server struct {
	csi.UnimplementedControllerServer
	cfg       rules.Config
	zfs       zfs.Interface
	log       zerolog.Logger
	props     rules.UserProps
	owner     rules.Owner
	namer     rules.Namer
	inflight  *rules.InFlight
	reap      chan struct{}
	watch     reapWatch     // datasets whose snapshots the next reaper pass reads
	changes   atomic.Uint64 // volume changes made, for volumePages
	pages     volumePages
	snapshots snapshotIndex
	sources   sourceIndex
	copies    copyJobs
	// transfers pulls other nodes' snapshots (create_pull.go); nil: off.
	transfers forward.Transfers
	// inUse says whether this host shows a volume mounted (the node's
	// mount table) outside the mountpoints except names; pulls.go. nil:
	// cannot tell.
	inUse func(dataset string, except ...string) (bool, error)
	// contentOf says what a zvol holds as blkid names it (adopt.go); nil:
	// cannot tell.
	contentOf func(ctx context.Context, dataset string) (string, error)
	// pullIdle is how long a pull goes on with no call asking for it
	// before it is abandoned and what it received removed (create_pull.go).
	pullIdle time.Duration
	// noGuardedSnapshots is set once ZFS said it cannot make a guarded
	// snapshot (no zfs.sync.set_prop): CreateSnapshot lists and snapshots
	// from then on.
	noGuardedSnapshots atomic.Bool
	// groupProbe remembers whether ZFS can take group snapshots.
	groupProbe struct {
		sync.Mutex
		known, supported bool
	}
}

// New builds the service; cfg must be valid (rules.Config.Validate).
func New(cfg rules.Config, z zfs.Interface, log zerolog.Logger) (*Server, error) {
	namer, err := rules.NewNamer(cfg)
	if err != nil {
		return nil, err
	}
	if err := CheckAllowedPoolProperties(cfg.AllowedPoolProperties); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, zfs: z, log: log, props: rules.NewUserProps(cfg.DriverName), owner: rules.NewOwner(cfg), namer: namer,
		inflight: rules.NewInFlight(), reap: make(chan struct{}, 1), pullIdle: defaultPullIdle}, nil
}

// Close ends the work the service runs apart from its calls (copies under
// way) and waits for it. Calls after Close fail.
func (s *Server) Close() { s.copies.stop() }

var controllerCapabilities = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
	csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
}

// ControllerGetCapabilities implements csi.ControllerServer. Publish and
// unpublish are not offered: volumes are local to their node and need no attach.
func (s *Server) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	capabilities := make([]*csi.ControllerServiceCapability, 0, len(controllerCapabilities))
	for _, rpc := range controllerCapabilities {
		capabilities = append(capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: rpc}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: capabilities}, nil
}

// otherNodeMarker starts the messages of calls refused because they belong to
// another node (rpc.OtherNodeMarker says why, and the metrics count them
// apart by it).
const otherNodeMarker = rpc.OtherNodeMarker

// volumeDataset resolves a volume ID to its dataset name (rules.Config's
// VolumeDataset); a refusal for another node carries otherNodeMarker.
func (s *Server) volumeDataset(volumeID string) (string, error) {
	dataset, err := s.cfg.VolumeDataset(volumeID)
	return dataset, markOtherNode(err)
}

// markOtherNode prefixes otherNodeMarker to a refusal for another node.
func markOtherNode(err error) error {
	var foreign *rules.ForeignNodeError
	if errors.As(err, &foreign) {
		return fmt.Errorf("%s: %w", otherNodeMarker, err)
	}
	return err
}

func volumeNotFound(volumeID string, reason error) error {
	return status.Errorf(codes.NotFound, "volume %q does not exist: %v", rules.Bounded(volumeID), reason)
}

// getVolume reads a live volume and its own properties, or NOT_FOUND.
func (s *Server) getVolume(ctx context.Context, volumeID string) (zfs.Dataset, error) {
	dataset, err := s.volumeDataset(volumeID)
	if err != nil {
		return zfs.Dataset{}, volumeNotFound(volumeID, err)
	}
	row, err := zfs.GetWithKeyStatus(ctx, s.zfs, dataset, s.props.All())
	if errors.Is(err, zfs.ErrNotFound) || (err == nil && !s.owner.LiveVolume(row)) {
		return zfs.Dataset{}, volumeNotFound(volumeID, zfs.ErrNotFound)
	}
	return row, err
}

// capacity is a volume's size: refquota for datasets, volsize for zvols.
func capacity(row zfs.Dataset) uint64 {
	if row.Type == zfs.Volume {
		return row.VolSize
	}
	return row.RefQuota
}

// csiVolume renders a volume row for the CO.
func (s *Server) csiVolume(row zfs.Dataset) *csi.Volume {
	volume := &csi.Volume{
		VolumeId:           rules.VolumeID(s.cfg.NodeID, row.Name),
		CapacityBytes:      rules.SizeBytes(capacity(row)),
		VolumeContext:      s.owner.VolumeContext(row),
		AccessibleTopology: []*csi.Topology{{Segments: s.cfg.Topology()}},
	}
	if source := row.User[s.props.Source]; source != "" {
		volume.ContentSource = contentSource(source)
	}
	return volume
}

// contentSource turns a stored source ID back into the CSI message: snapshot
// IDs are the ones with an '@'.
func contentSource(id string) *csi.VolumeContentSource {
	if _, _, _, err := rules.ParseSnapshotID(id); err == nil {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
	}
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

func bytesString(n uint64) string { return strconv.FormatUint(n, 10) }

// datasetLock is the in-flight key of a dataset: every call that changes a
// volume, or snapshots or clones it, holds it.
func datasetLock(dataset string) string { return "dataset/" + dataset }

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
