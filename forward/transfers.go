package forward

import (
	"context"
	"io"
)

// Transfers pulls snapshots from other nodes' daemons over the peer channel
// (package peer; decision 14). The controller gets it injected, so that it
// imports no transport.
type Transfers interface {
	// Open starts the stream of another node's snapshot. Errors that the
	// serving daemon answers (NOT_FOUND, RESOURCE_EXHAUSTED, …) come back
	// before any byte, as gRPC statuses; the reader's errors after that are
	// a stream broken off (resume from the receiver's token). Close ends
	// the stream.
	Open(ctx context.Context, req TransferRequest) (io.ReadCloser, error)
	// Peers reaches the other nodes' services: a volume source's node
	// takes the snapshots a pull of it sends, and deletes what a move
	// leaves there.
	Peers
}

// TransferRequest names what to send. The node is SnapshotID's.
type TransferRequest struct {
	// SnapshotID is the snapshot to send ("node:dataset@snapshot"); with
	// ResumeToken, the snapshot the token must resume (the sender checks).
	SnapshotID string
	// FromSnapshotID, when set, asks for the changes since this earlier
	// snapshot of the same volume only.
	FromSnapshotID string
	// ResumeToken is the receiver's receive_resume_token of a receive cut
	// short.
	ResumeToken string
}
