package controller

import (
	"context"

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
	},
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
