package forward

import (
	"context"
	"errors"
	"io"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
)

// The SnapshotMetadata calls name snapshots too, and stream their answers:
// they are forwarded as Forward does unary calls, the peer's messages
// passed on as they come. Their request is the stream's first (and only)
// message, read here to find its node and handed on to the handler that
// answers here.

// streamRoute is how one streaming method is forwarded.
type streamRoute struct {
	request func() proto.Message
	owner   func(cfg rules.Config, req proto.Message) string
	// call opens the stream at a peer and passes every message it sends to
	// send.
	call func(ctx context.Context, conn grpc.ClientConnInterface, req proto.Message, send func(any) error, options ...grpc.CallOption) error
}

// relay passes each message of a peer's stream to send until it ends.
func relay[Resp any](recv func() (*Resp, error), send func(any) error) error {
	for {
		message, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := send(message); err != nil {
			return err
		}
	}
}

var streamRoutes = map[string]streamRoute{
	csi.SnapshotMetadata_GetMetadataAllocated_FullMethodName: {
		request: func() proto.Message { return &csi.GetMetadataAllocatedRequest{} },
		owner: func(_ rules.Config, req proto.Message) string {
			return snapshotNode(req.(*csi.GetMetadataAllocatedRequest).GetSnapshotId())
		},
		call: func(ctx context.Context, conn grpc.ClientConnInterface, req proto.Message, send func(any) error, options ...grpc.CallOption) error {
			stream, err := csi.NewSnapshotMetadataClient(conn).GetMetadataAllocated(ctx, req.(*csi.GetMetadataAllocatedRequest), options...)
			if err != nil {
				return err
			}
			return relay(stream.Recv, send)
		},
	},
	// The base must be on the target's node; one that is not is the
	// handler's refusal there.
	csi.SnapshotMetadata_GetMetadataDelta_FullMethodName: {
		request: func() proto.Message { return &csi.GetMetadataDeltaRequest{} },
		owner: func(_ rules.Config, req proto.Message) string {
			return snapshotNode(req.(*csi.GetMetadataDeltaRequest).GetTargetSnapshotId())
		},
		call: func(ctx context.Context, conn grpc.ClientConnInterface, req proto.Message, send func(any) error, options ...grpc.CallOption) error {
			stream, err := csi.NewSnapshotMetadataClient(conn).GetMetadataDelta(ctx, req.(*csi.GetMetadataDeltaRequest), options...)
			if err != nil {
				return err
			}
			return relay(stream.Recv, send)
		},
	},
}

// ForwardStreams is Forward for the streaming calls (Services.ForwardStreams).
func ForwardStreams(cfg rules.Config, peers Peers) grpc.StreamServerInterceptor {
	return func(srv any, stream grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		route, named := streamRoutes[info.FullMethod]
		if !named {
			return handler(srv, stream)
		}
		req := route.request()
		if err := stream.RecvMsg(req); err != nil {
			return err
		}
		nodeID := route.owner(cfg, req)
		if nodeID == "" || nodeID == cfg.NodeID {
			return handler(srv, &replayStream{ServerStream: stream, first: req})
		}
		ctx := stream.Context()
		conn, err := peers.Conn(ctx, nodeID)
		if err != nil {
			return unreachable(nodeID, err)
		}
		var trailer metadata.MD
		err = route.call(ctx, conn, req, stream.SendMsg, grpc.Trailer(&trailer))
		return peerAnswer(nodeID, err, trailer)
	}
}

// peerAnswer is the error a forwarded call ends with: nil, the peer's own
// error with its code, or UNAVAILABLE when the peer's services never
// answered (no answeredByKey trailer).
func peerAnswer(nodeID string, err error, trailer metadata.MD) error {
	switch {
	case err == nil:
		return nil
	case len(trailer.Get(answeredByKey)) == 0:
		return unreachable(nodeID, err)
	}
	answer := status.Convert(err)
	return status.Errorf(answer.Code(), "node %q answered: %s", nodeID, answer.Message())
}

// replayStream hands the handler the request ForwardStreams read already.
type replayStream struct {
	grpc.ServerStream
	first proto.Message
}

func (r *replayStream) RecvMsg(m any) error {
	if r.first == nil {
		return r.ServerStream.RecvMsg(m)
	}
	message, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "%T is not a protocol buffer message", m)
	}
	proto.Merge(message, r.first)
	r.first = nil
	return nil
}

// withStreamCheck is desc with each stream's handler answering only
// requests that name this node, its answers marked as this node's and its
// errors mapped (the peer side of ForwardStreams).
func withStreamCheck(desc *grpc.ServiceDesc, cfg rules.Config) *grpc.ServiceDesc {
	wrapped := *desc
	wrapped.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, streamDesc := range desc.Streams {
		handler, method := streamDesc.Handler, "/"+desc.ServiceName+"/"+streamDesc.StreamName
		streamDesc.Handler = func(srv any, stream grpc.ServerStream) error {
			stream.SetTrailer(metadata.Pairs(answeredByKey, cfg.NodeID))
			route, named := streamRoutes[method]
			if !named {
				return status.Errorf(codes.PermissionDenied, "%s is not a call forwarded between nodes", method)
			}
			req := route.request()
			if err := stream.RecvMsg(req); err != nil {
				return err
			}
			if route.owner(cfg, req) != cfg.NodeID {
				return status.Errorf(codes.PermissionDenied, "%s is not a call for node %q: peers forward only calls that name this node",
					method, cfg.NodeID)
			}
			return rpc.Answer(handler(srv, &replayStream{ServerStream: stream, first: req}))
		}
		wrapped.Streams[i] = streamDesc
	}
	return &wrapped
}
