// Package snapmeta implements the CSI SnapshotMetadata service for zvols:
// which byte ranges a snapshot holds (GetMetadataAllocated), and which
// changed between two snapshots of one zvol (GetMetadataDelta), as the
// records of a `zfs send` stream name them (zfs.VolumeRanges). Backup tools
// copy only those ranges. The answer streams as it is read, in bounded
// memory: one extent is pending at a time, and a response holds at most
// max_results extents.
package snapmeta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// DefaultMaxResults is how many extents a response holds when the CO
// leaves max_results at 0.
const DefaultMaxResults = 4096

// Server implements csi.SnapshotMetadataServer.
type Server struct {
	csi.UnimplementedSnapshotMetadataServer
	cfg   driver.Config
	zfs   zfs.Interface
	props driver.UserProps
	owner driver.Owner
}

// New returns the service for cfg's node over z.
func New(cfg driver.Config, z zfs.Interface) *Server {
	return &Server{cfg: cfg, zfs: z, props: driver.NewUserProps(cfg.DriverName), owner: driver.NewOwner(cfg)}
}

// GetMetadataAllocated implements csi.SnapshotMetadataServer: the ranges a
// full send stream of the snapshot writes.
func (s *Server) GetMetadataAllocated(req *csi.GetMetadataAllocatedRequest, stream csi.SnapshotMetadata_GetMetadataAllocatedServer) error {
	ctx := stream.Context()
	target, err := s.zvolSnapshot(ctx, "snapshot_id", req.GetSnapshotId())
	if err != nil {
		return driver.Status(err)
	}
	out, err := newExtents(target, req.GetStartingOffset(), req.GetMaxResults(), func(extents []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataAllocatedResponse{BlockMetadataType: csi.BlockMetadataType_VARIABLE_LENGTH,
			VolumeCapacityBytes: int64(target.volSize), BlockMetadata: extents})
	})
	if err != nil {
		return err
	}
	return driver.Status(out.finish(s.zfs.VolumeRanges(ctx, target.name, "", func(r zfs.StreamRange) error {
		if r.Freed {
			return nil // a hole: nothing allocated
		}
		return out.add(r.Offset, r.Length)
	})))
}

// GetMetadataDelta implements csi.SnapshotMetadataServer: the ranges an
// incremental send stream from base to target writes or frees (a freed
// range reads as zeros now: it changed).
func (s *Server) GetMetadataDelta(req *csi.GetMetadataDeltaRequest, stream csi.SnapshotMetadata_GetMetadataDeltaServer) error {
	ctx := stream.Context()
	base, err := s.zvolSnapshot(ctx, "base_snapshot_id", req.GetBaseSnapshotId())
	if err != nil {
		return driver.Status(err)
	}
	target, err := s.zvolSnapshot(ctx, "target_snapshot_id", req.GetTargetSnapshotId())
	if err != nil {
		return driver.Status(err)
	}
	switch {
	case base.volume != target.volume:
		return status.Errorf(codes.InvalidArgument, "base %q and target %q are snapshots of different volumes",
			req.GetBaseSnapshotId(), req.GetTargetSnapshotId())
	case base.created.After(target.created) || base.name == target.name:
		return status.Errorf(codes.InvalidArgument, "base %q is not earlier than target %q", req.GetBaseSnapshotId(), req.GetTargetSnapshotId())
	}
	out, err := newExtents(target, req.GetStartingOffset(), req.GetMaxResults(), func(extents []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataDeltaResponse{BlockMetadataType: csi.BlockMetadataType_VARIABLE_LENGTH,
			VolumeCapacityBytes: int64(target.volSize), BlockMetadata: extents})
	})
	if err != nil {
		return err
	}
	err = s.zfs.VolumeRanges(ctx, target.name, base.name, func(r zfs.StreamRange) error { return out.add(r.Offset, r.Length) })
	if errors.Is(err, zfs.ErrInvalid) {
		return status.Errorf(codes.InvalidArgument, "base %q is not an earlier snapshot of the target's volume: %v", req.GetBaseSnapshotId(), err)
	}
	return driver.Status(out.finish(err))
}

// zvolSnapshot is a snapshot of a zvol of ours, with its volume's size.
type zvolSnapshot struct {
	name, volume string
	volSize      uint64
	created      time.Time
}

