package zfstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// TransferPool is a Pool whose filesystems can be given data, as a
// workload writes it.
type TransferPool interface {
	Pool
	// Fill writes size bytes of data into a filesystem.
	Fill(ctx context.Context, dataset string, size uint64) error
}

// The key of the encrypted cases: a passphrase as zfs reads it from stdin.
var transferKey = []byte("transfer-cases-passphrase")

// TransferCases are how send and receive behave: a stream, cut
// short, resumed, raw; the table runs against the Fake in `go test` and
// against real ZFS in `make e2e` (e2e/tests), as GuardedCases do.
//
// long: the table of send and receive cases, one a row
func TransferCases() []GuardedCase {
	return []GuardedCase{
		{"a full stream received whole makes the dataset with the sent snapshot and no resume token", func(ctx context.Context, p Pool, root string) (string, error) {
			_, stream, err := sourceStream(ctx, p, root)
			if err != nil {
				return "", err
			}
			if err := p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{Properties: map[string]string{mark: "x"}}, bytes.NewReader(stream)); err != nil {
				return "", err
			}
			if problem, err := expectNames(ctx, p, root, root, root+"/dst", root+"/dst@s1", root+"/src", root+"/src@s1"); problem != "" || err != nil {
				return problem, err
			}
			if token, err := p.ResumeToken(ctx, root+"/dst"); err != nil || token != "" {
				return fmt.Sprintf("resume token %q (%v), want none", token, err), nil
			}
			row, err := zfs.Get(ctx, p, root+"/dst", []string{mark})
			if err != nil || row.User[mark] != "x" {
				return fmt.Sprintf("the received dataset's -o property: %v (%v)", row.User, err), nil
			}
			return "", nil
		}},
		{"Check sees the stream's BEGIN record before a byte is written, and its refusal sends nothing", func(ctx context.Context, p Pool, root string) (string, error) {
			snapshot, err := filledSnapshot(ctx, p, root+"/src", "s1")
			if err != nil {
				return "", err
			}
			var seen zfs.StreamBegin
			var out bytes.Buffer
			refusal := errors.New("not this one")
			err = p.Send(ctx, snapshot, zfs.SendOptions{Check: func(begin zfs.StreamBegin) error {
				seen = begin
				return refusal
			}}, &out)
			switch {
			case !errors.Is(err, zfs.ErrRefusedStream) || !errors.Is(err, refusal):
				return fmt.Sprintf("Send: %v, want the refusal", err), nil
			case out.Len() != 0:
				return fmt.Sprintf("%d bytes were written before the refusal", out.Len()), nil
			case seen.ToName != snapshot || seen.ToGUID == 0 || seen.FromGUID != 0 || seen.Raw || seen.Resuming:
				return fmt.Sprintf("BEGIN of a full stream of %s: %+v", snapshot, seen), nil
			}
			return "", nil
		}},
		{"a stream cut short leaves the new dataset with a resume token, and send -t completes it", func(ctx context.Context, p Pool, root string) (string, error) {
			snapshot, stream, err := sourceStream(ctx, p, root)
			if err != nil {
				return "", err
			}
			err = p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{}, cutAfter(stream, len(stream)/2))
			if err == nil {
				return "a receive of half a stream succeeded", nil
			}
			token, err := p.ResumeToken(ctx, root+"/dst")
			if err != nil || token == "" {
				return fmt.Sprintf("after a cut: resume token %q (%v), want one", token, err), nil
			}
			// The partial dataset is listed (ZFS made it at the BEGIN
			// record): whoever lists must tell it by its token.
			if problem, err := expectNames(ctx, p, root, root, root+"/dst", root+"/src", root+"/src@s1"); problem != "" || err != nil {
				return "cut short: " + problem, err
			}
			var begin zfs.StreamBegin
			rest, err := sendAll(ctx, p, "", zfs.SendOptions{ResumeToken: token, Check: func(b zfs.StreamBegin) error { begin = b; return nil }})
			if err != nil {
				return "", err
			}
			if !begin.Resuming || begin.ToName != snapshot {
				return fmt.Sprintf("BEGIN of the resumed stream: %+v, want RESUMING of %s", begin, snapshot), nil
			}
			if err := p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{}, bytes.NewReader(rest)); err != nil {
				return fmt.Sprintf("the resumed receive: %v", err), nil
			}
			if token, err := p.ResumeToken(ctx, root+"/dst"); err != nil || token != "" {
				return fmt.Sprintf("after resuming: resume token %q (%v), want none", token, err), nil
			}
			return expectNames(ctx, p, root, root, root+"/dst", root+"/dst@s1", root+"/src", root+"/src@s1")
		}},
		{"AbortReceive of a new dataset cut short takes it away", func(ctx context.Context, p Pool, root string) (string, error) {
			_, stream, err := sourceStream(ctx, p, root)
			if err != nil {
				return "", err
			}
			_ = p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{}, cutAfter(stream, len(stream)/2))
			if err := p.AbortReceive(ctx, root+"/dst"); err != nil {
				return fmt.Sprintf("AbortReceive: %v", err), nil
			}
			if _, err := p.ResumeToken(ctx, root+"/dst"); !errors.Is(err, zfs.ErrNotFound) {
				return fmt.Sprintf("ResumeToken after the abort: %v, want ErrNotFound", err), nil
			}
			return expectNames(ctx, p, root, root, root+"/src", root+"/src@s1")
		}},
		{"an incremental stream adds the later snapshot; cut short it leaves the dataset as it was, resumable", func(ctx context.Context, p Pool, root string) (string, error) {
			first, err := filledSnapshot(ctx, p, root+"/src", "s1")
			if err != nil {
				return "", err
			}
			full, err := sendAll(ctx, p, first, zfs.SendOptions{})
			if err != nil {
				return "", err
			}
			if err := p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{}, bytes.NewReader(full)); err != nil {
				return "", err
			}
			if err := fill(ctx, p, root+"/src", 1<<20); err != nil {
				return "", err
			}
			second := root + "/src@s2"
			if err := p.Snapshot(ctx, second, nil); err != nil {
				return "", err
			}
			var begin zfs.StreamBegin
			increment, err := sendAll(ctx, p, second, zfs.SendOptions{From: first, Check: func(b zfs.StreamBegin) error { begin = b; return nil }})
			if err != nil {
				return "", err
			}
			if begin.FromGUID == 0 || begin.ToName != second {
				return fmt.Sprintf("BEGIN of an incremental stream: %+v", begin), nil
			}
			_ = p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{}, cutAfter(increment, len(increment)/2))
			if problem, err := expectNames(ctx, p, root+"/dst", root+"/dst", root+"/dst@s1"); problem != "" || err != nil {
				return "cut short: " + problem, err
			}
			token, err := p.ResumeToken(ctx, root+"/dst")
			if err != nil || token == "" {
				return fmt.Sprintf("an incremental cut short: resume token %q (%v), want one", token, err), nil
			}
			rest, err := sendAll(ctx, p, "", zfs.SendOptions{ResumeToken: token})
			if err != nil {
				return "", err
			}
			if err := p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{}, bytes.NewReader(rest)); err != nil {
				return fmt.Sprintf("the resumed incremental receive: %v", err), nil
			}
			return expectNames(ctx, p, root+"/dst", root+"/dst", root+"/dst@s1", root+"/dst@s2")
		}},
		{"a raw stream of an encrypted dataset says so and arrives encrypted, opened by the same passphrase", func(ctx context.Context, p Pool, root string) (string, error) {
			err := p.Create(ctx, root+"/src", zfs.CreateOptions{Key: transferKey, Properties: map[string]string{
				"encryption": "on", "keyformat": "passphrase", "keylocation": "prompt"}})
			if err != nil {
				return "", err
			}
			if err := p.Snapshot(ctx, root+"/src@s1", nil); err != nil {
				return "", err
			}
			var begin zfs.StreamBegin
			stream, err := sendAll(ctx, p, root+"/src@s1", zfs.SendOptions{Raw: true, Check: func(b zfs.StreamBegin) error { begin = b; return nil }})
			if err != nil {
				return "", err
			}
			if !begin.Raw {
				return fmt.Sprintf("BEGIN of a raw send: %+v, want Raw", begin), nil
			}
			if err := p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{}, bytes.NewReader(stream)); err != nil {
				return "", err
			}
			row, err := zfs.GetWithKeyStatus(ctx, p, root+"/dst", nil)
			if err != nil {
				return "", err
			}
			if row.KeyStatus != "unavailable" || row.EncryptionRoot != root+"/dst" {
				return fmt.Sprintf("received raw: keystatus %q, encryption root %q; want unavailable, its own", row.KeyStatus, row.EncryptionRoot), nil
			}
			if err := p.LoadKey(ctx, root+"/dst", transferKey); err != nil {
				return fmt.Sprintf("the source's passphrase on the received dataset: %v", err), nil
			}
			return "", nil
		}},
		{"a full stream onto an existing dataset is refused as existing", func(ctx context.Context, p Pool, root string) (string, error) {
			_, stream, err := sourceStream(ctx, p, root)
			if err != nil {
				return "", err
			}
			if err := p.Create(ctx, root+"/dst", zfs.CreateOptions{}); err != nil {
				return "", err
			}
			if err := p.Receive(ctx, root+"/dst", zfs.ReceiveOptions{}, bytes.NewReader(stream)); !errors.Is(err, zfs.ErrExists) {
				return fmt.Sprintf("Receive onto an existing dataset: %v, want ErrExists", err), nil
			}
			return "", nil
		}},
		{"ResumeToken of a dataset that does not exist is ErrNotFound", func(ctx context.Context, p Pool, root string) (string, error) {
			if _, err := p.ResumeToken(ctx, root+"/missing"); !errors.Is(err, zfs.ErrNotFound) {
				return fmt.Sprintf("ResumeToken: %v, want ErrNotFound", err), nil
			}
			return "", nil
		}},
		{"Rename moves a dataset with its snapshots", func(ctx context.Context, p Pool, root string) (string, error) {
			if _, err := filledSnapshot(ctx, p, root+"/a", "s1"); err != nil {
				return "", err
			}
			if err := p.Create(ctx, root+"/hidden", zfs.CreateOptions{}); err != nil {
				return "", err
			}
			if err := p.Rename(ctx, root+"/a", root+"/hidden/b"); err != nil {
				return "", err
			}
			return expectNames(ctx, p, root, root, root+"/hidden", root+"/hidden/b", root+"/hidden/b@s1")
		}},
	}
}

