package zfs

// ThickReservation is the refreservation ZFS gives a thick (non-sparse) zvol
// of volsize bytes, as `refreservation=auto` computes it on a pool without
// raidz (libzfs zvol_volsize_to_reservation): the data, times copies, plus
// room for every indirect block and the dnode's levels, each a 128 KiB block
// written min(copies+1, 3) times. make e2e checks it against ZFS
// (TestThickReservationIsWhatZFSReserves).
func ThickReservation(volsize, volBlockSize, copies uint64) uint64 {
	const (
		indirectBlockShift = 17                            // DN_MAX_INDBLKSHIFT
		pointersPerBlock   = 1 << (indirectBlockShift - 7) // a block pointer is 128 bytes
		dvasPerPointer     = 3
	)
	if volBlockSize == 0 {
		volBlockSize = defaultVolBlockSize
	}
	copies = max(copies, 1)
	metadataBlocks := uint64(7) // the dnode's levels L0–L6
	for blocks := volsize / volBlockSize; blocks > 1; {
		blocks = (blocks + pointersPerBlock - 1) / pointersPerBlock
		metadataBlocks += blocks
	}
	metadataBlocks *= min(dvasPerPointer, copies+1)
	return volsize*copies + metadataBlocks<<indirectBlockShift
}

// LargestThickVolume is the largest zvol size, a multiple of volBlockSize,
// whose ThickReservation fits in available bytes (0 when none does).
func LargestThickVolume(available, volBlockSize, copies uint64) uint64 {
	if volBlockSize == 0 {
		volBlockSize = defaultVolBlockSize
	}
	low, high := uint64(0), available/volBlockSize // in blocks
	for low < high {
		middle := low + (high-low+1)/2
		if ThickReservation(middle*volBlockSize, volBlockSize, copies) <= available {
			low = middle
		} else {
			high = middle - 1
		}
	}
	return low * volBlockSize
}
