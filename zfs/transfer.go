package zfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
)

// Transfers between hosts: a snapshot leaves one host as the
// stdout of `zfs send` and arrives at another as the stdin of a resumable
// `zfs receive -s`. This package runs both ends and reads nothing of the
// stream but its BEGIN record: what the sending side checks before a byte
// leaves (StreamBegin), because a resumed send takes what to send from a
// token the receiver gave.

// SendOptions are the options of Send.
type SendOptions struct {
	// From sends only the changes since this earlier snapshot of the same
	// dataset (`-i`); "" sends the whole snapshot.
	From string
	// Raw sends encrypted blocks as they are stored (`-w`): the stream
	// carries no plaintext and no key, and the received dataset opens with
	// the source's key only. Without Raw, -L -e -c keep blocks as stored
	// (large, embedded, compressed): no recompression on either side.
	Raw bool
	// ResumeToken resumes a receive cut short (`-t`, the receiving side's
	// receive_resume_token): the snapshot, From and Raw then come from the
	// token, which is why Check sees the stream before it is sent on.
	ResumeToken string
	// Check, when set, is called with the stream's BEGIN record before any
	// byte reaches the writer; its error stops the send.
	Check func(StreamBegin) error
	// Sent, when not nil, counts the bytes written so far.
	Sent *atomic.Uint64
}

// StreamBegin is what a stream's BEGIN record says of itself.
type StreamBegin struct {
	// ToName is the sent snapshot's full name on the sending host.
	ToName string
	// ToGUID and FromGUID identify the snapshot and an incremental's base
	// (0 for a full stream).
	ToGUID, FromGUID uint64
	// Raw: encrypted blocks as stored (DMU_BACKUP_FEATURE_RAW).
	Raw bool
	// Resuming: the stream continues a receive cut short.
	Resuming bool
}

// Feature flags of drr_versioninfo (bits 2-31), as OpenZFS numbers them.
const (
	featureResuming = 1 << 20
	featureRaw      = 1 << 24
)

// Offsets in the BEGIN record (after the 8-byte record header).
const (
	offBeginToGUID   = 40
	offBeginFromGUID = 48
	offBeginToName   = 56
)

// ParseStreamBegin reads a stream's first record.
func ParseStreamBegin(record []byte) (StreamBegin, error) {
	if len(record) < recordSize {
		return StreamBegin{}, fmt.Errorf("%w: %d bytes, short of a BEGIN record", ErrStream, len(record))
	}
	order, ok := streamOrder(record)
	if !ok {
		return StreamBegin{}, fmt.Errorf("%w: no BEGIN record", ErrStream)
	}
	if kind := order.Uint32(record[0:]); kind != drrBegin {
		return StreamBegin{}, fmt.Errorf("%w: the first record has type %d", ErrStream, kind)
	}
	versionInfo := order.Uint64(record[offVersionInfo:])
	if header := versionInfo & 3; header != 1 {
		return StreamBegin{}, fmt.Errorf("%w: a compound stream (zfs send -R) or an unknown header type %d", ErrStream, header)
	}
	features := (versionInfo >> 2) & (1<<30 - 1)
	name := record[offBeginToName:recordSize]
	if end := bytes.IndexByte(name, 0); end >= 0 {
		name = name[:end]
	}
	return StreamBegin{
		ToName:   string(name),
		ToGUID:   order.Uint64(record[offBeginToGUID:]),
		FromGUID: order.Uint64(record[offBeginFromGUID:]),
		Raw:      features&featureRaw != 0,
		Resuming: features&featureResuming != 0,
	}, nil
}

// ErrRefusedStream: Check refused what send was about to send.
var ErrRefusedStream = errors.New("stream refused before it was sent")

// Send runs `zfs send` of snapshot (or of opts.ResumeToken) and writes the
// stream to w. When w fails (the peer went away) send is stopped; the
// receiving side resumes later from its token.
func (e *Exec) Send(ctx context.Context, snapshot string, opts SendOptions, w io.Writer) error {
	argv := []string{e.cfg.ZFSPath, "send"}
	switch {
	case opts.ResumeToken != "":
		if strings.ContainsAny(opts.ResumeToken, " \t\n") || strings.HasPrefix(opts.ResumeToken, "-") {
			return fmt.Errorf("zfs: bad resume token: %w", ErrInvalid)
		}
		argv = append(argv, "-t", opts.ResumeToken)
	default:
		if err := checkNames(snapshot); err != nil {
			return err
		}
		if opts.Raw {
			argv = append(argv, "-w")
		} else {
			argv = append(argv, "-L", "-e", "-c")
		}
		if opts.From != "" {
			if err := checkNames(opts.From); err != nil {
				return err
			}
			argv = append(argv, "-i", opts.From)
		}
		argv = append(argv, snapshot)
	}
	return e.sendInto(ctx, argv, func(stream io.Reader) error { return relayStream(stream, w, opts) })
}

