package controller

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// A volume's content source, resolved and checked against the plan by the
// same rules wherever it lives: a snapshot or volume here, or one of
// another node that that node describes through the same lookup (pulls.go);
// and the snapshot a clone or a copy is made from.

// source is a resolved content source.
type source struct {
	snapshot string // the snapshot to clone or send; for a volume source, made on the fly
	volume   string // the source volume's dataset, when the source is a volume
	zvol     bool
	fsType   string // a zvol source's filesystem, "" for raw block
	size     uint64 // the source's capacity: the least the new volume can have
	// blockSize is a zvol source's volblocksize, which its clones keep.
	blockSize uint64
	// remembered: it came from sourceIndex, not from ZFS in this call.
	remembered bool
	// encrypted: its data is encrypted (read only when the plan asks for
	// encryption or a copy; sourceIndex does not know it).
	encrypted bool
}

// checkSource refuses a source whose data the new volume could not use or
// would leave unencrypted.
func checkSource(plan volumePlan, src *source) error {
	if err := checkSourceKind(plan, src); err != nil {
		return err
	}
	return checkSourceEncryption(plan, src)
}

// checkSourceEncryption refuses what would leave data unencrypted: a volume
// asked to be encrypted from a source that is not, and a copy of an
// encrypted source (zfs send without -w decrypts).
func checkSourceEncryption(plan volumePlan, src *source) error {
	switch {
	case plan.params.copySource && src.encrypted && !plan.remote: // a pull is a raw send
		return invalid("%s=copy of an encrypted source would be sent decrypted: use %s=clone (a clone shares its source's key)",
			ParamSourceMode, ParamSourceMode)
	case plan.params.encryption != "" && !src.encrypted:
		return invalid("parameter %s=%s: the source %q is not encrypted, and a volume made from it keeps its source's encryption",
			ParamEncryption, plan.params.encryption, rules.Bounded(plan.sourceID))
	}
	return nil
}

// resolveSource finds a content source and checks it against the plan:
// the same rules for a source here and one on another node, which that
// node describes by the same lookup (pulls.go).
func (s *Server) resolveSource(ctx context.Context, plan volumePlan) (*source, error) {
	var src *source
	var err error
	if plan.remote {
		src, err = s.describeRemote(ctx, plan)
	} else {
		src, err = s.lookupSource(ctx, plan.sourceID, plan.fromSnap, plan.params.encryption != "" || plan.params.copySource)
	}
	if err != nil {
		return nil, err
	}
	return src, checkSource(plan, src)
}

// describeRemote asks the source's node to describe it.
func (s *Server) describeRemote(ctx context.Context, plan volumePlan) (*source, error) {
	sourceNode, _, err := rules.ParseVolumeID(plan.sourceID)
	if plan.fromSnap {
		sourceNode, _, _, err = rules.ParseSnapshotID(plan.sourceID)
	}
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "content source %q: %v", rules.Bounded(plan.sourceID), err)
	}
	conn, err := s.sourceConn(ctx, sourceNode)
	if err != nil {
		return nil, err
	}
	fields, err := callPulls(ctx, conn, pullsDescribe, map[string]string{fieldSource: plan.sourceID, fieldSnapshot: strconv.FormatBool(plan.fromSnap)})
	if err != nil {
		return nil, err
	}
	return remoteSource(fields)
}

// sourceConn reaches a source's node. A node this one has no address for,
// or cannot reach now, is UNAVAILABLE (the CO retries, or places the volume
// elsewhere), never a final error.
func (s *Server) sourceConn(ctx context.Context, nodeID string) (grpc.ClientConnInterface, error) {
	conn, err := s.transfers.Conn(ctx, nodeID)
	if err != nil {
		if code := status.Code(err); code == codes.Unauthenticated || code == codes.PermissionDenied {
			return nil, err
		}
		return nil, status.Errorf(codes.Unavailable, "%s: the content source is on node %q, which this node cannot reach: %s",
			otherNodeMarker, nodeID, rules.Bounded(status.Convert(err).Message()))
	}
	return conn, nil
}

