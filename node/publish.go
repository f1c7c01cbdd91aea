package node

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

// NodePublishVolume implements csi.NodeServer: a bind mount from the staging
// path (a raw block volume: from the device node bound in the staging
// directory) onto the target, remounted with the capability's per-mount
// flags, read-only when asked. It runs no zfs command: the staging mount
// proves the volume passed the ownership guard. It takes the volume's lock,
// since whether another publish exists must not change between the check
// and the mount.
func (s *Server) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "target_path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	capability := req.GetVolumeCapability()
	options, err := checkCapability(capability)
	if err != nil {
		return nil, err
	}
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.FailedPrecondition, "staging_target_path is required: the volume must be staged first")
	}
	target, err := s.hostPath("target_path", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	staging, err := s.hostPath("staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	if req.GetReadonly() {
		options = options.withReadOnly()
	}
	block := capability.GetBlock() != nil
	if block {
		// Raw block has no mount flags; only read-only carries over.
		options = mountOptions{set: intersect(options.set, []string{"ro"})}
	}
	volume, recognise, release, err := s.openVolume(req.GetVolumeId(), ownNode)
	if err != nil {
		return nil, err
	}
	defer release()
	mounts, err := s.mounter.Mounts()
	if err != nil {
		return nil, err
	}
	others := otherPublishes(recognise, mounts, staging, filepath.Join(staging, blockStagingFile), target)
	if published, err := checkPublished(mounts, recognise, target, capability, options, others); published || err != nil {
		return &csi.NodePublishVolumeResponse{}, err
	}
	source, err := stagedSource(mounts, recognise, volume, staging, capability, req.GetVolumeContext())
	if err != nil {
		return nil, err
	}
	if err := checkOtherPublishes(capability, others, block, options.readOnly()); err != nil {
		return nil, err
	}
	made, err := makeMountPoint(target, block)
	if err != nil {
		return nil, err
	}
	flags := options.mountFlags()
	if block {
		flags = options.set
	}
	err = s.bind(source, target, flags)
	if err == nil && block {
		if err = s.setDeviceReadOnly(recognise.Device, options.readOnly()); err != nil {
			s.undoPublish(target)
		}
	}
	if err != nil {
		if made {
			_ = removeMountPoint(target) // what this call made goes with it
		}
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// checkPublished looks at what is mounted at the target: nothing (false),
// this volume as asked (true), or something else, or this volume published
// with other arguments (ALREADY_EXISTS, the spec's answer for T1=T2,
// P1!=P2): another access type, filesystem type, read-only flag or mount
// flags. The access mode of a publish is recorded nowhere (ZFS and the
// mount table are the only state), so a request's mode is compared with
// what it allows: the volume's other publishes must fit it.
func checkPublished(mounts []MountInfo, recognise VolumeMounts, target string, capability *csi.VolumeCapability,
	options mountOptions, others []MountInfo) (bool, error) {
	existing := MountAt(mounts, target)
	if existing == nil {
		return false, nil
	}
	conflict := func(format string, args ...any) (bool, error) {
		return false, status.Errorf(codes.AlreadyExists, "target path %s: "+format, append([]any{target}, args...)...)
	}
	block := capability.GetBlock() != nil
	switch published := recognise.IsDeviceBind(*existing); {
	case !recognise.Shows(*existing):
		return conflict("it holds another mount (%s from %s)", existing.FSType, existing.Source)
	case published != block:
		return conflict("the volume is published for %s access, the request asks for %s", accessName(published), accessName(block))
	case !block && existing.FSType != requestedFSType(capability):
		return conflict("the volume is published as %s, the request asks for %s", existing.FSType, requestedFSType(capability))
	}
	if problem := options.mismatch(*existing); problem != "" {
		return conflict("the volume is published but %s", problem)
	}
	if err := checkOtherPublishes(capability, others, block, options.readOnly()); err != nil {
		return conflict("the volume is published, but %s", status.Convert(err).Message())
	}
	return true, nil
}

// stagedSource finds where the volume is staged, checks that the staged
// volume serves the capability, and returns the path to bind from.
func stagedSource(mounts []MountInfo, recognise VolumeMounts, volume volumeRef, staging string, capability *csi.VolumeCapability,
	volumeContext map[string]string) (string, error) {
	source := staging
	if capability.GetBlock() != nil {
		source = filepath.Join(staging, blockStagingFile)
	}
	staged := MountAt(mounts, source)
	if staged == nil || !recognise.Shows(*staged) {
		return "", status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %s (NodeStageVolume first)", volume.id, staging)
	}
	kind, fsType := mountedKind(recognise, *staged, volumeContext)
	if problem := rules.KindServes(kind, fsType, capability); problem != "" {
		return "", status.Errorf(codes.FailedPrecondition, "volume %q: %s", volume.id, problem)
	}
	return source, checkContext(volumeContext, kind, fsType)
}

// mountedKind is a volume's kind and filesystem type as a mount of it
// shows them. A raw block bind does not show whether the zvol has a
// filesystem (an older version of the driver staged formatted zvols so);
// the volume_context may, when the call has one.
func mountedKind(recognise VolumeMounts, mount MountInfo, volumeContext map[string]string) (kind, fsType string) {
	switch {
	case recognise.IsDeviceBind(mount):
		return rules.KindZvol, volumeContext[rules.ContextFSType]
	case mount.FSType == "zfs":
		return rules.KindDataset, mount.FSType
	}
	return rules.KindZvol, mount.FSType
}

// checkContext compares a volume_context with what the mounts show; an
// empty fsType means the mounts cannot tell.
func checkContext(volumeContext map[string]string, kind, fsType string) error {
	if given, ok := volumeContext[rules.ContextKind]; ok && given != kind {
		return invalid("volume_context says %s=%s, but the volume is a %s", rules.ContextKind, given, kind)
	}
	if given, ok := volumeContext[rules.ContextFSType]; ok && fsType != "" && given != fsType {
		return invalid("volume_context says %s=%q, but the volume has %q", rules.ContextFSType, given, fsType)
	}
	return nil
}

// checkOtherPublishes applies the access mode to a publish beside the
// volume's others on this node. SINGLE_NODE_MULTI_WRITER allows any number;
// SINGLE_NODE_WRITER one read/write publish at a time, with read-only ones
// beside it, as the mode's definition words it ("published once as
// read/write"; the spec's table answers FAILED_PRECONDITION for any second
// target, which this refines); SINGLE_NODE_SINGLE_WRITER and
// SINGLE_NODE_READER_ONLY exactly one publish of any kind.
//
// A read-only raw block publish makes the whole device read-only (the
// kernel has no read-only device node per path), so it cannot share the
// device with a read-write publish either way round.
func checkOtherPublishes(capability *csi.VolumeCapability, others []MountInfo, block, readOnly bool) error {
	if len(others) == 0 {
		return nil
	}
	paths := make([]string, 0, len(others))
	writers := 0
	for _, other := range others {
		paths = append(paths, other.MountPoint)
		if !other.ReadOnly() {
			writers++
		}
	}
	switch mode := capability.GetAccessMode().GetMode(); {
	case mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
	case mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER && (readOnly || writers == 0):
	case mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:
		return status.Errorf(codes.FailedPrecondition, "access mode %s allows one read/write publish, and the volume is published "+
			"read/write at %s", mode, strings.Join(paths, ", "))
	default:
		return status.Errorf(codes.FailedPrecondition, "access mode %s allows one publish, and the volume is published at %s",
			mode, strings.Join(paths, ", "))
	}
	if !block {
		return nil
	}
	for _, other := range others {
		if other.ReadOnly() != readOnly {
			return status.Errorf(codes.FailedPrecondition, "a read-only raw block publish makes the zvol read-only on this node, "+
				"so it cannot be published read-only and read-write at once (it is published at %s)", strings.Join(paths, ", "))
		}
	}
	return nil
}

// bind bind-mounts source onto target and applies the per-mount flags; a
// bind mount inherits its source's flags, and takes new ones only by a
// remount. If the remount fails the bind mount is taken back.
func (s *Server) bind(source, target string, flags []string) error {
	if err := s.mounter.Bind(source, target); err != nil {
		return err
	}
	if len(flags) == 0 {
		return nil
	}
	if err := s.mounter.RemountBind(target, flags); err != nil {
		s.undoPublish(target)
		return fmt.Errorf("applying %v to the bind mount at %s: %w", flags, target, err)
	}
	return nil
}

// undoPublish takes back a bind mount a failed publish made; a failure is
// logged, and the CO's unpublish finds the mount.
func (s *Server) undoPublish(target string) {
	if err := s.mounter.Unmount(target); err != nil {
		s.log.Warn().Err(err).Str("target", target).Msg("taking back a failed publish")
	}
}

// setDeviceReadOnly sets the zvol's kernel read-only flag when it differs.
func (s *Server) setDeviceReadOnly(device string, readOnly bool) error {
	current, err := s.mounter.DeviceReadOnly(device)
	if err != nil || current == readOnly {
		return err
	}
	return s.mounter.SetDeviceReadOnly(device, readOnly)
}

// NodeUnpublishVolume implements csi.NodeServer: it unmounts the volume at
// the target and removes the empty directory or file the mount was on;
// nothing mounted is success. A mount of anything else at the target is left
// alone (FAILED_PRECONDITION). Only a path this call unmounted the volume
// from is removed, and only when empty: a call that finds none of the
// volume's mounts there (an unknown or another node's ID, a retry after a
// reboot) removes nothing, since it cannot tie the path to a mount the
// driver made (ARCHITECTURE.md decision 13); the CO removes its own leftovers
// (kubelet does after every unpublish). It takes the volume's lock, as
// publish does. No zfs command runs.
func (s *Server) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "target_path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	_, recognise, release, err := s.openVolume(req.GetVolumeId(), anyNode)
	if err != nil {
		return nil, err
	}
	defer release()
	target, err := s.hostPath("target_path", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	removed, err := s.unmountAll(recognise, target)
	if err != nil {
		return nil, err
	}
	if removed != nil && recognise.IsDeviceBind(*removed) && removed.ReadOnly() {
		if err := s.releaseReadOnlyDevice(recognise); err != nil {
			return nil, err
		}
	}
	if removed != nil {
		if err := removeMountPoint(target); err != nil {
			return nil, err
		}
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// releaseReadOnlyDevice clears the zvol's read-only flag once its last
// read-only raw block publish is gone.
func (s *Server) releaseReadOnlyDevice(recognise VolumeMounts) error {
	mounts, err := s.mounter.Mounts()
	if err != nil {
		return err
	}
	for _, mount := range mounts {
		if recognise.IsDeviceBind(mount) && mount.ReadOnly() {
			return nil
		}
	}
	return s.setDeviceReadOnly(recognise.Device, false)
}

func intersect(list, allowed []string) []string {
	var out []string
	for _, word := range list {
		if contains(allowed, word) {
			out = append(out, word)
		}
	}
	return out
}
