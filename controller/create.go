package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// volumePlan is a validated CreateVolume request.
type volumePlan struct {
	name     string
	zvol     bool
	fsType   string // zvols only: ext4, xfs, btrfs, or "" for raw block
	capacity *csi.CapacityRange
	params   createParams
	sourceID string // content source (snapshot or volume ID), "" for none
	fromSnap bool
	// remote: the source is another node's snapshot or volume, pulled over
	// the peer channel (remote.go).
	remote bool
	// move is moveSync or moveFinal for a round of a move the operator
	// started (MoveVolume), "" otherwise: never from a parameter.
	move string
	// keyFormat and key encrypt a new volume (params.encryption, the key
	// from the secrets); they never reach a log, an error or an argv.
	keyFormat string
	key       []byte
}

// checkSourcePlace refuses a content source by what its ID says, before
// anything runs: a source on another node cannot be cloned here, and a clone
// cannot cross pools (a copy can).
func (s *Server) checkSourcePlace(plan *volumePlan) error {
	var nodeID, dataset string
	var err error
	if plan.fromSnap {
		nodeID, dataset, _, err = driver.ParseSnapshotID(plan.sourceID)
	} else {
		nodeID, dataset, err = driver.ParseVolumeID(plan.sourceID)
	}
	switch {
	case err != nil:
		return status.Errorf(codes.NotFound, "content source %q does not exist: %v", driver.Bounded(plan.sourceID), err)
	case nodeID != s.cfg.NodeID && s.transfers != nil:
		plan.remote = true // pulled from its node (remote.go, move.go); a pull crosses pools
	case nodeID != s.cfg.NodeID:
		// NOT_FOUND would be final; this is the spec's "cannot be
		// provisioned in this topology": the CO places the volume elsewhere.
		return status.Errorf(codes.ResourceExhausted, "%s: the content source %q lives on node %q and a volume made from it can only be made there; this is node %q",
			otherNodeMarker, driver.Bounded(plan.sourceID), nodeID, s.cfg.NodeID)
	case !plan.params.copySource && zfs.PoolOf(dataset) != zfs.PoolOf(plan.params.parent):
		return invalid("the content source %q is in pool %s and the volume would be in pool %s: a clone cannot cross pools (sourceMode=copy can)",
			driver.Bounded(plan.sourceID), zfs.PoolOf(dataset), zfs.PoolOf(plan.params.parent))
	}
	return nil
}

// planEncryption takes the key of a volume to encrypt from the secrets. A
// volume made from a source keeps the source's encryption (a clone shares
// its key), so it needs no key; a copy would be sent decrypted, so an
// encrypted one is refused (checkSourceEncryption).
func planEncryption(plan *volumePlan, secrets map[string]string) error {
	if plan.params.encryption == "" || plan.sourceID != "" {
		return nil
	}
	format, key, err := driver.EncryptionKey(secrets)
	if err != nil {
		return invalid("%v", err)
	}
	if key == nil {
		return invalid("parameter %s=%s needs a key: the secrets must carry %s or %s (Kubernetes: the StorageClass's "+
			"csi.storage.k8s.io/provisioner-secret-name and -namespace; Nomad: the volume's secrets)",
			ParamEncryption, plan.params.encryption, driver.SecretPassphrase, driver.SecretHexKey)
	}
	plan.keyFormat, plan.key = format, key
	return nil
}

// CreateVolume implements csi.ControllerServer. On the happy path it runs one
// zfs command: create first, inspect only when ZFS says the dataset exists.
func (s *Server) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	defer s.volumesChanged()
	plan, err := s.planVolume(req)
	if err != nil {
		return nil, err
	}
	return s.create(ctx, plan)
}

// MoveVolume is a round of a move of another node's volume here, which only
// the operator starts (the operator's socket, `zfs-csi ctl move-volume`),
// and only where moves are enabled: the same plan and checks as
// CreateVolume, the rounds of move.go to execute it.
func (s *Server) MoveVolume(ctx context.Context, req *csi.CreateVolumeRequest, final bool) (*csi.CreateVolumeResponse, error) {
	defer s.volumesChanged()
	if !s.cfg.AllowMoves {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s does not allow moves: its operator has not enabled them (--allow-moves)", s.cfg.NodeID)
	}
	plan, err := s.planVolume(req)
	if err != nil {
		return nil, err
	}
	if !plan.remote || plan.fromSnap {
		return nil, invalid("a move's content source must be a volume of another node")
	}
	plan.move = moveSync
	if final {
		plan.move = moveFinal
	}
	return s.create(ctx, plan)
}

