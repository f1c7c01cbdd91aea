// Package node implements the CSI Node service: it tells the CO which node it
// is, stages and publishes volumes on this host, reports their usage and
// grows their filesystems.
//
// A ZFS dataset (mountpoint=legacy) is mounted at the staging path and
// bind-mounted at each target; a formatted zvol is formatted on first stage
// (only when blank, or over what an mkfs of ours that was cut off left, see
// mountOrFormat), mounted at the staging path (its filesystem grown to a
// larger zvol) and bind-mounted likewise; a raw block zvol's device node is
// bind-mounted onto a file in the staging directory and from there onto a
// file at each target. A read-only publish is a bind mount remounted
// read-only, plus the kernel's read-only flag on the device for raw block.
// Paths are compared as the kernel shows them (hostPath).
//
// ZFS is the only state (ARCHITECTURE.md decision 1), and the mount table is the
// node's: every call reads /proc/self/mountinfo to learn what is staged or
// published, so repeated calls are idempotent and calls after a reboot (no
// mounts left) restore access. Staging is the one call that reads ZFS, to
// enforce the ownership guard (zfs.Inspect: the ioctl zfs itself uses, or
// one zfs list when that cannot answer); the others act only on mounts the
// guard already let through.
package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Options tune the Node service.
type Options struct {
	// MaxVolumesPerNode is reported to the CO; 0 means unlimited.
	MaxVolumesPerNode int64
	// DeviceTimeout bounds the wait for a zvol's device: its /dev/zvol link,
	// which udev makes asynchronously after the zvol appears, or after a
	// second without it the device node that names the zvol (zvolNodes); 0
	// means DefaultDeviceTimeout.
	DeviceTimeout time.Duration
	// PathRoots are the directories staging and target paths must lie
	// below (hostPath); nil means DefaultPathRoots.
	PathRoots []string
}

// DefaultDeviceTimeout is how long staging waits for a zvol's device
// unless the CO's deadline comes first.
const DefaultDeviceTimeout = time.Minute

// ZvolDeviceDir holds the links udev makes for zvols: /dev/zvol/<dataset>.
const ZvolDeviceDir = "/dev/zvol"

// blockStagingFile is the file in a raw block volume's staging directory
// onto which its device node is bind-mounted.
const blockStagingFile = "zvol"

// Server is the CSI Node service.
type Server struct {
	csi.UnimplementedNodeServer
	cfg      rules.Config
	opts     Options
	zfs      zfs.Interface
	mounter  Mounter
	log      zerolog.Logger
	props    rules.UserProps
	owner    rules.Owner
	inflight *rules.InFlight
}

// New builds the service; cfg must be valid (rules.Config.Validate).
func New(cfg rules.Config, z zfs.Interface, mounter Mounter, log zerolog.Logger, opts Options) *Server {
	if opts.DeviceTimeout <= 0 {
		opts.DeviceTimeout = DefaultDeviceTimeout
	}
	if opts.PathRoots == nil {
		opts.PathRoots = DefaultPathRoots
	}
	return &Server{cfg: cfg, opts: opts, zfs: z, mounter: mounter, log: log,
		props: rules.NewUserProps(cfg.DriverName), owner: rules.NewOwner(cfg), inflight: rules.NewInFlight()}
}

// NodeGetInfo implements csi.NodeServer: the node ID and the topology segment
// the controller puts on every volume of this node.
func (s *Server) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             s.cfg.NodeID,
		MaxVolumesPerNode:  s.opts.MaxVolumesPerNode,
		AccessibleTopology: &csi.Topology{Segments: s.cfg.Topology()},
	}, nil
}

// nodeCapabilities leave out VOLUME_MOUNT_GROUP: neither ZFS nor ext4 nor xfs
// has a mount option that makes a group own the files, so it could not be
// honoured as the spec requires. Kubernetes' fsGroupPolicy File (kubelet
// changing ownership itself) needs nothing from the driver.
var nodeCapabilities = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH,
}

