package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// NodeStageVolume's ownership read is zfs.Exec.Inspect:
// ZFS_IOC_OBJSET_STATS on /dev/zfs, the ioctl zfs list itself makes, its
// answer decoded in-process, and a zfs list only when that cannot answer.
// Section 4 times the driver's read (the zfs package's Inspect, the code the
// daemon runs) against its bare side, the same ioctl made once on an open
// /dev/zfs with nothing decoded, the cheapest way to ask ZFS; and the
// zfs list that NodeStageVolume ran before (zfs.GetWithKeyStatus, the
// fallback's argv) against the driver's read, to show what the exec cost.

// zfsIocObjsetStats is ZFS_IOC_OBJSET_STATS ('Z' << 8 + 0x12, include/sys/fs/zfs.h).
const zfsIocObjsetStats = 0x5a12

// zfs_cmd_t starts with zc_name[MAXPATHLEN], then zc_nvlist_src and its
// size, zc_nvlist_dst and its size (uint64 each); the whole struct is
// 13,744 bytes in OpenZFS 2.1.11 and 2.3.
const (
	zcNvlistDst     = 4096 + 16
	zcNvlistDstSize = 4096 + 24
	zcSize          = 16 << 10
)

// objsetStats is the bare ioctl on an open /dev/zfs: the answer's bytes,
// not decoded.
func objsetStats(zfsDevice int, dataset string, cmd, dst []byte) error {
	clear(cmd)
	copy(cmd, dataset)
	binary.LittleEndian.PutUint64(cmd[zcNvlistDst:], uint64(uintptr(unsafe.Pointer(&dst[0]))))
	binary.LittleEndian.PutUint64(cmd[zcNvlistDstSize:], uint64(len(dst)))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(zfsDevice), zfsIocObjsetStats, uintptr(unsafe.Pointer(&cmd[0])))
	runtime.KeepAlive(dst)
	if errno != 0 {
		return fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w", dataset, errno)
	}
	if size := binary.LittleEndian.Uint64(cmd[zcNvlistDstSize:]); size > uint64(len(dst)) {
		return fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %d bytes", dataset, size)
	}
	return nil
}

// ownershipReads times NodeStageVolume's ownership read of a volume: the
// driver's (zfs.Exec.Inspect) against the bare ioctl, and the zfs list it
// replaced against the driver's, interleaved, rounds times. A round whose
// Inspect ran a zfs command (it fell back) or did not find a live volume
// is an error: the row would not be measuring the fast path.
func (b *bench) ownershipReads(ctx context.Context, kind, dataset string, rounds int) ([]row, error) {
	var commands atomic.Int32
	z := zfs.NewExec(zfs.ExecConfig{ZFSPath: b.tools.zfs, ZpoolPath: b.tools.zpool,
		OnCommand: func(string, time.Duration, error) { commands.Add(1) }})
	device, err := unix.Open("/dev/zfs", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(device)
	// dst's address goes to the kernel inside cmd, where the compiler
	// cannot see it: a size known only at run time keeps it on the heap,
	// which does not move (a stack could).
	cmd, dst := make([]byte, zcSize), make([]byte, 64<<10+len(dataset))
	props := b.props.All()
	var inspect, ioctl, opened, handedOff, list samples
	for i := range rounds {
		err := interleaveSides(i, nil, []side{
			{func() (time.Duration, error) {
				commands.Store(0)
				start := time.Now()
				row, err := z.Inspect(ctx, dataset, props)
				took := time.Since(start)
				switch {
				case err != nil:
					return took, err
				case commands.Load() != 0:
					return took, fmt.Errorf("zfs.Exec.Inspect of %s fell back to zfs list", dataset)
				case row.User[b.props.Managed] != "true" || row.User[b.props.Deleted] != "":
					return took, fmt.Errorf("zfs.Exec.Inspect of %s: not a live volume by its properties: %v", dataset, row.User)
				}
				return took, nil
			}, &inspect, true},
			{func() (time.Duration, error) {
				start := time.Now()
				err := objsetStats(device, dataset, cmd, dst)
				return time.Since(start), err
			}, &ioctl, false},
			{func() (time.Duration, error) {
				start := time.Now()
				device, err := unix.Open("/dev/zfs", unix.O_RDWR|unix.O_CLOEXEC, 0)
				if err != nil {
					return time.Since(start), err
				}
				err = objsetStats(device, dataset, cmd, dst)
				unix.Close(device)
				return time.Since(start), err
			}, &opened, false},
			{func() (time.Duration, error) {
				start := time.Now()
				done := make(chan error, 1)
				go func() { done <- objsetStats(device, dataset, cmd, dst) }()
				err := <-done
				return time.Since(start), err
			}, &handedOff, false},
			{func() (time.Duration, error) {
				start := time.Now()
				_, err := zfs.GetWithKeyStatus(ctx, z, dataset, props)
				return time.Since(start), err
			}, &list, false},
		}, nil)
		if err != nil {
			return nil, err
		}
	}
	read := compare("4", "NodeStage "+kind+": its ownership read in-process (zfs.Exec.Inspect) vs the bare ioctl, nothing decoded", inspect, ioctl, 1.10)
	read.commands = "0 / 0"
	open := compare("4", "NodeStage "+kind+": its ownership read in-process vs the bare ioctl on /dev/zfs opened for it", inspect, opened, 1.10)
	open.commands = "0 / 0"
	goroutine := compare("4", "NodeStage "+kind+": its ownership read in-process vs the bare ioctl in a goroutine waited for", inspect, handedOff, 1.10)
	goroutine.commands = "0 / 0"
	before := compare("4", "NodeStage "+kind+": the zfs list it ran before (its fallback) vs its in-process read", list, inspect, 0)
	before.commands = "1: list / 0"
	return []row{read, open, goroutine, before}, nil
}