// create makes the volume a validated plan describes: its source resolved
// and checked by the same rules wherever it lives, then one executor for
// the kind of source (a new volume or a clone here, a local copy, a pull).
func (s *Server) create(ctx context.Context, plan volumePlan) (*csi.CreateVolumeResponse, error) {
	copied := false
	if job := s.copies.running(plan.name); job != nil {
		// A copy an earlier call started is under way: wait for it, then
		// answer the volume it made. One that failed is started again.
		_, err := job.await(ctx, nil)
		if err != nil && (status.Code(err) == codes.Aborted || ctx.Err() != nil) {
			return nil, err
		}
		if err != nil && plan.remote {
			s.copies.takeFailure(plan.name) // this call answers it
			return nil, err
		}
		copied = err == nil
	}
	release, err := s.inflight.Acquire(s.createLocks(plan)...)
	if err != nil {
		return nil, err
	}
	locks := &heldLocks{release: release}
	defer locks.done()

	if plan.remote {
		return s.createPulled(ctx, plan, locks)
	}
	var src *source
	if plan.sourceID != "" {
		if src, err = s.resolveSource(ctx, plan); err != nil {
			return nil, err
		}
	}
	size, err := plannedSize(plan, src)
	if err != nil {
		return nil, err
	}
	if err := s.checkOtherParents(ctx, plan); err != nil {
		return nil, err
	}
	if copied || plan.params.copySource {
		// A copy costs a send of the whole source: look for the volume an
		// earlier call copied first (one zfs list; the retries of a long
		// copy are the common case, not the exception).
		existing, _, err := s.findByName(ctx, plan)
		if err == nil && existing != nil {
			*existing, err = s.completeCopy(ctx, plan, src, *existing, size)
		}
		if err != nil || existing != nil {
			return s.existingVolume(plan, existing, err)
		}
	}
	for generation, attempts := 1, 0; attempts < driver.MaxGenerations; attempts++ {
		dataset := plan.params.parent + "/" + s.namer.VolumeComponent(plan.name, generation)
		row, err := s.makeVolume(ctx, plan, src, dataset, size, locks)
		if err == nil {
			return &csi.CreateVolumeResponse{Volume: s.csiVolume(row)}, nil
		}
		if src != nil && src.remembered && errors.Is(err, zfs.ErrNotFound) {
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
		if err == nil && existing != nil && src != nil {
			*existing, err = s.completeCopy(ctx, plan, src, *existing, size)
		}
		if err != nil || existing != nil {
			return s.existingVolume(plan, existing, err)
		}
		if free == 0 {
			break
		}
		generation = free
	}
	return nil, status.Errorf(codes.ResourceExhausted,
		"volume name %q: %d earlier volumes of this name are deleted but still held by their snapshots' clones", driver.Bounded(plan.name), driver.MaxGenerations)
}

// createPulled makes a volume from another node's source: the volume an
// earlier call pulled is looked for first (its source may be gone: a move
// deletes it), then the source is described by its node and checked as a
// local one, and pulled (remote.go, move.go).
func (s *Server) createPulled(ctx context.Context, plan volumePlan, locks *heldLocks) (*csi.CreateVolumeResponse, error) {
	existing, free, err := s.findByName(ctx, plan)
	if err != nil || existing != nil {
		return s.existingVolume(plan, existing, err)
	}
	if free != 0 {
		// A pull whose last round is in may have seen its source go (a
		// move's): finish it from what arrived, without the source.
		dataset := plan.params.parent + "/" + s.namer.VolumeComponent(plan.name, free)
		_, pulledGUID, err := s.receivedRounds(ctx, incomingDataset(dataset))
		if err != nil {
			return nil, err
		}
		if pulledGUID != "" {
			size, err := plannedSize(plan, nil)
			if err != nil {
				return nil, err
			}
			return s.pullVolume(ctx, plan, size, locks, free)
		}
	}
	src, err := s.resolveSource(ctx, plan)
	if err != nil {
		return nil, err
	}
	size, err := plannedSize(plan, src)
	if err != nil {
		return nil, err
	}
	if err := s.checkOtherParents(ctx, plan); err != nil {
		return nil, err
	}
	return s.pullVolume(ctx, plan, size, locks, free)
}

// checkOtherParents refuses a name already used under another parent.
func (s *Server) checkOtherParents(ctx context.Context, plan volumePlan) error {
	if len(s.cfg.ParentDatasets) < 2 {
		return nil
	}
	_, err := s.findInOtherParents(ctx, plan)
	return err
}

// planVolume validates a request without touching ZFS.
func (s *Server) planVolume(req *csi.CreateVolumeRequest) (volumePlan, error) {
	plan := volumePlan{name: req.GetName(), capacity: req.GetCapacityRange()}
	if problem := driver.SpecNameProblem(plan.name); problem != "" {
		return plan, invalid("%s", problem)
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return plan, invalid("volume_capabilities are required")
	}
	var err error
	if plan.zvol, plan.fsType, err = volumeKind(req.GetVolumeCapabilities()); err != nil {
		return plan, err
	}
	if err := s.checkTopology(req.GetAccessibilityRequirements()); err != nil {
		return plan, err
	}
	if plan.params, err = parseCreateParams(s.cfg, s.props, req.GetParameters(), req.GetMutableParameters(), plan.zvol); err != nil {
		return plan, err
	}
	if plan.capacity.GetRequiredBytes() < 0 || plan.capacity.GetLimitBytes() < 0 {
		return plan, invalid("capacity_range bytes must not be negative")
	}
	switch source := req.GetVolumeContentSource(); {
	case source.GetSnapshot() != nil:
		plan.sourceID, plan.fromSnap = source.GetSnapshot().GetSnapshotId(), true
	case source.GetVolume() != nil:
		plan.sourceID = source.GetVolume().GetVolumeId()
	case source != nil:
		return plan, invalid("volume_content_source has no snapshot or volume")
	}
	if source := req.GetVolumeContentSource(); source != nil && plan.sourceID == "" {
		return plan, invalid("volume_content_source needs an ID")
	}
	if err := planEncryption(&plan, req.GetSecrets()); err != nil {
		return plan, err
	}
	if plan.sourceID != "" {
		return plan, s.checkSourcePlace(&plan)
	}
	return plan, nil
}

// volumeKind decides dataset or zvol from the capabilities (ARCHITECTURE.md decision 4):
// block access or a mount with ext4/xfs/btrfs makes a zvol, a mount with
// fsType "" or "zfs" a dataset. Capabilities that disagree are refused.
func volumeKind(capabilities []*csi.VolumeCapability) (zvol bool, fsType string, err error) {
	block, dataset := false, false
	for _, capability := range capabilities {
		if problem := driver.CapabilityProblem(capability); problem != "" {
			return false, "", invalid("%s", problem)
		}
		if capability.GetBlock() != nil {
			block = true
			continue
		}
		requested := capability.GetMount().GetFsType()
		switch {
		case driver.IsDatasetFSType(requested):
			dataset = true
		case fsType != "" && fsType != requested:
			return false, "", invalid("capabilities ask for two filesystem types, %s and %s", fsType, requested)
		default:
			fsType = requested
		}
	}
	if dataset && (block || fsType != "") {
		return false, "", invalid("capabilities ask for a ZFS dataset and for a zvol at once")
	}
	return !dataset, fsType, nil
}

// checkTopology refuses requests whose requisite topology excludes this node:
// the volume can only ever be reached here.
func (s *Server) checkTopology(requirement *csi.TopologyRequirement) error {
	requisite := requirement.GetRequisite()
	if len(requisite) == 0 {
		return nil
	}
	for _, topology := range requisite {
		if topology.GetSegments()[s.cfg.TopologyKey()] == s.cfg.NodeID {
			return nil
		}
	}
	return status.Errorf(codes.ResourceExhausted, "%s: the requisite topology does not include this node (%s=%s)",
		otherNodeMarker, s.cfg.TopologyKey(), s.cfg.NodeID)
}

// minimumFilesystemSize is the least a zvol formatted with each filesystem
// can be: mkfs.xfs refuses devices under 300 MiB, mkfs.btrfs under about
// 109 MiB. Smaller requests are rounded up (or OUT_OF_RANGE when the limit
// forbids it) instead of failing later, at the first NodeStage.
var minimumFilesystemSize = map[string]uint64{"xfs": 300 << 20, "btrfs": 128 << 20}

// plannedSize is the size a new volume gets: what was asked for (or the
// source's size, or the default), never less than the source.
func plannedSize(plan volumePlan, src *source) (uint64, error) {
	granularity, fallback := uint64(1), DefaultVolumeSize
	if plan.zvol {
		granularity = max(plan.params.volBlockSize, defaultVolBlockSize)
	}
	minimum := minimumFilesystemSize[plan.fsType]
	if src != nil {
		fallback, minimum = src.size, max(minimum, src.size)
		if src.zvol && src.blockSize > 0 {
			granularity = src.blockSize // a clone keeps its source's
		}
	}
	return volumeSize(plan.capacity, granularity, fallback, minimum)
}

// existingVolume answers a request whose volume already exists: the same
// volume when the request is compatible with it, ALREADY_EXISTS otherwise.
func (s *Server) existingVolume(plan volumePlan, row *zfs.Dataset, err error) (*csi.CreateVolumeResponse, error) {
	if err != nil {
		return nil, err
	}
	if problem := s.incompatibility(plan, *row); problem != "" {
		return nil, status.Errorf(codes.AlreadyExists, "volume %q exists (%s) but %s", driver.Bounded(plan.name), row.Name, problem)
	}
	return &csi.CreateVolumeResponse{Volume: s.csiVolume(*row)}, nil
}

func (s *Server) incompatibility(plan volumePlan, row zfs.Dataset) string {
	size := capacity(row)
	switch {
	case (row.Type == zfs.Volume) != plan.zvol || row.User[s.props.FSType] != plan.fsType:
		return fmt.Sprintf("it is %s, the request asks for %s",
			describe(row.Type == zfs.Volume, row.User[s.props.FSType]), describe(plan.zvol, plan.fsType))
	case size < uint64(plan.capacity.GetRequiredBytes()):
		return fmt.Sprintf("its %d bytes are less than the %d required", size, plan.capacity.GetRequiredBytes())
	case plan.capacity.GetLimitBytes() > 0 && size > uint64(plan.capacity.GetLimitBytes()):
		return fmt.Sprintf("its %d bytes exceed the limit of %d", size, plan.capacity.GetLimitBytes())
	case row.User[s.props.Source] != plan.sourceID:
		return fmt.Sprintf("its content source is %q, the request's %q", row.User[s.props.Source], driver.Bounded(plan.sourceID))
	case row.User[s.props.ParamsHash] != plan.params.hash:
		return "it was created with other parameters"
	}
	return ""
}

// findByName looks for the live volume of plan.name among every generation of
// its dataset name in one zfs list. It returns that volume, or the first
// generation whose name is free (0 when none is).
func (s *Server) findByName(ctx context.Context, plan volumePlan) (*zfs.Dataset, int, error) {
	candidates := make([]string, 0, driver.MaxGenerations)
	for generation := 1; generation <= driver.MaxGenerations; generation++ {
		candidates = append(candidates, plan.params.parent+"/"+s.namer.VolumeComponent(plan.name, generation))
	}
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: candidates, Types: []zfs.Type{zfs.Filesystem, zfs.Volume},
		UserProps: s.props.All(), SkipMissing: true})
	if err != nil {
		return nil, 0, err
	}
	taken := map[string]bool{}
	for i := range rows {
		row := rows[i]
		taken[row.Name] = true
		switch {
		case !s.owner.Marked(row):
			return nil, 0, status.Errorf(codes.AlreadyExists,
				"dataset %s exists and is not managed by %s; it is left alone", row.Name, s.cfg.DriverName)
		case s.owner.DeletedVolume(row):
			continue
		case driver.DecodeName(row.User[s.props.CSIName]) != plan.name:
			return nil, 0, status.Errorf(codes.AlreadyExists, "dataset %s already holds volume %q",
				row.Name, driver.Bounded(driver.DecodeName(row.User[s.props.CSIName])))
		default:
			return &row, 0, nil
		}
	}
	for generation, name := range candidates {
		if !taken[name] {
			return nil, generation + 1, nil
		}
	}
	return nil, 0, nil
}

// findInOtherParents catches a name already used under another allowed
// parent (one zfs list; only when several parents are configured).
func (s *Server) findInOtherParents(ctx context.Context, plan volumePlan) (*zfs.Dataset, error) {
	var candidates []string
	for _, parent := range s.cfg.ParentDatasets {
		if parent != plan.params.parent {
			candidates = append(candidates, parent+"/"+s.namer.VolumeComponent(plan.name, 1))
		}
	}
	// A parent in a suspended pool cannot answer; it must not stop volumes
	// being made in the others (a name is one CO object: the same name with
	// another parent is a CO's mistake, caught whenever the pool can tell).
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: candidates, UserProps: s.props.All(),
		SkipMissing: true, SkipSuspended: true})
	if err != nil {
		return nil, err
	}
	for i := range rows {
		if s.owner.LiveVolume(rows[i]) && driver.DecodeName(rows[i].User[s.props.CSIName]) == plan.name {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q already exists under another parent dataset, as %s",
				driver.Bounded(plan.name), rows[i].Name)
		}
	}
	return nil, nil
}
