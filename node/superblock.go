package node

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// Superblock is what the node reads of a filesystem's superblock: its size
// (to grow it when the zvol under it is larger, as a larger restore or clone
// is) and whether mkfs finished it.
type Superblock struct {
	// Size is the bytes the filesystem spans on its device.
	Size uint64
	// Complete is false for a filesystem whose mkfs was cut off. Each of the
	// three marks its work unfinished in a way mount refuses: mkfs.xfs sets
	// sb_inprogress until it is done; mkfs.btrfs writes a temporary magic
	// and the real one last; mke2fs writes the primary superblock last, so
	// an ext4 with a superblock is whole. blkid recognises only the first,
	// and that one is the state a stage could not leave without help.
	Complete bool
}

// superblockLayouts says where each filesystem keeps its superblock and how
// to read it: offset on the device and length to read.
var superblockLayouts = map[string]struct {
	offset, length int64
	parse          func([]byte) (Superblock, error)
}{
	"ext4":  {1024, 1024, parseExt4Superblock},
	"xfs":   {0, 512, parseXFSSuperblock},
	"btrfs": {64 << 10, 4096, parseBtrfsSuperblock},
}

// readSuperblock reads the superblock of a filesystem of fsType on the
// device (or image file) at path.
func readSuperblock(path, fsType string) (Superblock, error) {
	file, err := os.Open(path)
	if err != nil {
		return Superblock{}, err
	}
	defer file.Close()
	return readSuperblockFrom(file, path, fsType)
}

// readSuperblockFrom reads the superblock of a filesystem of fsType from
// device, which name names in errors.
func readSuperblockFrom(device io.ReaderAt, name, fsType string) (Superblock, error) {
	layout, ok := superblockLayouts[fsType]
	if !ok {
		return Superblock{}, fmt.Errorf("no superblock reader for %q", fsType)
	}
	data := make([]byte, layout.length)
	if _, err := device.ReadAt(data, layout.offset); err != nil && err != io.EOF {
		return Superblock{}, err
	}
	superblock, err := layout.parse(data)
	if err != nil {
		return Superblock{}, fmt.Errorf("%s: %w", name, err)
	}
	return superblock, nil
}

// parseExt4Superblock reads an ext4 superblock (the 1024 bytes at offset
// 1024): s_blocks_count (lo at 0x04, hi at 0x150 with the 64bit feature),
// s_log_block_size at 0x18, s_magic 0xEF53 at 0x38.
func parseExt4Superblock(data []byte) (Superblock, error) {
	if len(data) < 0x154 || binary.LittleEndian.Uint16(data[0x38:]) != 0xEF53 {
		return Superblock{}, fmt.Errorf("no ext4 superblock")
	}
	blocks := uint64(binary.LittleEndian.Uint32(data[0x04:]))
	if binary.LittleEndian.Uint32(data[0x60:])&0x80 != 0 { // INCOMPAT_64BIT
		blocks |= uint64(binary.LittleEndian.Uint32(data[0x150:])) << 32
	}
	logBlockSize := binary.LittleEndian.Uint32(data[0x18:])
	if logBlockSize > 6 {
		return Superblock{}, fmt.Errorf("ext4 superblock with block size 1024<<%d", logBlockSize)
	}
	return Superblock{Size: blocks * (1024 << logBlockSize), Complete: true}, nil
}

// parseXFSSuperblock reads an XFS superblock (big-endian, at offset 0):
// magic "XFSB", sb_blocksize at 4, sb_dblocks at 8, sb_inprogress at 126.
func parseXFSSuperblock(data []byte) (Superblock, error) {
	if len(data) < 128 || !bytes.Equal(data[:4], []byte("XFSB")) {
		return Superblock{}, fmt.Errorf("no XFS superblock")
	}
	blockSize := uint64(binary.BigEndian.Uint32(data[4:]))
	blocks := binary.BigEndian.Uint64(data[8:])
	return Superblock{Size: blocks * blockSize, Complete: data[126] == 0}, nil
}

// btrfsMagic is a finished btrfs; mkfs.btrfs writes btrfsTemporaryMagic
// until it is done.
var btrfsMagic, btrfsTemporaryMagic = []byte("_BHRfS_M"), []byte("_BHRf$_M")

// parseBtrfsSuperblock reads a btrfs superblock (little-endian, at 64 KiB):
// magic at 0x40, total_bytes at 0x70.
func parseBtrfsSuperblock(data []byte) (Superblock, error) {
	if len(data) < 0x78 {
		return Superblock{}, fmt.Errorf("no btrfs superblock")
	}
	magic := data[0x40:0x48]
	if !bytes.Equal(magic, btrfsMagic) && !bytes.Equal(magic, btrfsTemporaryMagic) {
		return Superblock{}, fmt.Errorf("no btrfs superblock")
	}
	return Superblock{Size: binary.LittleEndian.Uint64(data[0x70:]), Complete: bytes.Equal(magic, btrfsMagic)}, nil
}

// formatArgs is the command line that makes a filesystem of fsType on a
// device, as Kubernetes' mount library formats (mount-utils'
// SafeFormatAndMount): ext4 without the 5 % of blocks reserved for root
// (-m 0), which workloads that do not run as root could never use. No
// discard: a new zvol is all holes already.
//
// It forces only with overwrite, which the caller asks for over an
// unfinished filesystem of the same type (Superblock.Complete false);
// otherwise mkfs.xfs and mkfs.btrfs refuse a device with any signature on
// their own, and mkfs.ext4, which does not, runs only after blkid found the
// device blank.
func formatArgs(fsType, device string, overwrite bool) ([]string, error) {
	var argv []string
	switch fsType {
	case "ext4":
		argv = []string{"mkfs.ext4", "-q", "-m", "0", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1"}
		if overwrite {
			argv = append(argv, "-F")
		}
	case "xfs", "btrfs":
		argv = []string{"mkfs." + fsType, "-q", "-K"}
		if overwrite {
			argv = append(argv, "-f")
		}
	default:
		return nil, fmt.Errorf("cannot format %s: unsupported filesystem %q", device, fsType)
	}
	return append(argv, device), nil
}