// NodeGetCapabilities implements csi.NodeServer.
func (s *Server) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	capabilities := make([]*csi.NodeServiceCapability, 0, len(nodeCapabilities))
	for _, rpc := range nodeCapabilities {
		capabilities = append(capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: rpc}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: capabilities}, nil
}

// volumeRef is a volume ID that passed the ownership checks that need no
// ZFS: it parses, names this node, and its dataset is a child of an allowed
// parent (ARCHITECTURE.md decision 2).
type volumeRef struct {
	id      string
	dataset string
}

// devicePath is where udev links the zvol's device node.
func (v volumeRef) devicePath() string { return ZvolDeviceDir + "/" + v.dataset }

// required checks that the named fields (name, value, name, value, …) are
// set. Handlers call it before anything else: a missing field is
// INVALID_ARGUMENT whatever else is wrong with the request.
func required(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return invalid("%s is required", fields[i])
		}
	}
	return nil
}

// idCheck says how much of a volume ID a call checks.
type idCheck int

const (
	// ownNode: the ID must name this node. Calls that make mounts or read
	// a volume serve only this node's volumes.
	ownNode idCheck = iota
	// anyNode: teardown (unpublish, unstage) works from the path and what
	// is mounted there, whatever node the ID names: a volume staged before
	// the node's ID changed (it defaults to the hostname) carries the old
	// one, and its mounts must still go. The dataset must still lie under a
	// parent dataset, and only mounts of that dataset are touched.
	anyNode
)

// parseVolume checks a volume ID: anything this node cannot own is NOT_FOUND.
func (s *Server) parseVolume(volumeID string, check idCheck) (volumeRef, error) {
	resolve := s.cfg.VolumeDataset
	if check == anyNode {
		resolve = s.cfg.VolumeDatasetOnAnyNode
	}
	dataset, err := resolve(volumeID)
	if errors.Is(err, rules.ErrMalformedID) {
		return volumeRef{}, volumeNotFound(volumeID, "it is not a volume ID of this driver")
	}
	if err != nil {
		return volumeRef{}, volumeNotFound(volumeID, err.Error())
	}
	return volumeRef{id: volumeID, dataset: dataset}, nil
}

// lock takes the volume's in-flight key; a concurrent call on the same
// volume gets ABORTED and the CO retries. The key is the dataset, which IDs
// with an old and a new node ID share.
func (s *Server) lock(volume volumeRef) (func(), error) {
	return s.inflight.Acquire("volume/" + volume.dataset)
}

// openVolume is how the calls that change a volume's mounts begin: check
// the ID, take the lock, and prepare the recognition of its mounts. The
// caller releases the lock.
func (s *Server) openVolume(volumeID string, check idCheck) (volumeRef, VolumeMounts, func(), error) {
	volume, err := s.parseVolume(volumeID, check)
	if err != nil {
		return volumeRef{}, VolumeMounts{}, nil, err
	}
	release, err := s.lock(volume)
	if err != nil {
		return volumeRef{}, VolumeMounts{}, nil, err
	}
	recognise, err := s.mountsOf(volume)
	if err != nil {
		release()
		return volumeRef{}, VolumeMounts{}, nil, err
	}
	return volume, recognise, release, nil
}

// lookupVolume reads the volume from ZFS (zfs.Inspect: in-process, with
// one zfs list only when that read cannot answer) and enforces the rest of
// the ownership guard: it exists, is a filesystem or volume, carries the
// managed mark and is not deleted. A volume_context, when given, must agree
// with what ZFS says. The row holds zfs.InspectedFields only.
func (s *Server) lookupVolume(ctx context.Context, volume volumeRef, volumeContext map[string]string) (zfs.Dataset, error) {
	row, err := zfs.Inspect(ctx, s.zfs, volume.dataset, s.props.All())
	if errors.Is(err, zfs.ErrNotFound) {
		return zfs.Dataset{}, volumeNotFound(volume.id, "its dataset does not exist")
	}
	if err != nil {
		return zfs.Dataset{}, err
	}
	if !s.owner.LiveVolume(row) {
		return zfs.Dataset{}, volumeNotFound(volume.id, fmt.Sprintf("%s is not a live volume of %s", row.Name, s.cfg.DriverName))
	}
	kind, fsType := s.owner.Kind(row)
	if given, ok := volumeContext[rules.ContextKind]; ok && given != kind {
		return zfs.Dataset{}, invalid("volume_context says %s=%s, but the volume is a %s", rules.ContextKind, given, kind)
	}
	if given, ok := volumeContext[rules.ContextFSType]; ok && given != fsType {
		return zfs.Dataset{}, invalid("volume_context says %s=%q, but the volume has %q", rules.ContextFSType, given, fsType)
	}
	return row, nil
}

