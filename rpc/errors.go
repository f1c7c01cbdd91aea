package rpc

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// zfsCodes maps every typed error of the zfs package (and the context's,
// and a busy in-flight key's) to its gRPC code. It is the only such table:
// a handler that wants its own words wraps the error with %w and still gets
// its code here.
// errors_test.go fails when package zfs exports an error without a row.
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
	// A bug of ours, never the caller's input.
	{zfs.ErrProgram, codes.Internal},
	{zfs.ErrStream, codes.Internal},
	// A sending daemon refused a stream its caller asked for (a resume
	// token of another snapshot, a send that would not be raw).
	{zfs.ErrRefusedStream, codes.PermissionDenied},
	// The secrets the caller gave do not open the volume: its argument is wrong.
	{zfs.ErrKeyRejected, codes.InvalidArgument},
	// The key's state on the host is not what the call needs (the encryption
	// root moved, a key is or is not loaded); a retry may find it settled.
	{zfs.ErrKeyLoaded, codes.FailedPrecondition},
	{zfs.ErrNotEncryptionRoot, codes.FailedPrecondition},
	{zfs.ErrKeyUnavailable, codes.FailedPrecondition},
	// This host's ZFS is too old for what was asked; a newer one serves it.
	{zfs.ErrUnsupported, codes.FailedPrecondition},
	// Another call holds a key this one needs: the CO retries.
	{rules.ErrInFlight, codes.Aborted},
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
	code, _ := codeOf(err)
	return status.Error(code, err.Error())
}

// codeOf is the code of the first row err matches, or INTERNAL and false.
func codeOf(err error) (codes.Code, bool) {
	for _, mapping := range zfsCodes {
		if errors.Is(err, mapping.err) {
			return mapping.code, true
		}
	}
	return codes.Internal, false
}
