package zfs

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"testing"
)

// A zfs_cmd_t as the kernel hands it back, with zc_objset_stats filled at
// the offsets a C compiler gives dmu_objset_stats_t in it (computed with gcc
// from include/sys/zfs_ioctl.h of OpenZFS 2.1.11 and 2.3.2: the struct is
// 13,744 bytes, zc_objset_stats at 12,704).
func TestTheStatsAreReadWhereTheKernelPutsThem(t *testing.T) {
	cmd := make([]byte, zfsCmdSize)
	binary.LittleEndian.PutUint64(cmd[12704:], 2)      // dds_num_clones
	binary.LittleEndian.PutUint64(cmd[12712:], 0x206)  // dds_creation_txg
	binary.LittleEndian.PutUint64(cmd[12720:], 0xfeed) // dds_guid
	binary.LittleEndian.PutUint32(cmd[12728:], objsetTypeZvol)
	cmd[12732], cmd[12733], cmd[12734] = 0, 1, 0 // is_snapshot, inconsistent, redacted
	copy(cmd[12735:], "tank/csi/a@s\x00")
	binary.LittleEndian.PutUint64(cmd[12992:], 0x2f5b1d1d) // zc_begin_record's magic, after the stats
	packed := []byte("a packed list and the rest of the buffer")
	binary.LittleEndian.PutUint64(cmd[4120:], 13) // zc_nvlist_dst_size: what the kernel wrote
	stats, answer, err := objsetAnswer("tank/csi/b", cmd, packed)
	want := objsetStats{creationTxg: 0x206, guid: 0xfeed, objsetType: objsetTypeZvol, inconsistent: true, origin: "tank/csi/a@s"}
	if err != nil || stats != want || string(answer) != "a packed list" {
		t.Errorf("read %+v, %q, %v; want %+v, %q", stats, answer, err, want, "a packed list")
	}
	binary.LittleEndian.PutUint64(cmd[4120:], uint64(len(packed)+1))
	if _, _, err := objsetAnswer("tank/csi/b", cmd, packed); !errors.Is(err, errObjsetMisfit) {
		t.Errorf("an answer larger than its buffer: %v", err)
	}
	binary.LittleEndian.PutUint64(cmd[4120:], 13)
	cmd[12732] = 2
	if _, _, err := objsetAnswer("tank/csi/b", cmd, packed); !errors.Is(err, errObjsetMisfit) {
		t.Errorf("a snapshot flag of 2: %v", err)
	}
	cmd[12732] = 0
	for i := range 256 {
		cmd[12735+i] = 'x'
	}
	if _, _, err := objsetAnswer("tank/csi/b", cmd, packed); !errors.Is(err, errObjsetMisfit) {
		t.Errorf("an origin without its NUL: %v", err)
	}
}

// Without /dev/zfs (this host's kernel has no ZFS) the read fails in a way
// Inspect falls back on; with it, a pool that does not exist is ENOENT,
// which is ErrNotFound, as zfs list says it.
func TestTheIoctlWithoutZFSIsNoAnswer(t *testing.T) {
	_, _, err := readObjsetStats(t.Context(), "zfscsinosuchpool/volume")
	if _, statErr := os.Stat(zfsDevice); errors.Is(statErr, fs.ErrNotExist) {
		if err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("without %s: %v, want an error other than ErrNotFound", zfsDevice, err)
		}
		return
	}
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("a pool that does not exist: %v, want ErrNotFound", err)
	}
}
