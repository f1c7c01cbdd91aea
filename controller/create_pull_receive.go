package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// The receiving side of a pull: a peer's stream, checked before zfs reads
// a byte of it, received into the hidden dataset (resuming what an earlier
// try left), and the one rename that makes what arrived the volume.

// receive brings one snapshot's stream whole into incoming, reconnecting
// (and resuming) when it breaks off.
func (s *Server) receive(ctx context.Context, plan volumePlan, req forward.TransferRequest, incoming string, properties map[string]string, received *atomic.Uint64) error {
	for attempt := 0; ; attempt++ {
		done, err := s.receiveOnce(ctx, plan, req, incoming, properties, received)
		if done || err == nil {
			return nil
		}
		if !retryable(err) || attempt+1 >= pullAttempts || ctx.Err() != nil {
			return err
		}
		s.log.Warn().Err(err).Str("dataset", incoming).Str("source", req.SnapshotID).Msg("pull broke off; resuming")
		select {
		case <-time.After(pullBackoff[min(attempt, len(pullBackoff)-1)]):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// receiveOnce runs one stream into incoming: from its resume token when an
// earlier one was cut short. done says incoming was already whole.
func (s *Server) receiveOnce(ctx context.Context, plan volumePlan, req forward.TransferRequest, incoming string, properties map[string]string, received *atomic.Uint64) (done bool, err error) {
	token, err := s.zfs.ResumeToken(ctx, incoming)
	switch {
	case errors.Is(err, zfs.ErrNotFound):
		token = ""
	case err != nil:
		return false, err
	case token == "" && (req.FromSnapshotID == "" || s.hasSnapshot(ctx, incoming, req.SnapshotID)):
		return true, nil // received whole by an earlier pull that ended before its rename
	}
	req.ResumeToken = token
	opened := time.Now()
	stream, err := s.transfers.Open(ctx, req)
	if err != nil {
		if code := status.Code(err); code == codes.NotFound || code == codes.PermissionDenied {
			// The source is gone (or refuses this token): nothing can
			// complete what arrived. Leave nothing behind.
			s.dropIncoming(ctx, incoming, token != "")
		}
		if status.Code(err) == codes.PermissionDenied && token != "" {
			return s.receiveAfresh(ctx, plan, req, incoming, properties, received)
		}
		return false, err
	}
	defer stream.Close()
	// Open returns with the first chunk in hand: the time to first byte.
	s.log.Info().Str("dataset", incoming).Str("source", req.SnapshotID).Bool("resumed", token != "").
		Dur("first_byte_after", time.Since(opened)).Msg("pulling")
	opts := zfs.ReceiveOptions{Received: received}
	if token == "" && req.FromSnapshotID == "" {
		opts.Properties = properties // a resumed or incremental receive keeps the first one's
	}
	before := received.Load()
	err = s.zfs.Receive(ctx, incoming, opts, zfs.CheckStream(stream, expectedStream(req)))
	took := time.Since(opened)
	bytes := received.Load() - before
	s.log.Info().Err(err).Str("dataset", incoming).Uint64("bytes", bytes).Dur("duration", took).
		Float64("mib_per_second", float64(bytes)/(1<<20)/took.Seconds()).Msg("pull stream ended")
	if errors.Is(err, zfs.ErrRefusedStream) && token != "" {
		s.dropIncoming(ctx, incoming, true)
		return s.receiveAfresh(ctx, plan, req, incoming, properties, received)
	}
	return false, err
}

// receiveAfresh starts the stream of req anew after the partial receive a
// token named was dropped: that token was of an earlier try's round (a
// daemon killed mid-round), which this try does not take again.
func (s *Server) receiveAfresh(ctx context.Context, plan volumePlan, req forward.TransferRequest, incoming string, properties map[string]string, received *atomic.Uint64) (bool, error) {
	s.log.Info().Str("dataset", incoming).Str("source", req.SnapshotID).Msg("the partial receive was of another round; starting this one anew")
	req.ResumeToken = ""
	if token, err := s.zfs.ResumeToken(ctx, incoming); err == nil && token != "" {
		return false, status.Errorf(codes.Internal, "the partial receive of %s could not be dropped", incoming)
	}
	return s.receiveOnce(ctx, plan, req, incoming, properties, received)
}

// expectedStream is the receiving side's check of what a peer sends before
// zfs receive reads a byte of it: a substream (no properties, no other
// datasets: ParseStreamBegin refuses a compound one) of the very snapshot
// asked for, so that a peer cannot make this node receive anything else.
func expectedStream(req forward.TransferRequest) func(zfs.StreamBegin) error {
	_, dataset, snapshot, err := rules.ParseSnapshotID(req.SnapshotID)
	return func(begin zfs.StreamBegin) error {
		if err != nil || begin.ToName != snapshot {
			return fmt.Errorf("the peer sent a stream of %q for snapshot %q of %s", rules.Bounded(begin.ToName), rules.Bounded(req.SnapshotID), dataset)
		}
		return nil
	}
}

// dropIncoming removes what a pull received.
func (s *Server) dropIncoming(ctx context.Context, incoming string, partial bool) {
	ctx = context.WithoutCancel(ctx)
	if partial {
		if err := s.zfs.AbortReceive(ctx, incoming); err == nil || errors.Is(err, zfs.ErrNotFound) {
			return
		}
	}
	s.destroyQuietly(ctx, incoming, zfs.DestroyOptions{Recursive: true})
}

// retryable: errors after which a reconnect may succeed (the stream broke,
// the peer was busy or away). What the peer refused is final.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.NotFound, codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated, codes.AlreadyExists:
		return false
	}
	if errors.Is(err, zfs.ErrRefusedStream) {
		return false // the peer sends what it sent again
	}
	var failed *zfs.CommandError
	if errors.As(err, &failed) && failed.Kind != nil {
		return false // zfs said what is wrong with the target: another try says it again
	}
	return true
}

// finishPull checks what arrived against the request, sizes it, and makes
// it the volume: one rename, the step that makes it visible. The received
// snapshots go last (a crash before leaves a harmless snapshot of the
// volume; never a volume without its size).
func (s *Server) finishPull(ctx context.Context, plan volumePlan, incoming, dataset string, size uint64) (zfs.Dataset, error) {
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{incoming}, Depth: 1, Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot},
		UserProps: s.props.All(), Crypto: true})
	if err != nil {
		return zfs.Dataset{}, err
	}
	row, snapshots := rows[0], rows[1:]
	if problem := pulledProblem(plan, row); problem != "" {
		s.dropIncoming(ctx, incoming, false)
		return zfs.Dataset{}, status.Errorf(codes.InvalidArgument, "the content source %q %s", rules.Bounded(plan.sourceID), problem)
	}
	// The least a volume made from the source holds: a filesystem's data,
	// a zvol's volsize (its referenced counts metadata too and may pass
	// volsize by less than a block, which no volsize can be).
	has := row.Referenced
	if plan.zvol {
		has = row.VolSize
	}
	size = max(size, has)
	if block := row.VolBlockSize; plan.zvol && block > 0 {
		size = (size + block - 1) / block * block // the received zvol keeps the source's block size
	}
	if limit := plan.capacity.GetLimitBytes(); limit > 0 && size > uint64(limit) {
		// The source described itself smaller than what arrived holds.
		s.dropIncoming(ctx, incoming, false)
		return zfs.Dataset{}, status.Errorf(codes.OutOfRange, "the content source %q holds %d bytes, more than limit_bytes %d",
			rules.Bounded(plan.sourceID), size, limit)
	}
	grow := sourceGrowth(plan, row.VolSize, size)
	if !plan.zvol {
		grow["refquota"] = bytesString(size)
		if !plan.params.thin {
			grow["refreservation"] = bytesString(size)
		}
	}
	if row.KeyStatus != "" {
		grow["keylocation"] = "prompt" // the node loads the volume's key from its secrets
	}
	// The call that makes the volume is the one its retries repeat (a
	// move's first rounds had other parameters).
	grow[s.props.ParamsHash] = plan.params.hash
	if err := s.zfs.Set(ctx, incoming, grow); err != nil {
		return zfs.Dataset{}, err
	}
	// The rounds go while the dataset is still incoming: once renamed, it
	// is the volume, which a retry answers as it finds it. The pulled mark,
	// not a round, says the last round arrived.
	for _, snapshot := range snapshots {
		if err := s.zfs.Destroy(ctx, snapshot.Name, zfs.DestroyOptions{}); err != nil {
			return zfs.Dataset{}, err
		}
	}
	if err := s.zfs.Rename(ctx, incoming, dataset); err != nil {
		return zfs.Dataset{}, err
	}
	row.Name = dataset
	if plan.zvol {
		row.VolSize = max(row.VolSize, size)
	} else {
		row.RefQuota = size
	}
	return row, nil
}

