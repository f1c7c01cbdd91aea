package controller

import (
	"context"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/zfs-csi/zfs-csi/driver"
)

// OperatorServiceDesc describes the operator's service (driver.OperatorService)
// over the controller: acts that only the host's operator may start, never
// a CO caller (decision 15). Its socket is a file of the host's root alone,
// which no orchestrator's socket directory holds and the Nomad bridge never
// serves.
var OperatorServiceDesc = grpc.ServiceDesc{
	ServiceName: driver.OperatorService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: driver.OperatorMoveRound, Handler: moveHandler(false)},
		{MethodName: driver.OperatorMoveFinal, Handler: moveHandler(true)},
		{MethodName: driver.OperatorAdopt, Handler: volumeAnswer(driver.OperatorAdopt, (*Server).adoptFields)},
		{MethodName: driver.OperatorRelease, Handler: volumeAnswer(driver.OperatorRelease, (*Server).releaseFields)},
	},
}

// volumeAnswer is a method of the operator's whose answer is a volume.
func volumeAnswer(method string, call func(*Server, context.Context, pullsFields) (*csi.Volume, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return fieldsHandler("/"+driver.OperatorService+"/"+method, func(s *Server, ctx context.Context, fields pullsFields) (any, error) {
		return call(s, ctx, fields)
	})
}

// adoptFields is Adopt from the operator's request.
func (s *Server) adoptFields(ctx context.Context, fields pullsFields) (*csi.Volume, error) {
	for name := range fields {
		switch name {
		case driver.AdoptDataset, driver.AdoptName, driver.AdoptMode, driver.AdoptRename, driver.AdoptParent,
			driver.AdoptFSType, driver.AdoptSize, driver.AdoptKeyFromSecrets:
		default:
			return nil, invalid("unknown field %q", driver.Bounded(name))
		}
	}
	req := AdoptRequest{Dataset: fields[driver.AdoptDataset], Name: fields[driver.AdoptName], Rename: fields.flag(driver.AdoptRename),
		Parent: fields[driver.AdoptParent], FSType: fields[driver.AdoptFSType], KeyFromSecrets: fields.flag(driver.AdoptKeyFromSecrets)}
	switch fields[driver.AdoptMode] {
	case "retain":
		req.Retain = true
	case "own":
	default:
		return nil, invalid("mode %q: choose retain (served, never destroyed) or own (a volume like any other)", driver.Bounded(fields[driver.AdoptMode]))
	}
	if size := fields[driver.AdoptSize]; size != "" {
		var err error
		if req.Size, err = strconv.ParseUint(size, 10, 64); err != nil {
			return nil, invalid("size %q is not a number of bytes", driver.Bounded(size))
		}
	}
	if req.Dataset == "" || strings.ContainsAny(req.Dataset, "@#") {
		return nil, invalid("dataset %q: name a filesystem or a zvol", driver.Bounded(req.Dataset))
	}
	return s.Adopt(ctx, req)
}

// releaseFields is Release from the operator's request.
func (s *Server) releaseFields(ctx context.Context, fields pullsFields) (*csi.Volume, error) {
	if len(fields) != 1 || fields[driver.ReleaseVolumeID] == "" {
		return nil, invalid("release takes one field, %s", driver.ReleaseVolumeID)
	}
	return s.Release(ctx, fields[driver.ReleaseVolumeID])
}

func moveHandler(final bool) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	method := driver.OperatorMoveRound
	if final {
		method = driver.OperatorMoveFinal
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
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + driver.OperatorService + "/" + method}, call)
	}
}
