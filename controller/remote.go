package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Volumes made from another node's snapshot (decision 14). When
// transfers are configured the snapshot is pulled over the peer channel: a
// resumable `zfs receive -s` into a hidden dataset, fed by the snapshot
// node's `zfs send`, which becomes the volume by one `zfs rename` only when
// it is whole. The hidden dataset lives in a container below the parent
// (IncomingContainer), one level deeper than any volume: nothing that lists
// volumes or snapshots sees it, so no partial volume is ever visible. A
// pull runs apart from its call, as a local copy does (copyJobs): the call
// answers ABORTED with how much has arrived, and a retry waits for it. A
// pull cut short (a dropped connection, either daemon killed) resumes from
// the hidden dataset's receive_resume_token.

// IncomingContainer is the child of a parent dataset that holds pulls under
// way. Its name begins with '_', which no volume's component does
// (driver.Namer starts every component with a letter or digit).
const IncomingContainer = "_incoming"

// pullAttempts bounds how often one pull reconnects after its stream broke
// before the job gives up (a retry of the call starts another, resuming).
const pullAttempts = 5

// defaultPullIdle is Server.pullIdle's default: longer than a CO waits
// between two retries of a call (external-provisioner backs off to 5
// minutes at most), so only a pull its caller gave up on is abandoned.
const defaultPullIdle = 15 * time.Minute

// pullBackoff is the wait before reconnecting.
var pullBackoff = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second}

// UseTransfers lets CreateVolume pull other nodes' snapshots through t.
// Without it (nil) a source on another node is RESOURCE_EXHAUSTED, as the
// CO expects of a volume that cannot be made in this topology. Call before
// serving.
func (s *Server) UseTransfers(t driver.Transfers) { s.transfers = t }

// incomingDataset is where the pull of a volume's dataset is received.
func incomingDataset(dataset string) string {
	slash := strings.LastIndexByte(dataset, '/')
	return dataset[:slash] + "/" + IncomingContainer + "/" + dataset[slash+1:]
}

// pullVolume makes generation's dataset of plan from another node's
// snapshot, apart from the call, which waits for it as long as it can.
func (s *Server) pullVolume(ctx context.Context, plan volumePlan, size uint64, locks *heldLocks, generation int) (*csi.CreateVolumeResponse, error) {
	if generation == 0 {
		return nil, status.Errorf(codes.ResourceExhausted,
			"volume name %q: %d earlier volumes of this name are deleted but still held by their snapshots' clones", driver.Bounded(plan.name), driver.MaxGenerations)
	}
	if err := s.copies.takeFailure(plan.name); err != nil {
		// The last pull failed with no call waiting: its error is this
		// call's answer (a certificate refused, a source gone), and the
		// next call tries again.
		return nil, err
	}
	dataset := plan.params.parent + "/" + s.namer.VolumeComponent(plan.name, generation)
	var made zfs.Dataset
	job := s.copies.start(plan.name, plan.sourceID, dataset, func(ctx context.Context, received *atomic.Uint64) error {
		ctx, abandoned := s.watchPull(ctx, plan.name)
		row, err := s.pull(ctx, plan, dataset, size, received)
		if err != nil && abandoned() {
			// The caller gave up (a claim deleted while its volume was
			// still coming): nothing of it stays, here or, for a volume
			// source, its rounds on the source's node.
			s.log.Warn().Str("dataset", dataset).Str("source", plan.sourceID).Dur("idle", s.pullIdle).
				Msg("pull abandoned: no call asked for it; what it received is removed")
			s.removeIncoming(ctx, incomingDataset(dataset))
			s.endRoundsQuietly(ctx, plan, dataset)
			return status.Errorf(codes.Aborted, "the pull of %s was abandoned after %s without a call asking for it; a new call starts again",
				driver.Bounded(plan.sourceID), s.pullIdle)
		}
		made = row
		if err != nil && status.Code(err) != codes.Aborted {
			s.copies.fail(plan.name, err)
		}
		return err
	})
	handedOver, err := job.await(ctx, locks.release)
	if handedOver {
		locks.take()
	}
	if err != nil {
		if status.Code(err) != codes.Aborted && ctx.Err() == nil {
			s.copies.takeFailure(plan.name) // this call answers it
		}
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: s.csiVolume(made)}, nil
}

