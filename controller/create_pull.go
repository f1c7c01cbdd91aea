package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// Volumes made from another node's snapshot or volume (decision 14), and
// the rounds of a move. When transfers are configured the source is pulled
// over the peer channel: a
// resumable `zfs receive -s` into a hidden dataset, fed by the snapshot
// node's `zfs send`, which becomes the volume by one `zfs rename` only when
// it is whole. The hidden dataset lives in a container below the parent
// (IncomingContainer), one level deeper than any volume: nothing that lists
// volumes or snapshots sees it, so no partial volume is ever visible. A
// pull runs apart from its call, as a local copy does (copyJobs): the call
// answers ABORTED with how much has arrived, and a retry waits for it. A
// pull cut short (a dropped connection, either daemon killed) resumes from
// the hidden dataset's receive_resume_token. A snapshot comes as one
// stream; a volume in rounds (create_pull_rounds.go), a move's among them;
// either is received, and made the volume, by create_pull_receive.go.

// IncomingContainer is the child of a parent dataset that holds pulls under
// way. Its name begins with '_', which no volume's component does
// (rules.Namer starts every component with a letter or digit).
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
func (s *Server) UseTransfers(t forward.Transfers) { s.transfers = t }

// incomingDataset is where the pull of a volume's dataset is received.
func incomingDataset(dataset string) string {
	slash := strings.LastIndexByte(dataset, '/')
	return dataset[:slash] + "/" + IncomingContainer + "/" + dataset[slash+1:]
}

// createPulled makes a volume from another node's source: the volume an
// earlier call pulled is looked for first (its source may be gone: a move
// deletes it), then the source is described by its node and checked as a
// local one, and pulled.
func (s *Server) createPulled(ctx context.Context, plan volumePlan, locks *heldLocks) (*csi.CreateVolumeResponse, error) {
	existing, free, err := s.findByName(ctx, plan)
	if err != nil || existing != nil {
		return s.existingVolume(plan, existing, err)
	}
	if free != 0 {
		// A pull whose last round is in may have seen its source go (a
		// move's): finish it from what arrived, without the source.
		dataset := s.generationDataset(plan, free)
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
	_, size, err := s.checkedSource(ctx, plan)
	if err != nil {
		return nil, err
	}
	return s.pullVolume(ctx, plan, size, locks, free)
}

// pullVolume makes generation's dataset of plan from another node's
// snapshot, apart from the call, which waits for it as long as it can.
func (s *Server) pullVolume(ctx context.Context, plan volumePlan, size uint64, locks *heldLocks, generation int) (*csi.CreateVolumeResponse, error) {
	if generation == 0 {
		return nil, generationsHeld(plan)
	}
	if err := s.copies.takeFailure(plan.name); err != nil {
		// The last pull failed with no call waiting: its error is this
		// call's answer (a certificate refused, a source gone), and the
		// next call tries again.
		return nil, err
	}
	dataset := s.generationDataset(plan, generation)
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
				rules.Bounded(plan.sourceID), s.pullIdle)
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
// earlier pull left, and makes it the volume: a snapshot in one stream, a
// volume in rounds (pullRounds).
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
	if err := s.receive(ctx, plan, forward.TransferRequest{SnapshotID: plan.sourceID}, incoming, properties, received); err != nil {
		return zfs.Dataset{}, err
	}
	return s.finishPull(ctx, plan, incoming, dataset, size)
}

// removeIncoming removes the hidden dataset whatever state it is in: a
// receive's partial state first (ZFS keeps it apart for an incremental),
// then the dataset with every round it received.
func (s *Server) removeIncoming(ctx context.Context, incoming string) {
	ctx = context.WithoutCancel(ctx)
	_ = s.zfs.AbortReceive(ctx, incoming) // none to abort is no error here
	s.destroyQuietly(ctx, incoming, zfs.DestroyOptions{Recursive: true})
}

// endRoundsQuietly asks a volume source's node to drop the rounds of a
// pull that will not finish; a failure is logged (the source's operator
// sees the round snapshots by their mark).
func (s *Server) endRoundsQuietly(ctx context.Context, plan volumePlan, dataset string) {
	if plan.fromSnap {
		return
	}
	ctx = context.WithoutCancel(ctx)
	sourceNode, _, err := rules.ParseVolumeID(plan.sourceID)
	if err != nil {
		return
	}
	conn, err := s.sourceConn(ctx, sourceNode)
	if err == nil {
		_, err = callPulls(ctx, conn, pullsEnd, map[string]string{fieldSource: plan.sourceID, fieldPuller: dataset})
	}
	if err != nil {
		s.log.Warn().Err(err).Str("source", plan.sourceID).Msg("cannot drop the pull's rounds on the source's node")
	}
}