// zvolSnapshot resolves a snapshot ID (one zfs list): NOT_FOUND unless it
// names a live CSI snapshot of this node, FAILED_PRECONDITION for a
// snapshot of a filesystem volume.
func (s *Server) zvolSnapshot(ctx context.Context, field, id string) (zvolSnapshot, error) {
	if id == "" {
		return zvolSnapshot{}, status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	name, dataset, err := s.cfg.SnapshotName(id)
	if err != nil {
		return zvolSnapshot{}, status.Errorf(codes.NotFound, "snapshot %q does not exist here: %v", id, err)
	}
	row, err := zfs.Get(ctx, s.zfs, name, s.props.All())
	if errors.Is(err, zfs.ErrNotFound) || err == nil && !s.owner.LiveSnapshot(row) {
		return zvolSnapshot{}, status.Errorf(codes.NotFound, "snapshot %q does not exist", id)
	}
	if err != nil {
		return zvolSnapshot{}, err
	}
	if row.VolSize == 0 {
		return zvolSnapshot{}, status.Errorf(codes.FailedPrecondition,
			"snapshot %q is of a filesystem volume: snapshot metadata is served for block (zvol) volumes only", id)
	}
	return zvolSnapshot{name: name, volume: dataset, volSize: row.VolSize, created: row.Creation}, nil
}

// extents merges the ranges a stream names, in offset order, into maximal
// extents within [start, volume size) and sends them in batches.
type extents struct {
	start, end uint64 // what may be reported: [starting_offset, volSize)
	max        int
	send       func([]*csi.BlockMetadata) error
	batch      []*csi.BlockMetadata
	pending    *csi.BlockMetadata // the extent still growing
	sent       bool
	last       uint64 // end of the last range added: the stream's order is checked
	tail       uint64 // the least offset of a free "to the end", reported last
}

func newExtents(target zvolSnapshot, startingOffset int64, maxResults int32, send func([]*csi.BlockMetadata) error) (*extents, error) {
	switch {
	case startingOffset < 0 || uint64(startingOffset) > target.volSize:
		return nil, status.Errorf(codes.OutOfRange, "starting_offset %d is outside the volume's %d bytes", startingOffset, target.volSize)
	case maxResults < 0:
		return nil, status.Errorf(codes.InvalidArgument, "max_results must not be negative")
	}
	limit := int(maxResults)
	if limit == 0 {
		limit = DefaultMaxResults
	}
	return &extents{start: uint64(startingOffset), end: target.volSize, max: limit, send: send, tail: zfs.ToEnd}, nil
}

// add takes a range of the stream: clipped to what may be reported, and
// merged with the pending extent when it touches or overlaps it.
func (e *extents) add(offset, length uint64) error {
	if length == zfs.ToEnd {
		// A free to the end of the object may come before ranges below it
		// (zfs sends it where it finds it): it is the last extent.
		e.tail = min(e.tail, offset)
		return nil
	}
	end := e.end
	if length != zfs.ToEnd && offset+length < end {
		end = offset + length
	}
	if offset < e.last {
		return fmt.Errorf("%w: range at %d comes after one ending at %d", zfs.ErrStream, offset, e.last)
	}
	e.last = end
	offset = max(offset, e.start)
	if offset >= end {
		return nil
	}
	if e.pending != nil && uint64(e.pending.ByteOffset+e.pending.SizeBytes) >= offset {
		e.pending.SizeBytes = int64(end) - e.pending.ByteOffset
		return nil
	}
	if err := e.flushPending(); err != nil {
		return err
	}
	e.pending = &csi.BlockMetadata{ByteOffset: int64(offset), SizeBytes: int64(end - offset)}
	return nil
}

func (e *extents) flushPending() error {
	if e.pending == nil {
		return nil
	}
	e.batch, e.pending = append(e.batch, e.pending), nil
	if len(e.batch) < e.max {
		return nil
	}
	return e.sendBatch()
}

func (e *extents) sendBatch() error {
	batch := e.batch
	e.batch, e.sent = nil, true
	return e.send(batch)
}

// finish sends what is left after the stream ended without err: at least
// one response, so that the CO learns the volume's size even of an empty
// answer.
func (e *extents) finish(err error) error {
	if err != nil {
		return err
	}
	if e.tail < e.end {
		offset := max(e.tail, e.start)
		if e.pending == nil || uint64(e.pending.ByteOffset+e.pending.SizeBytes) < offset {
			offset = max(offset, e.last)
		}
		e.last = min(e.last, offset)
		if err := e.add(offset, e.end-offset); err != nil {
			return err
		}
	}
	if err := e.flushPending(); err != nil {
		return err
	}
	if len(e.batch) > 0 || !e.sent {
		return e.sendBatch()
	}
	return nil
}
