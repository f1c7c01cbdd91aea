package zfs

// defaultVolBlockSize is OpenZFS ≥ 2.2's default; 2.1 used 8 KiB, which
// divides it, so sizes rounded to it are valid on both.
const defaultVolBlockSize = 16 << 10

// ThickReservation is the refreservation ZFS gives a thick (non-sparse) zvol
// of volsize bytes, as `refreservation=auto` computes it on a pool without
// raidz (libzfs zvol_volsize_to_reservation): the data plus room for every
// indirect block and the dnode's levels, each a 128 KiB block written twice.
// libzfs means to scale it by the copies property but never finds it among
// the properties it reads (measured on OpenZFS 2.3: copies=2 and 3 reserve
// what copies=1 does), so neither does this. make e2e checks it against ZFS
// (TestThickReservationIsWhatZFSReserves).
func ThickReservation(volsize, volBlockSize uint64) uint64 {
	const (
		indirectBlockShift = 17                            // DN_MAX_INDBLKSHIFT
		pointersPerBlock   = 1 << (indirectBlockShift - 7) // a block pointer is 128 bytes
		copiesOfMetadata   = 2                             // min(SPA_DVAS_PER_BP, copies+1) with copies 1
	)
	if volBlockSize == 0 {
		volBlockSize = defaultVolBlockSize
	}
	metadataBlocks := uint64(7) // the dnode's levels L0–L6
	for blocks := volsize / volBlockSize; blocks > 1; {
		blocks = (blocks + pointersPerBlock - 1) / pointersPerBlock
		metadataBlocks += blocks
	}
	return volsize + metadataBlocks*copiesOfMetadata<<indirectBlockShift
}

// LargestThickVolume is the largest zvol size, a multiple of volBlockSize,
// whose ThickReservation fits in available bytes (0 when none does).
func LargestThickVolume(available, volBlockSize uint64) uint64 {
	if volBlockSize == 0 {
		volBlockSize = defaultVolBlockSize
	}
	low, high := uint64(0), available/volBlockSize // in blocks
	for low < high {
		middle := low + (high-low+1)/2
		if ThickReservation(middle*volBlockSize, volBlockSize) <= available {
			low = middle
		} else {
			high = middle - 1
		}
	}
	return low * volBlockSize
}
