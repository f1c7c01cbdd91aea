package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Adoption brings data an operator already has on ZFS under the driver,
// and release gives it back: the operator's acts on the host (the
// operator's socket), never a CSI caller's. An adopted dataset or zvol is
// checked as the driver would check one it made, then marked in one zfs
// set, so that a daemon killed at any point leaves it adopted or as it was.
// Two modes: retain (served, never destroyed: DeleteVolume forgets it) and
// own (a volume like any other).

// AdoptRequest is what the operator asks to adopt.
type AdoptRequest struct {
	Dataset string // the existing filesystem or zvol
	Name    string // the CSI name the volume answers to
	Retain  bool   // retain mode; own otherwise
	// Rename moves a dataset outside every parent (or not directly below
	// one) to Parent (default: the first) with one zfs rename.
	Rename bool
	Parent string
	// FSType is a zvol's filesystem as it holds it ("" for raw block); a
	// filesystem's is "" or "zfs".
	FSType string
	// Size sets refquota on a filesystem that has none: a volume has a
	// finite size.
	Size uint64
	// KeyFromSecrets makes an encrypted volume's key come from the CSI
	// secrets at staging (keylocation=prompt); otherwise its keylocation
	// stays the operator's.
	KeyFromSecrets bool
}

// Adopt adopts an existing dataset or zvol (see AdoptRequest).
func (s *Server) Adopt(ctx context.Context, req AdoptRequest) (*csi.Volume, error) {
	defer s.volumesChanged()
	if problem := rules.SpecNameProblem(req.Name); problem != "" {
		return nil, invalid("%s", problem)
	}
	parent := req.Parent
	if parent == "" {
		parent = s.cfg.ParentDatasets[0]
	}
	if !s.cfg.IsParent(parent) {
		return nil, invalid("%q is not one of the parent datasets %v", rules.Bounded(parent), s.cfg.ParentDatasets)
	}
	release, err := s.inflight.Acquire("volume-name/"+req.Name, datasetLock(req.Dataset))
	if err != nil {
		return nil, err
	}
	defer release()
	plan := volumePlan{name: req.Name, params: createParams{parent: parent}}
	target := parent + "/" + s.namer.VolumeComponent(req.Name, 1)
	existing, _, err := s.findByName(ctx, plan)
	// The data to adopt where the name maps to is not yet the driver's:
	// findByName's refusal of it is this adoption's start.
	if status.Code(err) == codes.AlreadyExists && req.Dataset == target {
		existing, err = nil, nil
	}
	if err != nil || existing != nil {
		return s.adoptedAlready(req, existing, err)
	}
	if err := s.checkOtherParents(ctx, plan); err != nil {
		return nil, err
	}
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{req.Dataset}, Depth: -1,
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}, UserProps: s.props.All(), Crypto: true,
		Native: []string{"mountpoint"}})
	if errors.Is(err, zfs.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "dataset %s does not exist", rules.Bounded(req.Dataset))
	}
	if err != nil {
		return nil, err
	}
	row := rows[0]
	if err := s.checkAdoptable(ctx, req, rows, target); err != nil {
		return nil, err
	}
	marks := s.adoptionMarks(req, row)
	if row.Name != target {
		if err := s.zfs.Rename(ctx, row.Name, target); err != nil {
			return nil, err
		}
		row.Name = target
	}
	if err := s.zfs.Set(ctx, row.Name, marks); err != nil {
		return nil, err
	}
	adopted, err := zfs.GetWithKeyStatus(ctx, s.zfs, row.Name, s.props.All())
	if err != nil {
		return nil, err
	}
	s.log.Info().Str("dataset", adopted.Name).Str("from", req.Dataset).Bool("retain", req.Retain).Msg("adopted")
	return s.csiVolume(adopted), nil
}

// adoptedAlready answers an adoption whose name is taken: the same
// adoption again (a retry) is its volume; anything else ALREADY_EXISTS.
func (s *Server) adoptedAlready(req AdoptRequest, existing *zfs.Dataset, err error) (*csi.Volume, error) {
	if err != nil {
		return nil, err
	}
	if existing.User[s.props.Adopted] != adoptMode(req) || (existing.Name != req.Dataset && !req.Rename) {
		return nil, status.Errorf(codes.AlreadyExists, "volume name %q is taken by %s", rules.Bounded(req.Name), existing.Name)
	}
	return s.csiVolume(*existing), nil
}

