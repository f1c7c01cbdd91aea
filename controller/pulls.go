package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// The source side of a pull: what a node that pulls one of this node's
// volumes or snapshots may ask of it, over the peer channel only (the
// service is never registered on a CO's socket). This node decides by its
// own rules: it describes a source through the same lookup a local
// CreateVolume makes, takes each round's snapshot under a name no earlier
// try can have taken, and deletes a moved volume only when its own
// operator allows moves and the puller proves it holds every write.

// PullsService is the peer-only service's name.
const PullsService = "zfscsi.peer.v1.Pulls"

const (
	pullsDescribe  = "Describe"
	pullsTakeRound = "TakeRound"
	pullsEnd       = "EndPull"
)

// Field names of the Pulls messages.
const (
	fieldSource   = "source_id" // a volume or snapshot ID of the answering node
	fieldSnapshot = "snapshot"  // "true": source_id is a snapshot
	fieldPuller   = "puller"    // the dataset the pull makes, on the caller's node
	fieldFinal    = "final"     // "true": the round of a move after its workload stopped
	fieldMove     = "move"      // "true": EndPull deletes the moved volume
	fieldGUID     = "guid"      // a round snapshot's GUID (decimal)
	fieldZvol     = "zvol"
	fieldFSType   = "fs_type"
	fieldSize     = "size"
	fieldBlock    = "block_size"
	fieldCrypt    = "encrypted"
)

// PullsServiceDesc is registered on the peer server (forward.RegisterPeerOnly).
var PullsServiceDesc = grpc.ServiceDesc{
	ServiceName: PullsService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: pullsDescribe, Handler: pullsHandler(pullsDescribe, (*Server).describeSource)},
		{MethodName: pullsTakeRound, Handler: pullsHandler(pullsTakeRound, (*Server).takeRound)},
		{MethodName: pullsEnd, Handler: pullsHandler(pullsEnd, (*Server).endPull)},
	},
}

type pullsMethod func(*Server, context.Context, pullsFields) (map[string]string, error)

// pullsFields is a request's string fields.
type pullsFields map[string]string

func (f pullsFields) flag(name string) bool { return f[name] == "true" }

func pullsHandler(name string, method pullsMethod) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return fieldsHandler("/"+PullsService+"/"+name, func(s *Server, ctx context.Context, fields pullsFields) (any, error) {
		answer, err := method(s, ctx, fields)
		if err != nil {
			return nil, err
		}
		return stringStruct(answer)
	})
}

// fieldsHandler serves a method whose request is a google.protobuf.Struct
// of string fields (the Pulls service's, and the operator's adopt and
// release) behind the server's interceptors.
func fieldsHandler(fullMethod string, call func(*Server, context.Context, pullsFields) (any, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, decode func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(structpb.Struct)
		if err := decode(in); err != nil {
			return nil, err
		}
		handle := func(ctx context.Context, req any) (any, error) {
			fields, err := stringFields(req.(*structpb.Struct))
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "%v", err)
			}
			return call(srv.(*Server), ctx, fields)
		}
		if interceptor == nil {
			return handle(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, handle)
	}
}

func stringFields(request *structpb.Struct) (pullsFields, error) {
	fields := pullsFields{}
	for name, value := range request.GetFields() {
		text, ok := value.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, fmt.Errorf("field %q is not a string", rules.Bounded(name))
		}
		fields[name] = text.StringValue
	}
	return fields, nil
}

func stringStruct(fields map[string]string) (*structpb.Struct, error) {
	values := make(map[string]any, len(fields))
	for name, value := range fields {
		values[name] = value
	}
	return structpb.NewStruct(values)
}

// callPulls asks node's daemon one Pulls method.
func callPulls(ctx context.Context, conn grpc.ClientConnInterface, method string, fields map[string]string) (pullsFields, error) {
	request, err := stringStruct(fields)
	if err != nil {
		return nil, err
	}
	response := new(structpb.Struct)
	if err := conn.Invoke(ctx, "/"+PullsService+"/"+method, request, response); err != nil {
		return nil, err
	}
	return stringFields(response)
}

// describeSource is a source of this node as the puller's plan needs it:
// found through the same lookup, and the same ownership rules, as a local
// CreateVolume's source.
func (s *Server) describeSource(ctx context.Context, fields pullsFields) (map[string]string, error) {
	src, err := s.lookupSource(ctx, fields[fieldSource], fields.flag(fieldSnapshot), true)
	if err != nil {
		return nil, err
	}
	return map[string]string{fieldZvol: strconv.FormatBool(src.zvol), fieldFSType: src.fsType,
		fieldSize: strconv.FormatUint(src.size, 10), fieldBlock: strconv.FormatUint(src.blockSize, 10),
		fieldCrypt: strconv.FormatBool(src.encrypted)}, nil
}

// remoteSource is describeSource's answer read back on the puller's node.
func remoteSource(fields pullsFields) (*source, error) {
	size, err := strconv.ParseUint(fields[fieldSize], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("the source's node sent size %q", rules.Bounded(fields[fieldSize]))
	}
	block, err := strconv.ParseUint(fields[fieldBlock], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("the source's node sent block size %q", rules.Bounded(fields[fieldBlock]))
	}
	return &source{zvol: fields.flag(fieldZvol), fsType: fields[fieldFSType], size: size, blockSize: block,
		encrypted: fields.flag(fieldCrypt)}, nil
}

// pullerOf is the value of the PullFor mark for the calling node's pull
// into puller.
func pullerOf(ctx context.Context, puller string) (string, error) {
	caller, ok := forward.PeerCaller(ctx)
	if !ok || puller == "" || strings.ContainsAny(puller, "\t\n") {
		return "", status.Errorf(codes.InvalidArgument, "a round needs a calling node and the dataset it pulls into")
	}
	return caller + ":" + puller, nil
}

