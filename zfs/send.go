package zfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// VolumeRanges runs `zfs send -L -e -c snapshot` (with `-i from`: the
// changes since from, an earlier snapshot of the same zvol) and reads its
// stream as it comes (ReadStream), calling fn for each range of the zvol's
// data that the stream writes or frees. The stream's data is never held:
// -c and -e keep it as stored (no decompression), and the payloads are
// skipped. One zfs command; fn's error stops it.
func (e *Exec) VolumeRanges(ctx context.Context, snapshot, from string, fn func(StreamRange) error) error {
	names := []string{snapshot}
	if from != "" {
		names = append(names, from)
	}
	if err := checkNames(names...); err != nil {
		return err
	}
	argv := []string{e.cfg.ZFSPath, "send", "-L", "-e", "-c"}
	if from != "" {
		argv = append(argv, "-i", from)
	}
	argv = append(argv, snapshot)
	return e.sendInto(ctx, argv, func(stream io.Reader) error { return ReadStream(stream, fn) })
}

// sendInto runs a `zfs send` argv and gives its stdout to consume as it
// comes. When consume gives up (its error), send is stopped, unless the
// stream itself broke (ErrStream): send may have died, and its own error
// then says why. The error is
// consume's, or send's when send failed first and its stderr says why the
// stream broke (ErrStream, or a consumer whose writes failed for it).
func (e *Exec) sendInto(ctx context.Context, argv []string, consume func(io.Reader) error) error {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	sendCtx, stop := context.WithCancel(ctx)
	defer stop()
	send := e.command(sendCtx, argv)
	stream, sendEnd, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("zfs send: %w", err)
	}
	defer stream.Close()
	send.cmd.Stdout = sendEnd
	err = e.start(send)
	sendEnd.Close() // the child has its own copy; its exit ends the stream
	if err != nil {
		return err
	}
	consumeErr := consume(stream)
	if consumeErr != nil && !errors.Is(consumeErr, ErrStream) {
		stop() // the consumer gave up: send need not go on
	}
	stream.Close() // a send still writing fails instead of blocking
	sendErr := e.wait(sendCtx, send)
	var failed *CommandError
	switch {
	case consumeErr == nil:
		return sendErr
	case errors.Is(consumeErr, ErrRefusedStream):
		return consumeErr
	case errors.As(sendErr, &failed) && failed.Stderr != "":
		return sendErr // send failed first: its stderr says why the stream broke
	}
	return consumeErr
}
