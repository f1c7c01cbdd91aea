package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/rpc"
	"github.com/zfs-csi/zfs-csi/rules"
	"github.com/zfs-csi/zfs-csi/zfs"
)

// The transfer service: one server-streaming method, Send, whose request
// names a snapshot of the serving node (a google.protobuf.Struct of string
// fields, see sendFields) and whose answer is the snapshot's `zfs send`
// stream in google.protobuf.BytesValue chunks. Well-known types, so that no
// generated code is needed for one method.
const (
	transferService = "zfscsi.peer.v1.Transfer"
	sendMethod      = "/" + transferService + "/Send"
)

// The fields of a Send request.
const (
	fieldSnapshot     = "snapshot_id"
	fieldFromSnapshot = "from_snapshot_id"
	fieldResumeToken  = "resume_token"
)

// chunkSize is how much of a stream one message carries; streamWindow is
// the HTTP/2 flow-control window of the pulling side: a few messages in
// flight instead of gRPC's 64 KiB start.
const (
	chunkSize    = 1 << 20
	streamWindow = 8 << 20
)

// streamWait is how long a request waits for a free stream before it is
// refused with RESOURCE_EXHAUSTED (the receiver retries later).
const streamWait = 5 * time.Second

// Transfer serves this node's snapshots to peers, read-only: the snapshot
// must pass the ownership guard (a CSI snapshot or an internal one of a
// volume of ours), and the stream is checked before a byte leaves (its
// BEGIN record names that very snapshot; an encrypted volume's is raw). A
// resumed send takes what to send from the caller's token, which is why
// that check reads the stream itself, not the request.
type Transfer struct {
	cfg     rules.Config
	owner   rules.Owner
	props   rules.UserProps
	zfs     zfs.Interface
	streams chan struct{}
}

// NewTransfer serves at most maxStreams streams at once.
func NewTransfer(cfg rules.Config, z zfs.Interface, maxStreams int) *Transfer {
	if maxStreams <= 0 {
		maxStreams = DefaultMaxStreams
	}
	return &Transfer{cfg: cfg, owner: rules.NewOwner(cfg), props: rules.NewUserProps(cfg.DriverName), zfs: z,
		streams: make(chan struct{}, maxStreams)}
}

// Register registers the service on s.
func (t *Transfer) Register(s grpc.ServiceRegistrar) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: transferService,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Send", ServerStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error { return t.serve(stream) }}},
	}, t)
}

func (t *Transfer) serve(stream grpc.ServerStream) error {
	ctx := stream.Context()
	if _, err := CallerNode(ctx); err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	var request structpb.Struct
	if err := stream.RecvMsg(&request); err != nil {
		return err
	}
	req, err := parseSendRequest(&request)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	wait, cancel := context.WithTimeout(ctx, streamWait)
	defer cancel()
	select {
	case t.streams <- struct{}{}:
		defer func() { <-t.streams }()
	case <-wait.Done():
		return status.Errorf(codes.ResourceExhausted, "node %s serves %d streams at once, all busy: retry later", t.cfg.NodeID, cap(t.streams))
	}
	snapshot, from, raw, err := t.resolve(ctx, req)
	if err != nil {
		return err
	}
	out := bufio.NewWriterSize(chunkWriter{stream}, chunkSize)
	err = t.zfs.Send(ctx, snapshot, zfs.SendOptions{From: from, Raw: raw, ResumeToken: req.ResumeToken,
		Check: func(begin zfs.StreamBegin) error { return checkStream(begin, snapshot, raw) }}, out)
	if err == nil {
		err = out.Flush()
	}
	if err != nil && ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return rpc.Status(err)
}

// checkStream is the sending side's last word: the stream must be the
// snapshot the guard passed, and raw when its volume is encrypted.
func checkStream(begin zfs.StreamBegin, snapshot string, raw bool) error {
	switch {
	case begin.ToName != snapshot:
		return fmt.Errorf("the stream is of %q, not of the snapshot asked for", begin.ToName)
	case raw && !begin.Raw:
		return errors.New("an encrypted volume leaves its node only as a raw stream")
	}
	return nil
}

