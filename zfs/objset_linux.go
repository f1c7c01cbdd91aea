package zfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// zfsDevice is where the ZFS module takes its ioctls.
const zfsDevice = "/dev/zfs"

// zfsIocObjsetStats is ZFS_IOC_OBJSET_STATS: ('Z' << 8) + 0x12 on Linux
// (include/sys/fs/zfs.h, the same in OpenZFS 2.1.11 and 2.3).
const zfsIocObjsetStats = 0x5a12

// Offsets in zfs_cmd_t (include/sys/zfs_ioctl.h), identical in OpenZFS
// 2.1.11 and 2.3 (zc_name[MAXPATHLEN], four uint64 for the nvlists, …,
// zc_share, then zc_objset_stats, a dmu_objset_stats_t: num_clones,
// creation_txg, guid (uint64 each), type (a 4-byte enum), is_snapshot,
// inconsistent, redacted (a byte each), origin[256]), as a C compiler lays
// them out on x86-64 and arm64. The struct is 13,744 bytes; the kernel
// copies exactly that in and out, so zfsCmdSize leaves room for growth.
// Should a release move them, the stats and the property list disagree
// (objsetDataset) and Inspect falls back to zfs list.
const (
	zcNameSize      = 4096
	zcNvlistDst     = 4112
	zcNvlistDstSize = 4120
	zcStats         = 12704
	zcStatsTxg      = zcStats + 8
	zcStatsGUID     = zcStats + 16
	zcStatsType     = zcStats + 24
	zcStatsSnapshot = zcStats + 28
	zcStatsIncons   = zcStats + 29
	zcStatsOrigin   = zcStats + 31
	zcOriginSize    = 256
	zfsCmdSize      = 16 << 10
)

// The answer's buffer: libzfs starts smaller and grows on ENOMEM, as here;
// a dataset's properties take 4 to 5 KiB.
const (
	objsetStatsFirstBuffer = 16 << 10
	objsetStatsMaxBuffer   = 4 << 20
)

// readObjsetStats asks the kernel for a dataset's stats and properties:
// ZFS_IOC_OBJSET_STATS, the ioctl zfs list's zfs_open makes. ENOENT is
// ErrNotFound; other errors are returned as they are (Inspect falls back).
// The ioctl cannot be interrupted: when ctx ends first the call returns the
// context's error and leaves the ioctl to finish on its own, as wait does
// with a zfs command stuck in the kernel.
func readObjsetStats(ctx context.Context, name string) (objsetStats, []byte, error) {
	if len(name) >= zcNameSize {
		return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: name too long", name)
	}
	type answer struct {
		stats  objsetStats
		packed []byte
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		stats, packed, err := objsetStatsIoctl(name)
		done <- answer{stats, packed, err}
	}()
	select {
	case a := <-done:
		return a.stats, a.packed, a.err
	case <-ctx.Done():
		return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w", name, ctx.Err())
	}
}

func objsetStatsIoctl(name string) (objsetStats, []byte, error) {
	device, err := unix.Open(zfsDevice, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS: %w", err)
	}
	defer unix.Close(device)
	cmd := make([]byte, zfsCmdSize)
	for size := objsetStatsFirstBuffer; ; {
		clear(cmd)
		copy(cmd, name)
		// Its address reaches the kernel inside cmd, unseen by the
		// compiler: a size known only at run time keeps it on the heap,
		// which does not move (a goroutine's stack could).
		packed := make([]byte, size)
		binary.NativeEndian.PutUint64(cmd[zcNvlistDst:], uint64(uintptr(unsafe.Pointer(&packed[0]))))
		binary.NativeEndian.PutUint64(cmd[zcNvlistDstSize:], uint64(len(packed)))
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(device), zfsIocObjsetStats, uintptr(unsafe.Pointer(&cmd[0])))
		runtime.KeepAlive(packed)
		answered := binary.NativeEndian.Uint64(cmd[zcNvlistDstSize:])
		switch {
		case errno == unix.ENOENT:
			return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w", name, ErrNotFound)
		case errno == unix.ENOMEM && answered > uint64(size) && answered <= objsetStatsMaxBuffer:
			// put_nvlist says how large the answer is.
			size = int(answered)
			continue
		case errno != 0:
			return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w", name, errno)
		}
		return objsetAnswer(name, cmd, packed)
	}
}

// objsetAnswer reads a successful ioctl's answer: the stats in cmd and the
// packed property list, whose size cmd says. What does not fit the layout
// this code knows is a misfit (Inspect falls back).
func objsetAnswer(name string, cmd, packed []byte) (objsetStats, []byte, error) {
	answered := binary.NativeEndian.Uint64(cmd[zcNvlistDstSize:])
	if answered > uint64(len(packed)) {
		return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w: an answer of %d bytes in %d", name, errObjsetMisfit, answered, len(packed))
	}
	stats, err := parseObjsetStats(cmd)
	if err != nil {
		return objsetStats{}, nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w: %w", name, errObjsetMisfit, err)
	}
	return stats, packed[:answered], nil
}

// parseObjsetStats reads zc_objset_stats out of a zfs_cmd_t.
func parseObjsetStats(cmd []byte) (objsetStats, error) {
	origin := cmd[zcStatsOrigin : zcStatsOrigin+zcOriginSize]
	end := 0
	for end < len(origin) && origin[end] != 0 {
		end++
	}
	if end == len(origin) {
		return objsetStats{}, errors.New("dds_origin without its NUL")
	}
	flag := func(b byte) (bool, error) {
		if b > 1 {
			return false, fmt.Errorf("flag byte %d", b)
		}
		return b == 1, nil
	}
	snapshot, err := flag(cmd[zcStatsSnapshot])
	if err != nil {
		return objsetStats{}, err
	}
	inconsistent, err := flag(cmd[zcStatsIncons])
	if err != nil {
		return objsetStats{}, err
	}
	return objsetStats{
		creationTxg:  binary.NativeEndian.Uint64(cmd[zcStatsTxg:]),
		guid:         binary.NativeEndian.Uint64(cmd[zcStatsGUID:]),
		objsetType:   binary.NativeEndian.Uint32(cmd[zcStatsType:]),
		snapshot:     snapshot,
		inconsistent: inconsistent,
		origin:       string(origin[:end]),
	}, nil
}
