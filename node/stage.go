package node

import (
	"context"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// NodeStageVolume, read top to bottom: the request is checked, the volume's
// lock taken, a volume already staged as asked answered; then one plan of
// what to stage (planStage) and the one executor of its kind, each in a
// file named for it: stage_dataset.go, stage_formatted.go, stage_block.go.

// NodeStageVolume implements csi.NodeServer. It takes the volume's lock: it
// changes the volume's mounts, and a concurrent unstage or publish would
// see them half made.
//
// On the happy path it reads the volume once (the ownership guard:
// zfs.Inspect, an ioctl, no zfs command unless that read cannot answer) and
// makes one mount(2): the dataset at the staging path, the zvol's
// filesystem there (after mkfs on first use), or the zvol's device node onto
// a file in the staging directory. A volume already staged there reads
// nothing.
func (s *Server) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId(), "staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	capability := req.GetVolumeCapability()
	options, err := checkCapability(capability)
	if err != nil {
		return nil, err
	}
	volume, recognise, release, err := s.openVolume(req.GetVolumeId(), ownNode)
	if err != nil {
		return nil, err
	}
	defer release()
	staging, err := s.hostPath("staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	mounts, err := s.mounter.Mounts()
	if err != nil {
		return nil, err
	}
	if staged, err := checkStaged(mounts, recognise, staging, capability, options); staged || err != nil {
		return &csi.NodeStageVolumeResponse{}, err
	}
	plan, err := s.planStage(ctx, req, volume, staging, options)
	if err != nil {
		return nil, err
	}
	if err := s.loadKey(ctx, volume, plan.row, req.GetSecrets()); err != nil {
		return nil, err
	}
	if err := makeStagingDir(staging, plan.kind == bindDevice); err != nil {
		return nil, err
	}
	switch plan.kind {
	case bindDevice:
		err = s.stageBlock(ctx, plan)
	case mountDataset:
		err = s.stageDataset(plan)
	default:
		err = s.stageFormatted(ctx, plan)
	}
	if err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// stageKind is which executor stages a planned volume.
type stageKind int

const (
	mountDataset   stageKind = iota // a dataset mounted at the staging path (stage_dataset.go)
	mountFormatted                  // a zvol's filesystem, made on first use, mounted there (stage_formatted.go)
	bindDevice                      // a zvol's device node bound onto a file there (stage_block.go)
)

// stagePlan is what NodeStageVolume stages, decided once from the request
// and the volume as ZFS has it; the executors share it.
type stagePlan struct {
	volume  volumeRef
	row     zfs.Dataset
	staging string
	kind    stageKind
	fsType  string // a formatted zvol's filesystem
	options mountOptions
}

// planStage reads the volume (the ownership guard) and decides what to
// stage: the capability must be one the volume's kind serves.
func (s *Server) planStage(ctx context.Context, req *csi.NodeStageVolumeRequest, volume volumeRef, staging string, options mountOptions) (stagePlan, error) {
	row, err := s.lookupVolume(ctx, volume, req.GetVolumeContext())
	if err != nil {
		return stagePlan{}, err
	}
	kind, fsType := s.owner.Kind(row)
	capability := req.GetVolumeCapability()
	if problem := rules.KindServes(kind, fsType, capability); problem != "" {
		return stagePlan{}, status.Errorf(codes.FailedPrecondition, "volume %q: %s", volume.id, problem)
	}
	plan := stagePlan{volume: volume, row: row, staging: staging, kind: mountFormatted, fsType: fsType, options: options}
	switch {
	case capability.GetBlock() != nil:
		plan.kind = bindDevice
	case kind == rules.KindDataset:
		plan.kind = mountDataset
	}
	return plan, nil
}

// checkStaged looks at what is mounted at the staging path: nothing (false),
// this volume as asked (true), or something else (ALREADY_EXISTS, the
// spec's code for a staged volume that is incompatible with the request).
func checkStaged(mounts []MountInfo, recognise VolumeMounts, staging string, capability *csi.VolumeCapability, options mountOptions) (bool, error) {
	fsMount := MountAt(mounts, staging)
	blockMount := MountAt(mounts, filepath.Join(staging, blockStagingFile))
	existing := fsMount
	if existing == nil {
		existing = blockMount
	}
	if existing == nil {
		return false, nil
	}
	conflict := func(format string, args ...any) (bool, error) {
		return false, status.Errorf(codes.AlreadyExists, "staging path %s: "+format, append([]any{staging}, args...)...)
	}
	block := recognise.IsDeviceBind(*existing)
	switch {
	case !recognise.Shows(*existing):
		return conflict("it holds another mount (%s from %s)", existing.FSType, existing.Source)
	case block != (capability.GetBlock() != nil):
		return conflict("the volume is staged for %s access, the request asks for %s", accessName(block), accessName(!block))
	case block:
		return true, nil
	}
	if requested := requestedFSType(capability); existing.FSType != requested {
		return conflict("the volume is staged as %s, the request asks for %s", existing.FSType, requested)
	}
	if problem := options.mismatch(*existing); problem != "" {
		return conflict("the volume is staged but %s", problem)
	}
	return true, nil
}

func accessName(block bool) string {
	if block {
		return "block"
	}
	return "mount"
}

// makeStagingDir makes the staging directory, or checks the one there.
// A filesystem volume is mounted over it, so it must be empty: a caller may
// name any directory below the roots, another workload's among them, and a
// mount there would hide its files and take in what the host writes there
// next. A raw block volume's device is bound onto a file in it, which may
// be there already (a stage cut off before its bind leaves it; stageBlock
// checks that it is empty), and nothing else may. A retry of a stage that
// succeeded never comes here: checkStaged answers it.
func makeStagingDir(staging string, block bool) error {
	if err := makeDirs(filepath.Dir(staging)); err != nil {
		return err
	}
	if !block {
		_, err := makeMountPoint(staging, false)
		return err
	}
	if err := makeDirs(staging); err != nil {
		return err
	}
	fd, err := openBeneath(staging, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return &os.PathError{Op: "open", Path: staging, Err: err}
	}
	names, err := namesIn(fd, 2)
	if err != nil {
		return &os.PathError{Op: "read", Path: staging, Err: err}
	}
	if len(names) > 1 || len(names) == 1 && names[0] != blockStagingFile {
		return status.Errorf(codes.FailedPrecondition, "staging path %s holds files the driver did not make; a raw block "+
			"volume is staged only in an empty directory: remove them, or name another path", staging)
	}
	return nil
}
