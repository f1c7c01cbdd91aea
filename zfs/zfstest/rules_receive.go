package zfstest

import (
	"bytes"
	"context"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// The base of an incremental receive, as the kernel checks it
// (recv_begin_check_existing_impl in module/zfs/dmu_recv.c, OpenZFS 2.3):
// the target must hold the stream's from-snapshot, not necessarily as its
// newest, and nothing may have been written to it since that snapshot.

// replica makes root/src with data and a snapshot s1, and root/dst
// received from it (unmounted): the pair an incremental goes between.
func replica(ctx context.Context, p Pool, root string) (src, dst string, err error) {
	src, dst = root+"/src", root+"/dst"
	first, err := filledSnapshot(ctx, p, src, "s1")
	if err != nil {
		return "", "", err
	}
	stream, err := sendAll(ctx, p, first, zfs.SendOptions{})
	if err != nil {
		return "", "", err
	}
	return src, dst, p.Receive(ctx, dst, zfs.ReceiveOptions{}, bytes.NewReader(stream))
}

// increment writes to dataset, snapshots it as to and returns the stream
// from its snapshot from.
func increment(ctx context.Context, p Pool, dataset, from, to string) ([]byte, error) {
	if err := fill(ctx, p, dataset, 1<<20); err != nil {
		return nil, err
	}
	if err := p.Snapshot(ctx, dataset+"@"+to, nil); err != nil {
		return nil, err
	}
	return sendAll(ctx, p, dataset+"@"+to, zfs.SendOptions{From: dataset + "@" + from})
}

func receiving(ctx context.Context, p Pool, name, what string, stream []byte) refusal {
	return refusal{"receive " + what + " into " + name, ErrUnclassified, func() error {
		return p.Receive(ctx, name, zfs.ReceiveOptions{}, bytes.NewReader(stream))
	}}
}

func receiveRules() []RuleCase {
	return []RuleCase{
		{"incremental receive: from a snapshot the target does not hold is refused in words Exec has no kind for", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			src, dst, err := replica(ctx, p, root)
			if err != nil {
				return "", "", err
			}
			if _, err := increment(ctx, p, src, "s1", "s2"); err != nil {
				return "", "", err
			}
			// Nothing written after s2: a stream that fits in the pipe
			// whole. zfs refuses it having read only its first records,
			// and of a larger one Exec reports the write that failed
			// (EPIPE: "the stream broke off") instead of zfs's words.
			if err := p.Snapshot(ctx, src+"@s3", nil); err != nil {
				return "", "", err
			}
			stream, err := sendAll(ctx, p, src+"@s3", zfs.SendOptions{From: src + "@s2"})
			if err != nil {
				return "", "", err
			}
			return refused(ctx, p, root, receiving(ctx, p, dst, "src@s2 to src@s3", stream))
		}},
		{"incremental receive: onto a target written since the from-snapshot is refused in words Exec has no kind for", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			// The received copy sends back to its mounted source, which is
			// written after s1: the way round that needs no mount.
			src, dst, err := replica(ctx, p, root)
			if err != nil {
				return "", "", err
			}
			if err := p.Snapshot(ctx, dst+"@s2", nil); err != nil {
				return "", "", err
			}
			stream, err := sendAll(ctx, p, dst+"@s2", zfs.SendOptions{From: dst + "@s1"})
			if err != nil {
				return "", "", err
			}
			if err := fill(ctx, p, src, 1<<20); err != nil {
				return "", "", err
			}
			return refused(ctx, p, root, receiving(ctx, p, src, "dst@s1 to dst@s2", stream))
		}},
		{"incremental receive: from an older snapshot of the target, nothing written since, is received", func(ctx context.Context, p TransferPool, root string) (string, string, error) {
			src, dst, err := replica(ctx, p, root)
			if err != nil {
				return "", "", err
			}
			if err := p.Snapshot(ctx, dst+"@mine", nil); err != nil {
				return "", "", err
			}
			stream, err := increment(ctx, p, src, "s1", "s2")
			if err != nil {
				return "", "", err
			}
			if err := p.Receive(ctx, dst, zfs.ReceiveOptions{}, bytes.NewReader(stream)); err != nil {
				return describe(err), "receive src@s1 to src@s2 into a target whose newest snapshot is its own: " + describe(err), nil
			}
			problem, err := expectNames(ctx, p, dst, dst, dst+"@s1", dst+"@mine", dst+"@s2")
			return "received", problem, err
		}},
	}
}