// relayStream checks the BEGIN record, then copies the stream to w.
func relayStream(stream io.Reader, w io.Writer, opts SendOptions) error {
	sent := opts.Sent
	if sent == nil {
		sent = new(atomic.Uint64)
	}
	if opts.Check != nil {
		stream = CheckStream(stream, opts.Check)
	}
	_, err := io.Copy(countingWriter{w: w, n: sent}, stream)
	return err
}

// CheckStream is r, a send stream, read only once check has passed its
// BEGIN record (ParseStreamBegin, which refuses a compound stream: one
// that could carry properties and other datasets). Check's error, wrapped
// in ErrRefusedStream, is the reader's first, and nothing of the stream
// comes before. Both ends use it: the sender on what zfs send made of a
// request, the receiver on what a peer sent before zfs receive reads it.
func CheckStream(r io.Reader, check func(StreamBegin) error) io.Reader {
	return &checkedStream{r: r, check: check}
}

type checkedStream struct {
	r       io.Reader
	check   func(StreamBegin) error
	checked bool
}

func (c *checkedStream) Read(p []byte) (int, error) {
	if !c.checked {
		var first [recordSize]byte
		if _, err := io.ReadFull(c.r, first[:]); err != nil {
			return 0, fmt.Errorf("%w: %v", ErrStream, err)
		}
		begin, err := ParseStreamBegin(first[:])
		if err != nil {
			return 0, err
		}
		if err := c.check(begin); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrRefusedStream, err)
		}
		c.checked = true
		c.r = io.MultiReader(bytes.NewReader(first[:]), c.r)
	}
	return c.r.Read(p)
}

type countingWriter struct {
	w io.Writer
	n *atomic.Uint64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(uint64(n))
	return n, err
}

// ReceiveOptions are the options of Receive.
type ReceiveOptions struct {
	// Properties are set on the received dataset (`-o`).
	Properties map[string]string
	// Received, when not nil, counts the bytes of the stream read so far.
	Received *atomic.Uint64
}

// Receive runs `zfs receive -s -u [-o k=v …] name` with the stream read
// from r. It is resumable: a stream cut short (r fails or ends early, ctx
// ends, either side is killed) leaves name holding what arrived and its
// receive_resume_token (ResumeToken), from which a send goes on
// (SendOptions.ResumeToken). A new dataset received whole is not mounted
// (-u); one cut short cannot be. When r fails, receive sees its stdin end
// early and keeps the partial state; the error returned is r's unless zfs
// explains more.
func (e *Exec) Receive(ctx context.Context, name string, opts ReceiveOptions, r io.Reader) error {
	if err := checkNames(name); err != nil {
		return err
	}
	options, err := propertyOptions(opts.Properties)
	if err != nil {
		return err
	}
	received := opts.Received
	if received == nil {
		received = new(atomic.Uint64)
	}
	ctx, cancel := e.bound(ctx)
	defer cancel()
	receive := e.command(ctx, append(append([]string{e.cfg.ZFSPath, "receive", "-s", "-u"}, options...), name))
	receiveEnd, toReceive, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("zfs receive: %w", err)
	}
	receive.cmd.Stdin = receiveEnd
	err = e.start(receive)
	receiveEnd.Close()
	if err != nil {
		toReceive.Close()
		return err
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(countingWriter{w: toReceive, n: received}, r)
		toReceive.Close() // receive sees the end of its stream, whole or not
		copied <- err
	}()
	stopCopy := context.AfterFunc(ctx, func() { toReceive.Close() })
	defer stopCopy()
	receiveErr := e.wait(ctx, receive)
	toReceive.Close() // a receive that quit early stops the copy
	copyErr := <-copied
	switch {
	case receiveErr == nil:
		return nil
	case classified(receiveErr) || copyErr == nil || errors.Is(copyErr, os.ErrClosed) || errors.Is(copyErr, syscall.EPIPE):
		// The receive quit first (a write into its stdin found it gone):
		// what it said is why, not the stream.
		return receiveErr
	}
	return fmt.Errorf("zfs receive of %s: the stream broke off: %w", name, copyErr)
}

// ResumeToken runs `zfs get -H -p -o value receive_resume_token name`: the
// token of a receive cut short into name, "" when there is none (name was
// received whole, or not received at all), ErrNotFound when name does not
// exist.
func (e *Exec) ResumeToken(ctx context.Context, name string) (string, error) {
	if err := checkNames(name); err != nil {
		return "", err
	}
	out, err := e.zfs(ctx, "get", "-H", "-p", "-o", "value", "receive_resume_token", name)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(out))
	if token == "-" {
		token = ""
	}
	return token, nil
}

// AbortReceive runs `zfs receive -A name`: the partial state of a receive
// cut short goes (for a new dataset, the dataset itself).
func (e *Exec) AbortReceive(ctx context.Context, name string) error {
	if err := checkNames(name); err != nil {
		return err
	}
	_, err := e.zfs(ctx, "receive", "-A", name)
	return err
}

// Rename runs `zfs rename from to` (no -p: to's parent must exist).
func (e *Exec) Rename(ctx context.Context, from, to string) error {
	return e.change(ctx, []string{"rename"}, nil, from, to)
}
