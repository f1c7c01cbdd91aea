// Package snapmeta implements the CSI SnapshotMetadata service for zvols:
// which byte ranges a snapshot holds (GetMetadataAllocated), and which
// changed between two snapshots of one zvol (GetMetadataDelta), as the
// records of a `zfs send` stream name them (zfs.VolumeRanges). Backup tools
// copy only those ranges. The answer streams as it is read: one extent is
// pending at a time, and a response holds at most max_results extents.
//
// A delta is exact. An incremental stream frees more than changed: every
// hole without a birth time (never written; OpenZFS's default
// send_holes_without_birth_time=1), and everything past the target's last
// data "to the end of the object". A freed range changed only where the
// base held data, so the first freed range of a delta reads the base's
// allocated extents (a full send of the base, its data skipped) and every
// freed range is reported only where it meets them. That list is the one
// thing held in memory: 16 bytes per extent of the base.
package snapmeta

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// DefaultMaxResults is how many extents a response holds when the CO
// leaves max_results at 0.
const DefaultMaxResults = 4096

// Server implements csi.SnapshotMetadataServer.
type Server struct {
	csi.UnimplementedSnapshotMetadataServer
	cfg   rules.Config
	zfs   zfs.Interface
	props rules.UserProps
	owner rules.Owner
}

// New returns the service for cfg's node over z.
func New(cfg rules.Config, z zfs.Interface) *Server {
	return &Server{cfg: cfg, zfs: z, props: rules.NewUserProps(cfg.DriverName), owner: rules.NewOwner(cfg)}
}

// GetMetadataAllocated implements csi.SnapshotMetadataServer: the ranges a
// full send stream of the snapshot writes.
func (s *Server) GetMetadataAllocated(req *csi.GetMetadataAllocatedRequest, stream csi.SnapshotMetadata_GetMetadataAllocatedServer) error {
	ctx := stream.Context()
	target, err := s.zvolSnapshot(ctx, "snapshot_id", req.GetSnapshotId())
	if err != nil {
		return rpc.Status(err)
	}
	out, err := newExtents(target, req.GetStartingOffset(), req.GetMaxResults(), func(extents []*csi.BlockMetadata) error {
		return stream.Send(&csi.GetMetadataAllocatedResponse{BlockMetadataType: csi.BlockMetadataType_VARIABLE_LENGTH,
			VolumeCapacityBytes: int64(target.volSize), BlockMetadata: extents})
	})
	if err != nil {
		return err
	}
	return rpc.Status(out.finish(s.zfs.VolumeRanges(ctx, target.name, "", func(r zfs.StreamRange) error {
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
		return rpc.Status(err)
	}
	target, err := s.zvolSnapshot(ctx, "target_snapshot_id", req.GetTargetSnapshotId())
	if err != nil {
		return rpc.Status(err)
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
	out.loadBase = func() (*allocation, error) { return s.allocation(ctx, base.name) }
	err = s.zfs.VolumeRanges(ctx, target.name, base.name, func(r zfs.StreamRange) error {
		if r.Freed {
			return out.addFreed(r.Offset, r.Length)
		}
		return out.add(r.Offset, r.Length)
	})
	if errors.Is(err, zfs.ErrInvalid) {
		return status.Errorf(codes.InvalidArgument, "base %q is not an earlier snapshot of the target's volume: %v", req.GetBaseSnapshotId(), err)
	}
	return rpc.Status(out.finish(err))
}

// allocation reads the extents a snapshot holds data in: one full send.
func (s *Server) allocation(ctx context.Context, snapshot string) (*allocation, error) {
	held := &allocation{}
	err := s.zfs.VolumeRanges(ctx, snapshot, "", func(r zfs.StreamRange) error {
		if !r.Freed {
			held.add(r.Offset, r.Length)
		}
		return nil
	})
	return held, err
}

// allocation is a snapshot's data as sorted, disjoint [start, end) spans.
type allocation struct{ spans [][2]uint64 }

// add appends a range at or past the last one, merging what touches.
func (a *allocation) add(offset, length uint64) {
	end := offset + length
	if n := len(a.spans); n > 0 && a.spans[n-1][1] >= offset {
		a.spans[n-1][1] = max(a.spans[n-1][1], end)
		return
	}
	a.spans = append(a.spans, [2]uint64{offset, end})
}

// within calls fn, in order, for each part of [from, to) the spans cover.
func (a *allocation) within(from, to uint64, fn func(from, to uint64) error) error {
	first := sort.Search(len(a.spans), func(i int) bool { return a.spans[i][1] > from })
	for _, span := range a.spans[first:] {
		if span[0] >= to {
			break
		}
		if err := fn(max(span[0], from), min(span[1], to)); err != nil {
			return err
		}
	}
	return nil
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
	// loadBase, for a delta, reads what the base held: a freed range is
	// reported only where it meets that. It runs once, when a freed range
	// first falls where something may be reported.
	loadBase func() (*allocation, error)
	base     *allocation
}

// held is what the base held, read on first use.
func (e *extents) held() (*allocation, error) {
	if e.base == nil {
		base, err := e.loadBase()
		if err != nil {
			return nil, err
		}
		e.base = base
	}
	return e.base, nil
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

// addFreed takes a range the stream frees: the parts the base held data in.
func (e *extents) addFreed(offset, length uint64) error {
	if length == zfs.ToEnd {
		return e.add(offset, length)
	}
	if offset < e.last {
		return fmt.Errorf("%w: range at %d comes after one ending at %d", zfs.ErrStream, offset, e.last)
	}
	from, to := max(offset, e.start), min(offset+length, e.end)
	if from < to { // else nothing may be reported there: the base need not be read
		base, err := e.held()
		if err != nil {
			return err
		}
		if err := base.within(from, to, func(from, to uint64) error { return e.add(from, to-from) }); err != nil {
			return err
		}
	}
	e.last = max(e.last, to)
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
		tail := func(offset, end uint64) error {
			if e.pending == nil || uint64(e.pending.ByteOffset+e.pending.SizeBytes) < offset {
				offset = max(offset, e.last)
			}
			if offset >= end {
				return nil
			}
			e.last = min(e.last, offset)
			return e.add(offset, end-offset)
		}
		from := max(e.tail, e.start)
		if e.loadBase == nil {
			if err := tail(from, e.end); err != nil {
				return err
			}
		} else if base, err := e.held(); err != nil {
			return err
		} else if err := base.within(from, e.end, tail); err != nil {
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
