package rpc

import (
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/rules"
)

// MaxMessageBytes bounds a whole error message as the server answers and
// logs it: the backstop for a caller's string that was not cut where the
// message was written. A panic's message and stack fit.
const MaxMessageBytes = 16 << 10

// Answer is err as a server answers it: its gRPC code (Status), its message
// cut to MaxMessageBytes. Every service's errors go through it, here and
// where peers call.
func Answer(err error) error { return boundStatus(Status(err)) }

// boundStatus cuts the message of a status error longer than
// MaxMessageBytes, keeping its code and details.
func boundStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || len(st.Message()) <= MaxMessageBytes {
		return err
	}
	proto := st.Proto()
	proto.Message = rules.BoundedTo(proto.Message, MaxMessageBytes)
	return status.FromProto(proto).Err()
}
