package controller

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// A volume made from another node's volume is pulled in rounds: each round,
// the source's node snapshots the volume under a name no earlier try can
// have taken (pulls.go, TakeRound) and this node receives it, the first
// whole, the later ones as incrementals from the round before, into the
// same hidden dataset. A clone of another node's volume is one round. A
// move, which only the operator starts (MoveVolume), is a round per call
// while the workload still runs, each answered ABORTED with what it
// brought; its final round, once the workload has stopped, makes the
// volume. The source is deleted on its node only after this node proved
// it holds the final round (its GUID) and the source's node found nothing
// written since and its own operator allows moves (EndPull).
const (
	moveSync  = "move"
	moveFinal = "move-final"
)

// pullRounds runs the next round (or finishes what the last one left).
func (s *Server) pullRounds(ctx context.Context, plan volumePlan, incoming, dataset string, size uint64,
	properties map[string]string, received *atomic.Uint64) (zfs.Dataset, error) {
	sourceNode, sourceDataset, err := rules.ParseVolumeID(plan.sourceID)
	if err != nil {
		return zfs.Dataset{}, err
	}
	conn, err := s.sourceConn(ctx, sourceNode)
	if err != nil {
		return zfs.Dataset{}, err
	}
	rounds, pulledGUID, err := s.receivedRounds(ctx, incoming)
	if err != nil {
		return zfs.Dataset{}, err
	}
	if pulledGUID == "" {
		taken, err := callPulls(ctx, conn, pullsTakeRound, map[string]string{fieldSource: plan.sourceID, fieldPuller: dataset,
			fieldFinal: strconv.FormatBool(plan.move == moveFinal)})
		if err != nil {
			return zfs.Dataset{}, err
		}
		req := forward.TransferRequest{SnapshotID: taken[fieldSnapshot]}
		if len(rounds) > 0 {
			req.FromSnapshotID = rules.SnapshotID(sourceNode, sourceDataset+"@"+rounds[len(rounds)-1])
		}
		before := received.Load()
		if err := s.receive(ctx, plan, req, incoming, properties, received); err != nil {
			return zfs.Dataset{}, err
		}
		if plan.move == moveSync {
			return zfs.Dataset{}, status.Errorf(codes.Aborted, "moving %s here: round %d received (%s); run the move again for another round, and with --final once the workload has stopped: that round makes the volume",
				rules.Bounded(plan.sourceID), len(rounds)+1, zfs.FormatSize(received.Load()-before))
		}
		if pulledGUID, err = s.checkRound(ctx, incoming, req.SnapshotID, taken[fieldGUID]); err != nil {
			return zfs.Dataset{}, err
		}
		if err := s.zfs.Set(ctx, incoming, map[string]string{s.props.Pulled: pulledGUID}); err != nil {
			return zfs.Dataset{}, err
		}
	}
	// What the pull left on the source's node goes: its rounds, and for a
	// move the volume itself (deleted as DeleteVolume deletes: marked and
	// reaped when clones of it remain).
	_, err = callPulls(ctx, conn, pullsEnd, map[string]string{fieldSource: plan.sourceID, fieldPuller: dataset,
		fieldMove: strconv.FormatBool(plan.move == moveFinal), fieldGUID: pulledGUID})
	if status.Code(err) == codes.FailedPrecondition && plan.move == moveFinal {
		// The source changed after the final round (or is still in use):
		// the next final round takes another.
		if unset := s.zfs.Set(ctx, incoming, map[string]string{s.props.Pulled: "-"}); unset != nil {
			s.log.Warn().Err(unset).Str("dataset", incoming).Msg("cannot clear the pulled mark")
		}
	}
	if err != nil {
		return zfs.Dataset{}, err
	}
	return s.finishPull(ctx, plan, incoming, dataset, size)
}

// checkRound proves that incoming holds the round the source's node took:
// a receive keeps a snapshot's GUID.
func (s *Server) checkRound(ctx context.Context, incoming, snapshotID, guid string) (string, error) {
	_, component, _ := strings.Cut(snapshotID, "@")
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{incoming + "@" + component}, Types: []zfs.Type{zfs.Snapshot}, Provenance: true})
	if err != nil {
		return "", err
	}
	if got := strconv.FormatUint(rows[0].GUID, 10); got != guid {
		return "", status.Errorf(codes.Internal, "the round received as %s has GUID %s, the source's node took GUID %s", incoming, got, rules.Bounded(guid))
	}
	return guid, nil
}
