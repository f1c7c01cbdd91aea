package peer_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/zfs-csi/zfs-csi/forward"
	"github.com/zfs-csi/zfs-csi/zfs"
	"github.com/zfs-csi/zfs-csi/zfs/zfstest"
)

// bigSend is the Fake whose sends go on with size bytes after the stream's
// own first record: what a large snapshot costs the channel, without disks.
type bigSend struct {
	*zfstest.Fake
	size int
}

func (b bigSend) Send(ctx context.Context, snapshot string, opts zfs.SendOptions, w io.Writer) error {
	var whole bytes.Buffer
	if err := b.Fake.Send(ctx, snapshot, zfs.SendOptions{}, &whole); err != nil {
		return err
	}
	stream := io.MultiReader(bytes.NewReader(whole.Bytes()[:312]), io.LimitReader(zeros{}, int64(b.size)))
	if opts.Check != nil {
		stream = zfs.CheckStream(stream, opts.Check)
	}
	_, err := io.Copy(w, stream)
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// BenchmarkAStreamThroughTheChannel moves 64 MiB per run through the
// transfer service (mutual TLS 1.3, gRPC, 1 MiB messages) and, in the same
// run, through a bare loopback TCP connection: ratio is the channel's time
// over the bare copy's, the cost of the channel per byte on this CPU.
func BenchmarkAStreamThroughTheChannel(b *testing.B) {
	const size = 64 << 20
	nodes := newTwoNodesServing(b, 0, func(fake *zfstest.Fake) zfs.Interface { return bigSend{Fake: fake, size: size} })
	volume(b, nodes.a, "tank/csi/pvc-a", zfs.CreateOptions{})
	var channel, bare time.Duration
	b.SetBytes(size)
	for b.Loop() {
		started := time.Now()
		stream, err := nodes.client.Open(b.Context(), forward.TransferRequest{SnapshotID: "node-a:tank/csi/pvc-a@snap-1"})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, stream)
		stream.Close()
		if err != nil || n < size {
			b.Fatalf("%d bytes: %v", n, err)
		}
		channel += time.Since(started)
		bare += bareCopy(b, size)
	}
	b.ReportMetric(channel.Seconds()/bare.Seconds(), "ratio")
	b.ReportMetric(float64(size)/(1<<20)/(channel.Seconds()/float64(b.N)), "MiB/s")
	b.ReportMetric(float64(size)/(1<<20)/(bare.Seconds()/float64(b.N)), "bare-MiB/s")
}

// bareCopy sends size bytes over a loopback TCP connection.
func bareCopy(b *testing.B, size int64) time.Duration {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer listener.Close()
	go func() {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = io.Copy(conn, io.LimitReader(zeros{}, size))
	}()
	started := time.Now()
	conn, err := net.Dial("tcp", listener.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	if n, err := io.Copy(io.Discard, conn); err != nil || n != size {
		b.Fatalf("bare copy: %d bytes, %v", n, err)
	}
	return time.Since(started)
}