// lookupSource finds a content source this driver owns, or NOT_FOUND. It
// costs one zfs list, or none for a snapshot sourceIndex remembers (unless
// crypto asks for its encryption, which the index does not know).
func (s *Server) lookupSource(ctx context.Context, sourceID string, fromSnap, crypto bool) (*source, error) {
	if !fromSnap {
		row, err := s.getVolume(ctx, sourceID)
		if err != nil {
			return nil, err
		}
		if s.owner.Retained(row) {
			return nil, retainedRefusal(row.Name, "clones and copies")
		}
		return &source{volume: row.Name, zvol: row.Type == zfs.Volume, fsType: row.User[s.props.FSType], size: capacity(row),
			blockSize: row.VolBlockSize, encrypted: row.KeyStatus != ""}, nil
	}
	snapshot, dataset, err := s.snapshotName(sourceID)
	if err != nil {
		return nil, err
	}
	if src, ok := s.sources.lookup(snapshot); ok && !crypto {
		src.remembered = true
		return &src, nil
	}
	epoch := s.sources.begin()
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{dataset, snapshot},
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}, UserProps: s.props.All(), SkipMissing: true, Crypto: true})
	if err != nil {
		return nil, err
	}
	var snapshotRow, volumeRow *zfs.Dataset
	for i, row := range rows {
		switch {
		case row.Name == snapshot && s.owner.LiveSnapshot(row):
			snapshotRow = &rows[i]
		case row.Name == dataset:
			volumeRow = &rows[i]
		}
	}
	if snapshotRow == nil {
		return nil, status.Errorf(codes.NotFound, "snapshot %q does not exist", rules.Bounded(sourceID))
	}
	src := s.snapshotSource(*snapshotRow, volumeRow)
	s.sources.remember(epoch, src)
	src.encrypted = snapshotRow.KeyStatus != ""
	return &src, nil
}

// snapshotSource is a CSI snapshot as a content source: its kind and
// filesystem (a snapshot inherits its volume's fstype property), its block
// size, and the least size a volume made from it has (restoreSize).
func (s *Server) snapshotSource(snapshot zfs.Dataset, volume *zfs.Dataset) source {
	src := source{snapshot: snapshot.Name, zvol: snapshot.VolSize > 0, size: s.restoreSize(snapshot, volume),
		fsType: snapshot.User[s.props.FSType]}
	if src.zvol && volume != nil {
		src.blockSize = volume.VolBlockSize
	}
	return src
}

// restoreSize is the least size a volume made from a snapshot has: the size
// its volume had when it was taken (a zvol snapshot's own volsize; the size
// CreateSnapshot recorded on a dataset's). A dataset snapshot made before the
// driver recorded sizes falls back to the most of what it references and
// its volume's refquota now (volume may be nil when it is not known).
func (s *Server) restoreSize(snapshot zfs.Dataset, volume *zfs.Dataset) uint64 {
	if snapshot.VolSize > 0 {
		return snapshot.VolSize
	}
	if size, err := strconv.ParseUint(snapshot.User[s.props.Size], 10, 64); err == nil && size > 0 {
		return size
	}
	size := snapshot.Referenced
	if volume != nil {
		size = max(size, capacity(*volume))
	}
	return size
}

// checkSourceKind refuses a source whose data the new volume could not use:
// a dataset for a zvol or the reverse, or a zvol whose filesystem differs from
// the one asked for (the node never formats a device that holds data). A
// formatted zvol may become a raw block volume: its data is still there.
func checkSourceKind(plan volumePlan, src *source) error {
	if plan.zvol != src.zvol || (plan.zvol && plan.fsType != "" && plan.fsType != src.fsType) {
		return invalid("the content source is %s, the request asks for %s", describe(src.zvol, src.fsType), describe(plan.zvol, plan.fsType))
	}
	return nil
}

// takeSentSnapshot is the snapshot a volume from src is cloned or copied
// from (sentSnapshot), made now for a volume source, and cleanup, which the
// clone or copy calls once it is done with it.
func (s *Server) takeSentSnapshot(ctx context.Context, src *source, dataset string) (string, func(context.Context), error) {
	snapshot := s.sentSnapshot(src, dataset)
	if src.volume == "" {
		return snapshot, func(context.Context) {}, nil
	}
	// Internal snapshots (rules.InternalSnapshotPrefix) carry the
	// Internal mark, are never listed as CSI snapshots, and are
	// destroyed deferred at once, so ZFS removes them with their clone.
	err := s.zfs.Snapshot(ctx, snapshot, map[string]string{s.props.Internal: "true"})
	if err != nil && !errors.Is(err, zfs.ErrExists) {
		return "", nil, err
	}
	// Deferred: destroyed now if nothing was cloned from it, else with its clone.
	return snapshot, func(ctx context.Context) {
		if !s.destroyQuietly(context.WithoutCancel(ctx), snapshot, zfs.DestroyOptions{Defer: true}) {
			s.watchSnapshots(src.volume) // the reaper tries again
		}
	}, nil
}

// sentSnapshot is the snapshot a volume from src is cloned or copied from:
// the source snapshot, or for a volume source the internal snapshot made for
// dataset.
func (s *Server) sentSnapshot(src *source, dataset string) string {
	if src.volume == "" {
		return src.snapshot
	}
	return src.volume + "@" + rules.InternalSnapshotPrefix + dataset[strings.LastIndexByte(dataset, '/')+1:]
}