// takeRound snapshots a volume of this node for one round of a pull. The
// name carries 64 random bits: no earlier try, a daemon restarted mid-round
// or an abandoned pull, can have taken it, so the round's data is this
// call's. A final round (a move's, after its workload stopped) is refused
// while this host still shows the volume mounted.
func (s *Server) takeRound(ctx context.Context, fields pullsFields) (map[string]string, error) {
	puller, err := pullerOf(ctx, fields[fieldPuller])
	if err != nil {
		return nil, err
	}
	row, err := s.getVolume(ctx, fields[fieldSource])
	if err != nil {
		return nil, err
	}
	if fields.flag(fieldFinal) {
		if err := s.checkStopped(row.Name); err != nil {
			return nil, err
		}
	}
	release, err := s.inflight.Acquire(datasetLock(row.Name))
	if err != nil {
		return nil, err
	}
	defer release()
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	snapshot := row.Name + "@" + rules.InternalSnapshotPrefix + "pull-" + hex.EncodeToString(nonce)
	if err := s.zfs.Snapshot(ctx, snapshot, map[string]string{s.props.Internal: "true", s.props.PullFor: puller}); err != nil {
		return nil, err
	}
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{snapshot}, Types: []zfs.Type{zfs.Snapshot}, Provenance: true})
	if err != nil {
		return nil, err
	}
	return map[string]string{fieldSnapshot: rules.SnapshotID(s.cfg.NodeID, snapshot), fieldGUID: strconv.FormatUint(rows[0].GUID, 10)}, nil
}

// checkStopped refuses a move's final round while the volume is in use on
// this host: its snapshot would miss the writes still to come.
func (s *Server) checkStopped(dataset string) error {
	if s.inUse == nil {
		return nil
	}
	used, err := s.inUse(dataset)
	if err != nil {
		return err
	}
	if used {
		return status.Errorf(codes.FailedPrecondition, "volume %s is still mounted on node %s: stop its workload before the final round", dataset, s.cfg.NodeID)
	}
	return nil
}

// UseHost tells the controller how to learn whether this host uses a
// volume (the node's mount table and open devices) and what a zvol holds
// (blkid): what a move's final round, adoption and release ask. Call
// before serving.
func (s *Server) UseHost(inUse func(dataset string, except ...string) (bool, error), contentOf func(ctx context.Context, dataset string) (string, error)) {
	s.inUse, s.contentOf = inUse, contentOf
}

// endPull ends a pull of one of this node's volumes: its rounds go, and for
// a move the volume itself, once the puller proved it received the last
// round (the GUID of the volume's newest snapshot) and nothing was written
// since (ZFS's written). A move is deleted only when this node's operator
// allows moves: a peer alone cannot.
func (s *Server) endPull(ctx context.Context, fields pullsFields) (map[string]string, error) {
	puller, err := pullerOf(ctx, fields[fieldPuller])
	if err != nil {
		return nil, err
	}
	dataset, err := s.volumeDataset(fields[fieldSource])
	if err != nil {
		return nil, volumeNotFound(fields[fieldSource], err)
	}
	rows, err := s.zfs.List(ctx, zfs.ListOptions{Roots: []string{dataset}, Depth: 1, Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot},
		UserProps: s.props.All(), Provenance: true, SkipMissing: true})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || !s.owner.Marked(rows[0]) {
		return map[string]string{}, nil // gone already: a retry after the deletion
	}
	// A volume marked deleted is a retry's after the deletion, which its
	// CSI snapshots held back: its rounds still go.
	if fields.flag(fieldMove) && s.owner.LiveVolume(rows[0]) {
		if err := s.deleteMoved(ctx, rows, fields[fieldGUID]); err != nil {
			return nil, err
		}
		// Gone, or marked deleted and read-only (CSI snapshots of it
		// remain): either way its rounds are of no more use.
	}
	for _, row := range rows[1:] {
		if row.User[s.props.PullFor] == puller && s.owner.InternalSnapshot(row) {
			s.destroyQuietly(ctx, row.Name, zfs.DestroyOptions{Defer: true})
		}
	}
	return map[string]string{}, nil
}

// deleteMoved deletes a moved volume (rows: the volume, then its snapshots)
// as DeleteVolume does, once its newest snapshot is the one
// the puller received and nothing was written since.
func (s *Server) deleteMoved(ctx context.Context, rows []zfs.Dataset, guid string) error {
	volume := rows[0]
	if !s.cfg.AllowMoves {
		return status.Errorf(codes.FailedPrecondition, "node %s does not allow moves: its operator has not enabled them (--allow-moves)", s.cfg.NodeID)
	}
	newest := volume
	for _, row := range rows[1:] {
		if row.CreateTxg >= newest.CreateTxg {
			newest = row
		}
	}
	switch {
	case newest.Type != zfs.Snapshot || strconv.FormatUint(newest.GUID, 10) != guid:
		return status.Errorf(codes.FailedPrecondition, "volume %s: its newest snapshot is not the final round received (GUID %s): run the final round again", volume.Name, rules.Bounded(guid))
	case volume.Written > 0:
		return status.Errorf(codes.FailedPrecondition, "volume %s: %d bytes were written after the final round: stop its workload and run the final round again", volume.Name, volume.Written)
	}
	if err := s.checkStopped(volume.Name); err != nil {
		return err
	}
	_, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: rules.VolumeID(s.cfg.NodeID, volume.Name)})
	return err
}
