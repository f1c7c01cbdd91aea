package controller

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// CreateVolume, read top to bottom: the handler plans the request once,
// without touching ZFS (planVolume), and create hands the plan to the one
// executor of its kind of source, each in a file named for it:
// create_empty.go, create_clone.go, create_copy.go, create_pull.go. They
// share the plan and never re-derive it; what they have in common is below
// them (create_name.go, create_properties.go, source.go, create_jobs.go),
// never in this file.

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
	// the peer channel (create_pull.go).
	remote bool
	// move is moveSync or moveFinal for a round of a move the operator
	// started (MoveVolume), "" otherwise: never from a parameter.
	move string
	// keyFormat and key encrypt a new volume (params.encryption, the key
	// from the secrets); they never reach a log, an error or an argv.
	keyFormat string
	key       []byte
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
// CreateVolume, the rounds of create_pull_rounds.go to execute it.
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

// planVolume validates a request without touching ZFS.
func (s *Server) planVolume(req *csi.CreateVolumeRequest) (volumePlan, error) {
	plan := volumePlan{name: req.GetName(), capacity: req.GetCapacityRange()}
	if problem := rules.SpecNameProblem(plan.name); problem != "" {
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
		if problem := rules.CapabilityProblem(capability); problem != "" {
			return false, "", invalid("%s", problem)
		}
		if capability.GetBlock() != nil {
			block = true
			continue
		}
		requested := capability.GetMount().GetFsType()
		switch {
		case rules.IsDatasetFSType(requested):
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

// checkSourcePlace refuses a content source by what its ID says, before
// anything runs: a source on another node cannot be cloned here, and a clone
// cannot cross pools (a copy can).
func (s *Server) checkSourcePlace(plan *volumePlan) error {
	var nodeID, dataset string
	var err error
	if plan.fromSnap {
		nodeID, dataset, _, err = rules.ParseSnapshotID(plan.sourceID)
	} else {
		nodeID, dataset, err = rules.ParseVolumeID(plan.sourceID)
	}
	switch {
	case err != nil:
		return status.Errorf(codes.NotFound, "content source %q does not exist: %v", rules.Bounded(plan.sourceID), err)
	case nodeID != s.cfg.NodeID && s.transfers != nil:
		plan.remote = true // pulled from its node (create_pull.go); a pull crosses pools
	case nodeID != s.cfg.NodeID:
		// NOT_FOUND would be final; this is the spec's "cannot be
		// provisioned in this topology": the CO places the volume elsewhere.
		return status.Errorf(codes.ResourceExhausted, "%s: the content source %q lives on node %q and a volume made from it can only be made there; this is node %q",
			otherNodeMarker, rules.Bounded(plan.sourceID), nodeID, s.cfg.NodeID)
	case !plan.params.copySource && zfs.PoolOf(dataset) != zfs.PoolOf(plan.params.parent):
		return invalid("the content source %q is in pool %s and the volume would be in pool %s: a clone cannot cross pools (sourceMode=copy can)",
			rules.Bounded(plan.sourceID), zfs.PoolOf(dataset), zfs.PoolOf(plan.params.parent))
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
	format, key, err := rules.EncryptionKey(secrets)
	if err != nil {
		return invalid("%v", err)
	}
	if key == nil {
		return invalid("parameter %s=%s needs a key: the secrets must carry %s or %s (Kubernetes: the StorageClass's "+
			"csi.storage.k8s.io/provisioner-secret-name and -namespace; Nomad: the volume's secrets)",
			ParamEncryption, plan.params.encryption, rules.SecretPassphrase, rules.SecretHexKey)
	}
	plan.keyFormat, plan.key = format, key
	return nil
}

// sourceKind is which executor makes a planned volume.
type sourceKind int

const (
	emptyVolume  sourceKind = iota // no content source (create_empty.go)
	cloneHere                      // a clone of this node's snapshot or volume (create_clone.go)
	copyHere                       // an independent copy of this node's snapshot or volume (create_copy.go)
	pullFromNode                   // another node's snapshot or volume, pulled; a move's rounds too (create_pull.go)
)

// sourceKind is decided by the plan alone: a remote source is pulled
// whatever sourceMode says (a pull is always an independent copy).
func (plan volumePlan) sourceKind() sourceKind {
	switch {
	case plan.sourceID == "":
		return emptyVolume
	case plan.remote:
		return pullFromNode
	case plan.params.copySource:
		return copyHere
	}
	return cloneHere
}

// create makes the volume a validated plan describes, by the executor of
// its kind of source. A copy or a pull an earlier call started for the name
// is waited for first; then the call takes its locks, which a copy or a
// pull that outlives the call takes over.
func (s *Server) create(ctx context.Context, plan volumePlan) (*csi.CreateVolumeResponse, error) {
	copied, err := s.awaitEarlierCopy(ctx, plan)
	if err != nil {
		return nil, err
	}
	release, err := s.inflight.Acquire(s.createLocks(plan)...)
	if err != nil {
		return nil, err
	}
	locks := &heldLocks{release: release}
	defer locks.done()
	// A copy costs a send of the whole source: the volume an earlier call
	// copied is looked for first (one zfs list; the retries of a long copy
	// are the common case, not the exception).
	lookFirst := copied || plan.params.copySource
	switch plan.sourceKind() {
	case emptyVolume:
		return s.createEmpty(ctx, plan, lookFirst)
	case cloneHere:
		return s.createClone(ctx, plan, lookFirst)
	case copyHere:
		return s.createCopy(ctx, plan, locks)
	default:
		return s.createPulled(ctx, plan, locks)
	}
}

// awaitEarlierCopy waits for a copy or a pull an earlier call started for
// the plan's name, and says whether it made a volume. One that failed is
// started again, except a pull: its error is this call's answer.
func (s *Server) awaitEarlierCopy(ctx context.Context, plan volumePlan) (copied bool, err error) {
	job := s.copies.running(plan.name)
	if job == nil {
		return false, nil
	}
	_, err = job.await(ctx, nil)
	if err != nil && (status.Code(err) == codes.Aborted || ctx.Err() != nil) {
		return false, err
	}
	if err != nil && plan.remote {
		s.copies.takeFailure(plan.name) // this call answers it
		return false, err
	}
	return err == nil, nil
}

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
