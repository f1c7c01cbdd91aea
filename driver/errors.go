package driver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// zfsCodes maps the typed errors of the zfs package to gRPC codes.
var zfsCodes = []struct {
	err  error
	code codes.Code
}{
	{zfs.ErrNotFound, codes.NotFound},
	{zfs.ErrExists, codes.AlreadyExists},
	{zfs.ErrBusy, codes.FailedPrecondition},
	{zfs.ErrHasDependents, codes.FailedPrecondition},
	{zfs.ErrNoSpace, codes.ResourceExhausted},
	{zfs.ErrInvalid, codes.InvalidArgument},
	{zfs.ErrPoolSuspended, codes.Unavailable},
	{zfs.ErrPoolNotFound, codes.Unavailable},
	{zfs.ErrPermission, codes.PermissionDenied},
	// The CO's request is fine; the host is not in a state to serve it.
	{zfs.ErrParentMissing, codes.FailedPrecondition},
	{zfs.ErrHeld, codes.FailedPrecondition},
	{zfs.ErrReadOnlyPool, codes.FailedPrecondition},
	{zfs.ErrCrossPool, codes.InvalidArgument},
	{zfs.ErrIO, codes.Unavailable},
	{zfs.ErrProgram, codes.Internal},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// Status is the one place a handler's error becomes a gRPC status: status
// errors pass through, typed zfs and context errors get their code, anything
// else is INTERNAL. The message keeps the original error's text.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, mapping := range zfsCodes {
		if errors.Is(err, mapping.err) {
			return status.Error(mapping.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
