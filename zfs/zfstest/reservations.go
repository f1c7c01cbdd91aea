package zfstest

// ThickReservation is one figure of what OpenZFS 2.3 reserves for a thick
// zvol (`zfs create -V` without -s, or refreservation=auto): the
// refreservation `zfs get -Hp` shows on a pool without raidz.
type ThickReservation struct {
	VolSize, VolBlockSize, RefReservation uint64
}

// ThickReservations are the Fake's own figures for refreservation=auto,
// worked out by hand from libzfs's zvol_volsize_to_reservation
// (lib/libzfs/libzfs_dataset.c) and not from zfs.ThickReservation, so that a
// change to the production formula cannot carry the Fake along with it.
// e2e/tests TestThickReservationsAreWhatZFSReserves creates each of these
// zvols on real ZFS and compares: when they disagree, these rows are wrong.
var ThickReservations = []ThickReservation{
	{VolSize: 1 << 20, VolBlockSize: 8 << 10, RefReservation: 3145728},
	{VolSize: 1 << 20, VolBlockSize: 16 << 10, RefReservation: 3145728},
	{VolSize: 64 << 20, VolBlockSize: 8 << 10, RefReservation: 71303168},
	{VolSize: 100 << 20, VolBlockSize: 4 << 10, RefReservation: 113508352},
	{VolSize: 128 << 20, VolBlockSize: 16 << 10, RefReservation: 138412032},
	{VolSize: 128 << 20, VolBlockSize: 64 << 10, RefReservation: 136839168},
	{VolSize: 1 << 30, VolBlockSize: 8 << 10, RefReservation: 1109393408},
	{VolSize: 1 << 30, VolBlockSize: 16 << 10, RefReservation: 1092616192},
	{VolSize: 2 << 30, VolBlockSize: 8 << 10, RefReservation: 2216689664},
	{VolSize: 2 << 30, VolBlockSize: 16 << 10, RefReservation: 2183135232},
	{VolSize: 2<<30 + 16<<10, VolBlockSize: 16 << 10, RefReservation: 2183413760},
	{VolSize: 3 << 30, VolBlockSize: 128 << 10, RefReservation: 3229614080},
	{VolSize: 5 << 30, VolBlockSize: 16 << 10, RefReservation: 5454692352},
	{VolSize: 4 << 30, VolBlockSize: 8 << 10, RefReservation: 4431282176},
}

// thickReservation is refreservation=auto for a zvol: the measured figure
// when ThickReservations has the size, and otherwise libzfs's arithmetic
// written out step by step as zvol_volsize_to_reservation does it (the
// data, plus the dnode's seven levels and every indirect block, each a
// 128 KiB block kept in two copies). TestFakeReservationArithmeticMatchesTheFigures
// holds that arithmetic to the figures.
func thickReservation(volSize, volBlockSize uint64) uint64 {
	for _, figure := range ThickReservations {
		if figure.VolSize == volSize && figure.VolBlockSize == volBlockSize {
			return figure.RefReservation
		}
	}
	return libzfsReservation(volSize, volBlockSize)
}

func libzfsReservation(volSize, volBlockSize uint64) uint64 {
	const (
		dnodesPerLevel    = 1024      // DNODES_PER_LEVEL: a 128 KiB block of 128-byte pointers
		metadataBlockSize = 128 << 10 // 1 << DN_MAX_INDBLKSHIFT
		metadataCopies    = 2         // MIN(SPA_DVAS_PER_BP, ncopies + 1), ncopies read as 1
	)
	blocks := volSize / volBlockSize
	data := blocks * volBlockSize // volsize_from_vdevs without raidz
	metadata := uint64(7)         // the meta-dnode's L0–L6
	for blocks > 1 {
		blocks = (blocks + dnodesPerLevel - 1) / dnodesPerLevel
		metadata += blocks
	}
	return data + metadata*metadataCopies*metadataBlockSize
}