func adoptMode(req AdoptRequest) string {
	if req.Retain {
		return rules.ManagedRetained
	}
	return "own"
}

// checkAdoptable refuses, before anything changes, what the driver could
// not serve or would not own whole.
func (s *Server) checkAdoptable(ctx context.Context, req AdoptRequest, rows []zfs.Dataset, target string) error {
	row := rows[0]
	switch {
	case row.Type == zfs.Snapshot:
		return invalid("%s is a snapshot: adopt a filesystem or a zvol", row.Name)
	case row.User[s.props.Managed] != "":
		return status.Errorf(codes.AlreadyExists, "%s is already a volume of %s", row.Name, s.cfg.DriverName)
	case strings.Contains(row.Name[strings.LastIndexByte(row.Name, '/')+1:], IncomingContainer):
		return invalid("%s is where pulls are received", row.Name)
	case row.Origin != "":
		return status.Errorf(codes.FailedPrecondition, "%s is a clone of %s, which the driver would not own: promote it or copy it first", row.Name, row.Origin)
	case row.Name != target && !req.Rename:
		return status.Errorf(codes.FailedPrecondition, "%s is not the volume dataset %s that name %q maps to: adopt it with rename (one zfs rename moves it there)",
			row.Name, target, rules.Bounded(req.Name))
	case row.Name != target && zfs.PoolOf(row.Name) != zfs.PoolOf(target):
		return status.Errorf(codes.FailedPrecondition, "%s is in pool %s and %s in pool %s: zfs rename cannot cross pools", row.Name, zfs.PoolOf(row.Name), target, zfs.PoolOf(target))
	}
	for _, other := range rows[1:] {
		if other.Type != zfs.Snapshot {
			return status.Errorf(codes.FailedPrecondition, "%s has a child %s, which a volume cannot have", row.Name, other.Name)
		}
		if len(other.Clones) > 0 {
			return status.Errorf(codes.FailedPrecondition, "snapshot %s has clones (%s) the driver would not own", other.Name, strings.Join(other.Clones, ", "))
		}
	}
	if err := s.checkKind(ctx, req, row); err != nil {
		return err
	}
	if row.KeyStatus != "" && row.EncryptionRoot != row.Name {
		return status.Errorf(codes.FailedPrecondition, "%s is encrypted with the key of %s: adopt that encryption root's data apart from it first", row.Name, row.EncryptionRoot)
	}
	if s.inUse != nil {
		used, err := s.inUse(row.Name)
		if err != nil {
			return err
		}
		if used {
			return status.Errorf(codes.FailedPrecondition, "%s is mounted or open on this host: stop what uses it first", row.Name)
		}
	}
	return nil
}

// checkKind refuses a filesystem without a finite size and a zvol whose
// content is not the filesystem asked for (nothing is ever formatted over).
func (s *Server) checkKind(ctx context.Context, req AdoptRequest, row zfs.Dataset) error {
	if row.Type == zfs.Filesystem {
		switch {
		case !rules.IsDatasetFSType(req.FSType):
			return invalid("%s is a filesystem: it is adopted as a dataset volume, not as %s", row.Name, req.FSType)
		case row.RefQuota == 0 && req.Size == 0:
			return status.Errorf(codes.FailedPrecondition, "%s has no refquota: give a size, which becomes its refquota (it holds %s)", row.Name, zfs.FormatSize(row.Referenced))
		case req.Size > 0 && req.Size < row.Referenced:
			return status.Errorf(codes.OutOfRange, "%s holds %s, more than the size %s", row.Name, zfs.FormatSize(row.Referenced), zfs.FormatSize(req.Size))
		}
		return nil
	}
	if req.FSType != "" && !rules.FormattedFSTypes[req.FSType] {
		return invalid("filesystem type %q: a zvol holds ext4, xfs, btrfs, or is a raw block volume", rules.Bounded(req.FSType))
	}
	if req.Size > 0 {
		return invalid("%s is a zvol: its size is its volsize", row.Name)
	}
	if s.contentOf == nil {
		return nil
	}
	found, err := s.contentOf(ctx, row.Name)
	if err != nil {
		return err
	}
	if req.FSType != "" && found != req.FSType {
		return status.Errorf(codes.FailedPrecondition, "zvol %s holds %q, not %s: it is adopted as it is, never formatted", row.Name, found, req.FSType)
	}
	return nil
}