// pulledProblem says why what arrived cannot be the volume asked for.
func pulledProblem(plan volumePlan, row zfs.Dataset) string {
	switch {
	case (row.Type == zfs.Volume) != plan.zvol:
		return fmt.Sprintf("is %s, the request asks for %s", describe(row.Type == zfs.Volume, ""), describe(plan.zvol, plan.fsType))
	case plan.params.encryption != "" && row.KeyStatus == "":
		return fmt.Sprintf("is not encrypted, and parameter %s=%s asks for an encrypted volume", ParamEncryption, plan.params.encryption)
	}
	return ""
}

// receivedRounds are the snapshot components the hidden dataset received,
// oldest first, and the GUID of its last round once that is in (Pulled).
func (s *Server) receivedRounds(ctx context.Context, incoming string) (rounds []string, pulledGUID string, err error) {
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{incoming}, Depth: 1,
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}, UserProps: []string{s.props.Pulled}, SkipMissing: true, Provenance: true})
	// The rounds' names are random: their order is the order ZFS made them.
	slices.SortStableFunc(rows, func(a, b zfs.Dataset) int { return cmp.Compare(a.CreateTxg, b.CreateTxg) })
	if err != nil {
		return nil, "", err
	}
	for _, row := range rows {
		if row.Type == zfs.Snapshot {
			_, component, _ := strings.Cut(row.Name, "@")
			rounds = append(rounds, component)
		} else {
			pulledGUID = row.User[s.props.Pulled]
		}
	}
	return rounds, pulledGUID, nil
}

// hasSnapshot says whether incoming holds the snapshot whose ID names it
// (an incremental round received whole).
func (s *Server) hasSnapshot(ctx context.Context, incoming, snapshotID string) bool {
	_, component, _ := strings.Cut(snapshotID, "@")
	_, err := zfs.Get(ctx, s.zfs, incoming+"@"+component, nil)
	return err == nil
}