// resolve passes the request through the ownership guard: the snapshot
// and the base of an incremental are snapshots of ours of a volume of ours.
// Another node's or a foreign ID is NOT_FOUND, as everywhere.
func (t *Transfer) resolve(ctx context.Context, req forward.TransferRequest) (snapshot, from string, raw bool, err error) {
	snapshot, dataset, err := t.cfg.SnapshotName(req.SnapshotID)
	if err != nil {
		return "", "", false, status.Errorf(codes.NotFound, "snapshot %q is not one of node %s: %v", rules.Bounded(req.SnapshotID), t.cfg.NodeID, err)
	}
	roots := []string{dataset, snapshot}
	if req.FromSnapshotID != "" {
		var fromDataset string
		if from, fromDataset, err = t.cfg.SnapshotName(req.FromSnapshotID); err != nil || fromDataset != dataset {
			return "", "", false, status.Errorf(codes.NotFound, "snapshot %q is not an earlier snapshot of the same volume of node %s",
				rules.Bounded(req.FromSnapshotID), t.cfg.NodeID)
		}
		roots = append(roots, from)
	}
	rows, err := t.zfs.List(ctx, zfs.ListOptions{Roots: roots, Types: []zfs.Type{zfs.Filesystem, zfs.Volume, zfs.Snapshot},
		UserProps: t.props.All(), SkipMissing: true, Crypto: true})
	if err != nil {
		return "", "", false, rpc.Status(err)
	}
	found := map[string]zfs.Dataset{}
	for _, row := range rows {
		found[row.Name] = row
	}
	ours := func(name string) bool {
		row, ok := found[name]
		return ok && (t.owner.LiveSnapshot(row) || t.owner.InternalSnapshot(row))
	}
	volume, ok := found[dataset]
	switch {
	case !ok || !t.owner.Marked(volume) || !ours(snapshot):
		return "", "", false, status.Errorf(codes.NotFound, "snapshot %q does not exist on node %s", rules.Bounded(req.SnapshotID), t.cfg.NodeID)
	case from != "" && !ours(from):
		return "", "", false, status.Errorf(codes.NotFound, "snapshot %q does not exist on node %s", rules.Bounded(req.FromSnapshotID), t.cfg.NodeID)
	}
	return snapshot, from, found[snapshot].KeyStatus != "" || volume.KeyStatus != "", nil
}

// chunkWriter sends each write as one message.
type chunkWriter struct{ stream grpc.ServerStream }

func (w chunkWriter) Write(p []byte) (int, error) {
	if err := w.stream.SendMsg(wrapperspb.Bytes(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// sendRequest is req as the wire carries it.
func sendRequest(req forward.TransferRequest) (*structpb.Struct, error) {
	fields := map[string]any{fieldSnapshot: req.SnapshotID}
	if req.FromSnapshotID != "" {
		fields[fieldFromSnapshot] = req.FromSnapshotID
	}
	if req.ResumeToken != "" {
		fields[fieldResumeToken] = req.ResumeToken
	}
	return structpb.NewStruct(fields)
}

// parseSendRequest reads a request strictly: string fields it knows, no
// others, a snapshot named.
func parseSendRequest(request *structpb.Struct) (forward.TransferRequest, error) {
	var req forward.TransferRequest
	for name, value := range request.GetFields() {
		text, ok := value.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return req, fmt.Errorf("field %q is not a string", rules.Bounded(name))
		}
		switch name {
		case fieldSnapshot:
			req.SnapshotID = text.StringValue
		case fieldFromSnapshot:
			req.FromSnapshotID = text.StringValue
		case fieldResumeToken:
			req.ResumeToken = text.StringValue
		default:
			return req, fmt.Errorf("unknown field %q", rules.Bounded(name))
		}
	}
	if req.SnapshotID == "" {
		return req, errors.New("the request names no snapshot")
	}
	return req, nil
}

// Open implements forward.Transfers: it asks the snapshot's node for the
// stream and waits for its first chunk, so that a refusal comes back here,
// before anything is received.
func (c *Client) Open(ctx context.Context, req forward.TransferRequest) (io.ReadCloser, error) {
	nodeID, _, _, err := rules.ParseSnapshotID(req.SnapshotID)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "snapshot %q: %v", rules.Bounded(req.SnapshotID), err)
	}
	conn, err := c.Dial(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	request, err := sendRequest(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Send", ServerStreams: true}, sendMethod)
	if err == nil {
		err = stream.SendMsg(request)
	}
	if err == nil {
		err = stream.CloseSend()
	}
	reader := &streamReader{stream: stream, cancel: cancel}
	if err == nil {
		err = reader.next()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		cancel()
		return nil, err
	}
	return reader, nil
}

// streamReader reads the chunks of a Send stream as one byte stream.
type streamReader struct {
	stream  grpc.ClientStream
	cancel  context.CancelFunc
	pending []byte
	err     error
}

func (r *streamReader) next() error {
	var chunk wrapperspb.BytesValue
	if err := r.stream.RecvMsg(&chunk); err != nil {
		r.err = err
		return err
	}
	r.pending = chunk.GetValue()
	return nil
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if err := r.next(); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// Close ends the stream; the sending side's zfs send stops.
func (r *streamReader) Close() error {
	r.cancel()
	return nil
}