// adoptionMarks are the properties one zfs set gives the adopted data.
func (s *Server) adoptionMarks(req AdoptRequest, row zfs.Dataset) map[string]string {
	managed := "true"
	if req.Retain {
		managed = rules.ManagedRetained
	}
	marks := map[string]string{s.props.Managed: managed, s.props.CSIName: rules.EncodeName(req.Name),
		s.props.Adopted: adoptMode(req), s.props.Source: "adopted:" + row.Name}
	if row.Type == zfs.Filesystem {
		marks["mountpoint"], marks[s.props.AdoptedMountpoint] = "legacy", row.Native["mountpoint"]
		if req.Size > 0 {
			marks["refquota"] = strconv.FormatUint(req.Size, 10)
		}
	} else if req.FSType != "" {
		marks[s.props.FSType] = req.FSType
	}
	if row.KeyStatus != "" && req.KeyFromSecrets {
		marks["keylocation"] = "prompt"
	}
	return marks
}

// Release gives an adopted or created volume back to the operator: the
// driver's marks and properties go, its data and the operator's properties
// stay, and a filesystem gets back the mountpoint it had. Refused while the
// volume is in use on this host.
//
// A daemon killed at any point leaves a volume one more Release finishes:
// the mountpoint comes back first, while the volume is still marked, and
// then every mark goes in one transaction group (zfs.Interface.Inherit),
// the managed mark last, so that no mark outlives it.
func (s *Server) Release(ctx context.Context, volumeID string) (*csi.Volume, error) {
	defer s.volumesChanged()
	row, err := s.getVolume(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	unlock, err := s.inflight.Acquire(datasetLock(row.Name))
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.release(ctx, row)
}

// release is Release of a volume read and locked.
func (s *Server) release(ctx context.Context, row zfs.Dataset) (*csi.Volume, error) {
	restore, current, err := s.mountpoints(ctx, row)
	if err != nil {
		return nil, err
	}
	if s.inUse != nil {
		// A filesystem the driver serves has mountpoint=legacy; one that
		// has its own again is mounted there by ZFS itself (an earlier
		// release gave it back), which is no use of the volume.
		var except []string
		if strings.HasPrefix(current, "/") {
			except = []string{current}
		}
		used, err := s.inUse(row.Name, except...)
		if err != nil {
			return nil, err
		}
		if used {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is staged, published or open on this host: release it once nothing uses it", row.Name)
		}
	}
	if row.User[s.props.Deleted] != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is deleted and waits for its dependents", row.Name)
	}
	volume := s.csiVolume(row)
	if restore != "" && restore != current {
		if err := s.zfs.Set(ctx, row.Name, map[string]string{"mountpoint": restore}); err != nil {
			return nil, fmt.Errorf("releasing %s: its mountpoint %s: %w", row.Name, restore, err)
		}
	}
	var properties []string
	for _, property := range s.props.All() {
		if _, set := row.User[property]; set && property != s.props.Managed {
			properties = append(properties, property)
		}
	}
	if err := s.zfs.Inherit(ctx, row.Name, append(properties, s.props.Managed)...); err != nil {
		return nil, fmt.Errorf("releasing %s: %w", row.Name, err)
	}
	s.log.Info().Str("dataset", row.Name).Msg("released")
	return volume, nil
}

// mountpoints are the mountpoint a filesystem had before its adoption,
// which release gives back ("" for none: a zvol, or a volume the driver
// made, which keeps legacy), and the one it has now ("" for a zvol).
func (s *Server) mountpoints(ctx context.Context, row zfs.Dataset) (restore, current string, err error) {
	if row.Type != zfs.Filesystem {
		return "", "", nil
	}
	if restore = row.User[s.props.AdoptedMountpoint]; restore == "legacy" {
		restore = ""
	}
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{row.Name}, Native: []string{"mountpoint"}})
	if err != nil {
		return "", "", err
	}
	return restore, rows[0].Native["mountpoint"], nil
}
