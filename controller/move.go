package controller

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/driver"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// A volume made from another node's volume is pulled in rounds (issue 38
// item 3): each round, the source's node takes a CSI snapshot of it (a
// forwarded CreateSnapshot, named for this node, the volume and the round)
// and this node receives it, the first whole, the later ones as
// incrementals from the round before, into the same hidden dataset. A clone
// of another node's volume is one round. A move (sourceMode=move) is a
// round per call, while the workload still runs, each answered ABORTED with
// what it brought; its last (sourceMode=move-final, once the workload has
// stopped) makes the volume, and the source volume and its round snapshots
// are deleted on their node.
const (
	moveSync  = "move"
	moveFinal = "move-final"
)

// roundName is the CSI name of a round's snapshot on the source's node.
func (s *Server) roundName(dataset string, round int) string {
	return "zfs-csi-pull-" + s.cfg.NodeID + "-" + dataset[strings.LastIndexByte(dataset, '/')+1:] + "-" + strconv.Itoa(round)
}

// pullRounds runs the next round (or finishes what the last one left).
func (s *Server) pullRounds(ctx context.Context, plan volumePlan, incoming, dataset string, size uint64,
	properties map[string]string, received *atomic.Uint64) (zfs.Dataset, error) {
	sourceNode, sourceDataset, err := driver.ParseVolumeID(plan.sourceID)
	if err != nil {
		return zfs.Dataset{}, err
	}
	conn, err := s.transfers.Conn(ctx, sourceNode)
	if err != nil {
		return zfs.Dataset{}, err
	}
	source := csi.NewControllerClient(conn)
	rounds, pulled, err := s.receivedRounds(ctx, incoming)
	if err != nil {
		return zfs.Dataset{}, err
	}
	if !pulled {
		snapshot, err := source.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: s.roundName(dataset, len(rounds)+1), SourceVolumeId: plan.sourceID})
		if err != nil {
			return zfs.Dataset{}, err
		}
		req := driver.TransferRequest{SnapshotID: snapshot.GetSnapshot().GetSnapshotId()}
		if len(rounds) > 0 {
			req.FromSnapshotID = driver.SnapshotID(sourceNode, sourceDataset+"@"+rounds[len(rounds)-1])
		}
		before := received.Load()
		if err := s.receive(ctx, plan, req, incoming, properties, received); err != nil {
			return zfs.Dataset{}, err
		}
		_, component, _ := strings.Cut(req.SnapshotID, "@")
		rounds = append(rounds, component)
		if plan.params.move == moveSync {
			return zfs.Dataset{}, status.Errorf(codes.Aborted, "moving %s here: round %d received (%s); call again for another round, and with %s=%s once the workload has stopped: that round makes the volume",
				driver.Bounded(plan.sourceID), len(rounds), zfs.FormatSize(received.Load()-before), ParamSourceMode, moveFinal)
		}
		if err := s.zfs.Set(ctx, incoming, map[string]string{s.props.Pulled: "true"}); err != nil {
			return zfs.Dataset{}, err
		}
	}
	// What the pull left on the source's node goes: its round snapshots,
	// and for a move the volume itself (deleted as DeleteVolume deletes:
	// marked and reaped when clones of it remain).
	for _, round := range rounds {
		_, err := source.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: driver.SnapshotID(sourceNode, sourceDataset+"@"+round)})
		if err != nil && status.Code(err) != codes.NotFound {
			return zfs.Dataset{}, err
		}
	}
	if plan.params.move == moveFinal {
		if _, err := source.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: plan.sourceID}); err != nil && status.Code(err) != codes.NotFound {
			return zfs.Dataset{}, err
		}
	}
	return s.finishPull(ctx, plan, incoming, dataset, size)
}

// receivedRounds are the snapshot components the hidden dataset received,
// oldest first, and whether its last round is in (Pulled).
func (s *Server) receivedRounds(ctx context.Context, incoming string) (rounds []string, pulled bool, err error) {
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{incoming}, Depth: 1,
		Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot}, UserProps: []string{s.props.Pulled}, SkipMissing: true})
	if err != nil {
		return nil, false, err
	}
	for _, row := range rows {
		if row.Type == zfs.Snapshot {
			_, component, _ := strings.Cut(row.Name, "@")
			rounds = append(rounds, component)
		} else {
			pulled = row.User[s.props.Pulled] == "true"
		}
	}
	return rounds, pulled, nil
}

// hasSnapshot says whether incoming holds the snapshot whose ID names it
// (an incremental round received whole).
func (s *Server) hasSnapshot(ctx context.Context, incoming, snapshotID string) bool {
	_, component, _ := strings.Cut(snapshotID, "@")
	_, err := zfs.Get(ctx, s.zfs, incoming+"@"+component, nil)
	return err == nil
}
