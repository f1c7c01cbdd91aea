package node

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestFormatArgs(t *testing.T) {
	for _, test := range []struct {
		name      string
		fsType    string
		overwrite bool
		want      string
	}{
		{"ext4 keeps no blocks for root and does not force", "ext4", false, "mkfs.ext4 -q -m 0 -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 /dev/zd0"},
		{"ext4 over an unfinished one forces", "ext4", true, "mkfs.ext4 -q -m 0 -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 -F /dev/zd0"},
		{"xfs does not force", "xfs", false, "mkfs.xfs -q -K /dev/zd0"},
		{"xfs over an unfinished one forces", "xfs", true, "mkfs.xfs -q -K -f /dev/zd0"},
		{"btrfs does not force", "btrfs", false, "mkfs.btrfs -q -K /dev/zd0"},
	} {
		t.Run(test.name, func(t *testing.T) {
			argv, err := formatArgs(test.fsType, "/dev/zd0", test.overwrite)
			if err != nil || strings.Join(argv, " ") != test.want {
				t.Errorf("got %q, %v; want %q", argv, err, test.want)
			}
		})
	}
	if _, err := formatArgs("ntfs", "/dev/zd0", false); err == nil {
		t.Error("an unknown filesystem has a command")
	}
}

// superblockAt returns a device image of size bytes with a superblock
// written by fill at offset.
func superblockAt(offset, size int, fill func(sb []byte)) []byte {
	image := make([]byte, size)
	fill(image[offset:])
	return image
}

func TestParseSuperblocks(t *testing.T) {
	xfs := func(inProgress byte) func([]byte) {
		return func(sb []byte) {
			copy(sb, "XFSB")
			binary.BigEndian.PutUint32(sb[4:], 4096)
			binary.BigEndian.PutUint64(sb[8:], 81920)
			sb[126] = inProgress
		}
	}
	btrfs := func(magic []byte) func([]byte) {
		return func(sb []byte) {
			copy(sb[0x40:], magic)
			binary.LittleEndian.PutUint64(sb[0x70:], 640<<20)
		}
	}
	ext4 := func(sb []byte) {
		binary.LittleEndian.PutUint32(sb[0x04:], 16384)
		binary.LittleEndian.PutUint32(sb[0x18:], 2)
		binary.LittleEndian.PutUint16(sb[0x38:], 0xEF53)
	}
	for _, test := range []struct {
		name   string
		fsType string
		image  []byte
		want   Superblock
		fails  bool
	}{
		{"a finished XFS", "xfs", superblockAt(0, 4096, xfs(0)), Superblock{Size: 320 << 20, Complete: true}, false},
		{"an XFS whose mkfs was cut off", "xfs", superblockAt(0, 4096, xfs(1)), Superblock{Size: 320 << 20}, false},
		{"a finished btrfs", "btrfs", superblockAt(64<<10, 72<<10, btrfs(btrfsMagic)), Superblock{Size: 640 << 20, Complete: true}, false},
		{"a btrfs whose mkfs was cut off", "btrfs", superblockAt(64<<10, 72<<10, btrfs(btrfsTemporaryMagic)), Superblock{Size: 640 << 20}, false},
		{"an ext4", "ext4", superblockAt(1024, 4096, ext4), Superblock{Size: 64 << 20, Complete: true}, false},
		{"zeros are no ext4", "ext4", make([]byte, 4096), Superblock{}, true},
		{"zeros are no XFS", "xfs", make([]byte, 4096), Superblock{}, true},
		{"zeros are no btrfs", "btrfs", make([]byte, 72<<10), Superblock{}, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "device")
			if err := os.WriteFile(path, test.image, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readSuperblock(path, test.fsType)
			if (err != nil) != test.fails || !reflect.DeepEqual(got, test.want) {
				t.Errorf("got %+v, %v; want %+v (fails: %v)", got, err, test.want, test.fails)
			}
		})
	}
}

// TestRealExt4Format formats a file with the real mkfs.ext4 (no loop device
// needed): the superblock reader reads what mke2fs wrote, and no block is
// reserved for root.
func TestRealExt4Format(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("skipped: mkfs.ext4 is not installed")
	}
	path := filepath.Join(t.TempDir(), "device")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 64<<20); err != nil {
		t.Fatal(err)
	}
	argv, err := formatArgs("ext4", path, false)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(argv[0], slices.Concat(argv[1:len(argv)-1], []string{"-F", path})...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out) // -F: mke2fs asks before formatting a regular file
	}
	superblock, err := readSuperblock(path, "ext4")
	if err != nil || superblock != (Superblock{Size: 64 << 20, Complete: true}) {
		t.Errorf("read %+v, %v; want 64 MiB, complete", superblock, err)
	}
	data := make([]byte, 1024)
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := file.ReadAt(data, 1024); err != nil {
		t.Fatal(err)
	}
	if reserved := binary.LittleEndian.Uint32(data[0x08:]); reserved != 0 { // s_r_blocks_count_lo
		t.Errorf("%d blocks reserved for root, want 0", reserved)
	}
}