// checkCapability validates a request's capability: a missing or malformed
// one is INVALID_ARGUMENT, one the driver never serves (MULTI_NODE modes,
// unknown filesystems) FAILED_PRECONDITION, as the spec's "exceeds
// capabilities". It returns the mount flags sorted for use.
func checkCapability(capability *csi.VolumeCapability) (mountOptions, error) {
	switch {
	case capability == nil:
		return mountOptions{}, invalid("volume_capability is required")
	case capability.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN:
		return mountOptions{}, invalid("volume_capability has no access mode")
	case capability.GetBlock() == nil && capability.GetMount() == nil:
		return mountOptions{}, invalid("volume_capability has no access type (mount or block)")
	case capability.GetMount().GetVolumeMountGroup() != "":
		return mountOptions{}, invalid("volume_mount_group is not supported (no VOLUME_MOUNT_GROUP capability)")
	}
	if problem := rules.CapabilityProblem(capability); problem != "" {
		return mountOptions{}, status.Error(codes.FailedPrecondition, problem)
	}
	options, err := parseMountFlags(requestedFSType(capability), capability.GetMount().GetMountFlags())
	if err != nil {
		return mountOptions{}, invalid("%v", err)
	}
	if capability.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY {
		options = options.withReadOnly()
	}
	return options, nil
}

// requestedFSType is the filesystem type a mount capability asks for, as
// the mount table shows it: "zfs" for a dataset (fsType "" or "zfs").
func requestedFSType(capability *csi.VolumeCapability) string {
	if fsType := capability.GetMount().GetFsType(); !rules.IsDatasetFSType(fsType) {
		return fsType
	}
	return "zfs"
}

// waitForDevice waits for the zvol's link, within the CO's deadline and the
// configured bound.
func (s *Server) waitForDevice(ctx context.Context, volume volumeRef) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.DeviceTimeout)
	defer cancel()
	device, err := s.mounter.WaitForDevice(ctx, volume.devicePath())
	if err != nil {
		return "", status.Errorf(codes.Unavailable, "the device of volume %q did not appear: %v", volume.id, err)
	}
	return device, nil
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func volumeNotFound(volumeID, reason string) error {
	return status.Errorf(codes.NotFound, "volume %q does not exist: %s", rules.Bounded(volumeID), reason)
}

// mountsOf prepares the recognition of a volume's mounts; it resolves the
// zvol link, which a dataset does not have.
func (s *Server) mountsOf(volume volumeRef) (VolumeMounts, error) {
	device, err := s.mounter.ResolveDevice(volume.devicePath())
	if errors.Is(err, ErrNoDevice) {
		device, err = "", nil
	}
	return VolumeMounts{Dataset: volume.dataset, Link: volume.devicePath(), Device: device}, err
}

// otherPublishes are the mounts of the whole volume outside the given paths:
// its other publishes (and any mount an operator made). Binds of a directory
// in the volume (kubelet's subPath) are views into a publish, not publishes.
func otherPublishes(recognise VolumeMounts, mounts []MountInfo, except ...string) []MountInfo {
	var found []MountInfo
	for _, mount := range mounts {
		if recognise.Shows(mount) && whole(mount) && !contains(except, mount.MountPoint) {
			found = append(found, mount)
		}
	}
	return found
}
