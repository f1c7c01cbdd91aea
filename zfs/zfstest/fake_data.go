package zfstest

import (
	"context"
	"fmt"
	"maps"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// A zvol's data as the Fake plays it: which blocks (of volblocksize) hold
// data and which were freed, each with the transaction group that last
// changed it, as ZFS's block pointers carry their birth. Snapshots and
// clones keep the blocks as they were; VolumeRanges reports them as a zfs
// send stream's records would.

// fakeBlock is one block of a zvol: written data, or a hole freed at birth.
type fakeBlock struct {
	birth uint64
	hole  bool
}

// WriteBlocks writes length bytes at offset of a zvol: every block they
// touch gets data born now.
func (f *Fake) WriteBlocks(name string, offset, length uint64) error {
	return f.changeBlocks(name, offset, length, false)
}

// FreeBlocks frees the blocks wholly inside the range (what blkdiscard
// does): each becomes a hole born now.
func (f *Fake) FreeBlocks(name string, offset, length uint64) error {
	return f.changeBlocks(name, offset, length, true)
}

func (f *Fake) changeBlocks(name string, offset, length uint64, free bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.datasets[name]
	if !ok || d.typ != zfs.Volume || offset+length > d.volSize {
		return zfs.ErrInvalid
	}
	f.txg++
	d.changed = f.txg
	size := d.volBlockSize()
	first, end := offset/size, (offset+length+size-1)/size
	if free {
		first, end = (offset+size-1)/size, (offset+length)/size
	}
	if d.blocks == nil {
		d.blocks = map[uint64]fakeBlock{}
	}
	for block := first; block < end; block++ {
		d.blocks[block] = fakeBlock{birth: f.txg, hole: free}
		if !free {
			d.written += size
		}
	}
	return nil
}

// inheritBlocks gives a new snapshot its dataset's blocks, and a clone its
// origin's. Callers hold mu.
func (f *Fake) inheritBlocks(d *fakeDataset) {
	var from *fakeDataset
	switch {
	case d.typ == zfs.Snapshot:
		from = f.datasets[datasetOf(d.name)]
	case d.origin != "":
		from = f.datasets[d.origin]
	}
	if from != nil && from.blocks != nil {
		d.blocks = maps.Clone(from.blocks)
	}
}

// VolumeRanges implements Interface: one range per block, in offset order,
// as a stream's WRITE and FREE records come.
func (f *Fake) VolumeRanges(ctx context.Context, snapshot, from string, fn func(zfs.StreamRange) error) error {
	f.mu.Lock()
	if err := f.begin(ctx, "VolumeRanges"); err != nil {
		f.mu.Unlock()
		return err
	}
	snap, ok := f.datasets[snapshot]
	if !ok || snap.typ != zfs.Snapshot {
		f.mu.Unlock()
		return f.fail("send", snapshot, zfs.ErrNotFound)
	}
	var since uint64
	if from != "" {
		base, ok := f.datasets[from]
		switch {
		case !ok:
			f.mu.Unlock()
			return f.fail("send", from, zfs.ErrNotFound)
		case datasetOf(from) != datasetOf(snapshot) || base.typ != zfs.Snapshot || base.createTxg >= snap.createTxg:
			f.mu.Unlock()
			return &zfs.CommandError{Argv: []string{"zfs", "send", "-i", from, snapshot}, ExitCode: 1, Kind: zfs.ErrInvalid,
				Stderr: fmt.Sprintf("cannot send '%s': not an earlier snapshot from the same fs", snapshot)}
		}
		since = base.createTxg
	}
	size := snap.volBlockSizeOf(f)
	// As zfs send does (measured in the guest): past the last block that
	// holds data, an incremental stream says "freed to the end of the
	// object" once, whatever the base held there, and names no block
	// beyond; a full stream names only the data.
	dataEnd, changed := uint64(0), false
	for block, state := range snap.blocks {
		if !state.hole {
			dataEnd = max(dataEnd, block+1)
		}
		changed = changed || state.birth > since
	}
	// Below it, an incremental stream also frees the blocks never written (a
	// hole without a birth time: OpenZFS's default
	// send_holes_without_birth_time=1 sends them, measured in the guest) of
	// every indirect block it visits: those above a block born since the
	// base (one indirect block maps indirectSpan blocks).
	visited := map[uint64]bool{}
	for block, state := range snap.blocks {
		if state.birth > since {
			visited[block/indirectSpan] = true
		}
	}
	var ranges []zfs.StreamRange
	for block := range dataEnd {
		state, written := snap.blocks[block]
		switch {
		case from != "" && !written && visited[block/indirectSpan]:
			ranges = append(ranges, zfs.StreamRange{Offset: block * size, Length: size, Freed: true})
		case !written:
		case from == "" && !state.hole, from != "" && state.birth > since:
			ranges = append(ranges, zfs.StreamRange{Offset: block * size, Length: size, Freed: state.hole})
		}
	}
	if from != "" && changed {
		ranges = append(ranges, zfs.StreamRange{Offset: dataEnd * size, Length: zfs.ToEnd, Freed: true})
	}
	f.mu.Unlock()
	for _, r := range ranges {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// indirectSpan is how many data blocks one indirect block maps: 128 KiB of
// 128-byte block pointers.
const indirectSpan = 1024

// volBlockSizeOf is a snapshot's zvol's block size. Callers hold mu.
func (d *fakeDataset) volBlockSizeOf(f *Fake) uint64 {
	if volume := f.datasets[datasetOf(d.name)]; volume != nil {
		return volume.volBlockSize()
	}
	return defaultVolBlockSize22
}
