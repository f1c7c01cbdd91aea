package controller

import (
	"context"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
)

// OperatorServiceDesc describes the operator's service (rpc.OperatorService)
// over the controller: acts that only the host's operator may start, never
// a CO caller (decision 15). Its socket is a file of the host's root alone,
// which no orchestrator's socket directory holds and the Nomad bridge never
// serves.
var OperatorServiceDesc = grpc.ServiceDesc{
	ServiceName: rpc.OperatorService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: rpc.OperatorMoveRound, Handler: moveHandler(false)},
		{MethodName: rpc.OperatorMoveFinal, Handler: moveHandler(true)},
		{MethodName: rpc.OperatorAdopt, Handler: volumeAnswer(rpc.OperatorAdopt, (*Server).adoptFields)},
		{MethodName: rpc.OperatorRelease, Handler: volumeAnswer(rpc.OperatorRelease, (*Server).releaseFields)},
	},
}

// volumeAnswer is a method of the operator's whose answer is a volume.
func volumeAnswer(method string, call func(*Server, context.Context, pullsFields) (*csi.Volume, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return fieldsHandler("/"+rpc.OperatorService+"/"+method, func(s *Server, ctx context.Context, fields pullsFields) (any, error) {
		return call(s, ctx, fields)
	})
}

// adoptFields is Adopt from the operator's request.
func (s *Server) adoptFields(ctx context.Context, fields pullsFields) (*csi.Volume, error) {
	for name := range fields {
		switch name {
		case rpc.AdoptDataset, rpc.AdoptName, rpc.AdoptMode, rpc.AdoptRename, rpc.AdoptParent,
			rpc.AdoptFSType, rpc.AdoptSize, rpc.AdoptKeyFromSecrets:
		default:
			return nil, invalid("unknown field %q", rules.Bounded(name))
		}
	}
	req := AdoptRequest{Dataset: fields[rpc.AdoptDataset], Name: fields[rpc.AdoptName], Rename: fields.flag(rpc.AdoptRename),
		Parent: fields[rpc.AdoptParent], FSType: fields[rpc.AdoptFSType], KeyFromSecrets: fields.flag(rpc.AdoptKeyFromSecrets)}
	switch fields[rpc.AdoptMode] {
	case "retain":
		req.Retain = true
	case "own":
	default:
		return nil, invalid("mode %q: choose retain (served, never destroyed) or own (a volume like any other)", rules.Bounded(fields[rpc.AdoptMode]))
	}
	if size := fields[rpc.AdoptSize]; size != "" {
		var err error
		if req.Size, err = strconv.ParseUint(size, 10, 64); err != nil {
			return nil, invalid("size %q is not a number of bytes", rules.Bounded(size))
		}
	}
	if req.Dataset == "" || strings.ContainsAny(req.Dataset, "@#") {
		return nil, invalid("dataset %q: name a filesystem or a zvol", rules.Bounded(req.Dataset))
	}
	return s.Adopt(ctx, req)
}

// releaseFields is Release from the operator's request.
func (s *Server) releaseFields(ctx context.Context, fields pullsFields) (*csi.Volume, error) {
	if len(fields) != 1 || fields[rpc.ReleaseVolumeID] == "" {
		return nil, invalid("release takes one field, %s", rpc.ReleaseVolumeID)
	}
	return s.Release(ctx, fields[rpc.ReleaseVolumeID])
}

func moveHandler(final bool) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	method := rpc.OperatorMoveRound
	if final {
		method = rpc.OperatorMoveFinal
	}
	return func(srv any, ctx context.Context, decode func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(csi.CreateVolumeRequest)
		if err := decode(in); err != nil {
			return nil, err
		}
		call := func(ctx context.Context, req any) (any, error) {
			return srv.(*Server).MoveVolume(ctx, req.(*csi.CreateVolumeRequest), final)
		}
		if interceptor == nil {
			return call(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + rpc.OperatorService + "/" + method}, call)
	}
}