// watchPull ends ctx when no call has waited for the pull of name for
// pullIdle; abandoned then says so.
func (s *Server) watchPull(ctx context.Context, name string) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	var abandoned atomic.Bool
	go func() {
		defer cancel()
		tick := time.NewTicker(max(s.pullIdle/10, 10*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if job := s.copies.running(name); job != nil && time.Since(time.Unix(0, job.asked.Load())) > s.pullIdle {
				abandoned.Store(true)
				return
			}
		}
	}()
	return ctx, abandoned.Load
}

// pull receives the source into the hidden dataset, resuming what an
// earlier pull left, and makes it the volume.
func (s *Server) pull(ctx context.Context, plan volumePlan, dataset string, size uint64, received *atomic.Uint64) (zfs.Dataset, error) {
	incoming := incomingDataset(dataset)
	container := incoming[:strings.LastIndexByte(incoming, '/')]
	err := s.zfs.Create(ctx, container, zfs.CreateOptions{Properties: map[string]string{"mountpoint": "none", "canmount": "off"}})
	if err != nil && !errors.Is(err, zfs.ErrExists) {
		return zfs.Dataset{}, err
	}
	properties := s.volumeProperties(plan, size, true)
	// The size is set when the source's is known (finishPull): a quota
	// smaller than the data would stop the receive.
	delete(properties, "refquota")
	delete(properties, "refreservation")
	if !plan.fromSnap {
		return s.pullRounds(ctx, plan, incoming, dataset, size, properties, received)
	}
	if err := s.receive(ctx, plan, driver.TransferRequest{SnapshotID: plan.sourceID}, incoming, properties, received); err != nil {
		return zfs.Dataset{}, err
	}
	return s.finishPull(ctx, plan, incoming, dataset, size)
}

// receive brings one snapshot's stream whole into incoming, reconnecting
// (and resuming) when it breaks off.
func (s *Server) receive(ctx context.Context, plan volumePlan, req driver.TransferRequest, incoming string, properties map[string]string, received *atomic.Uint64) error {
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
func (s *Server) receiveOnce(ctx context.Context, plan volumePlan, req driver.TransferRequest, incoming string, properties map[string]string, received *atomic.Uint64) (done bool, err error) {
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
func (s *Server) receiveAfresh(ctx context.Context, plan volumePlan, req driver.TransferRequest, incoming string, properties map[string]string, received *atomic.Uint64) (bool, error) {
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
func expectedStream(req driver.TransferRequest) func(zfs.StreamBegin) error {
	_, dataset, snapshot, err := driver.ParseSnapshotID(req.SnapshotID)
	return func(begin zfs.StreamBegin) error {
		if err != nil || begin.ToName != snapshot {
			return fmt.Errorf("the peer sent a stream of %q for snapshot %q of %s", driver.Bounded(begin.ToName), driver.Bounded(req.SnapshotID), dataset)
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

// removeIncoming removes the hidden dataset whatever state it is in: a
// receive's partial state first (ZFS keeps it apart for an incremental),
// then the dataset with every round it received.
func (s *Server) removeIncoming(ctx context.Context, incoming string) {
	ctx = context.WithoutCancel(ctx)
	_ = s.zfs.AbortReceive(ctx, incoming) // none to abort is no error here
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
		return zfs.Dataset{}, status.Errorf(codes.InvalidArgument, "the content source %q %s", driver.Bounded(plan.sourceID), problem)
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
			driver.Bounded(plan.sourceID), size, limit)
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
	if err := s.zfs.Rename(ctx, incoming, dataset); err != nil {
		return zfs.Dataset{}, err
	}
	for _, snapshot := range snapshots {
		s.destroyQuietly(ctx, dataset+snapshot.Name[strings.IndexByte(snapshot.Name, '@'):], zfs.DestroyOptions{})
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