// filledSnapshot makes a filesystem with a MiB of data and a snapshot.
func filledSnapshot(ctx context.Context, p Pool, dataset, snapshot string) (string, error) {
	if err := p.Create(ctx, dataset, zfs.CreateOptions{}); err != nil {
		return "", err
	}
	if err := fill(ctx, p, dataset, 1<<20); err != nil {
		return "", err
	}
	return dataset + "@" + snapshot, p.Snapshot(ctx, dataset+"@"+snapshot, nil)
}

func fill(ctx context.Context, p Pool, dataset string, size uint64) error {
	filler, ok := p.(TransferPool)
	if !ok {
		return errors.New("the transfer cases need a TransferPool")
	}
	return filler.Fill(ctx, dataset, size)
}

// sourceStream makes root/src with data and a snapshot s1, and sends it
// whole.
func sourceStream(ctx context.Context, p Pool, root string) (snapshot string, stream []byte, err error) {
	if snapshot, err = filledSnapshot(ctx, p, root+"/src", "s1"); err != nil {
		return "", nil, err
	}
	stream, err = sendAll(ctx, p, snapshot, zfs.SendOptions{})
	return snapshot, stream, err
}

// sendAll is a whole stream in memory.
func sendAll(ctx context.Context, p Pool, snapshot string, opts zfs.SendOptions) ([]byte, error) {
	var out bytes.Buffer
	err := p.Send(ctx, snapshot, opts, &out)
	return out.Bytes(), err
}

// cutAfter reads the first n bytes of stream, then fails, as a connection
// that drops does.
func cutAfter(stream []byte, n int) io.Reader {
	return io.MultiReader(bytes.NewReader(stream[:n]), failingReader{})
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

// expectNames compares what lies under root (filesystems, volumes,
// snapshots) with want.
func expectNames(ctx context.Context, p Pool, root string, want ...string) (string, error) {
	got, err := names(ctx, p, root)
	if err != nil {
		return "", err
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Sprintf("under %s: %s; want %s", root, strings.Join(got, " "), strings.Join(want, " ")), nil
	}
	return "", nil
}
