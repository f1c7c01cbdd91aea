package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A prototype of issue 37 item 2: NodeStageVolume's one zfs command is the
// ownership read (zfs list of the volume with the driver's properties),
// and a process start costs ~145 ms in the emulated guest. ZFS answers the
// same question without a process through the ioctl zfs itself uses,
// ZFS_IOC_OBJSET_STATS on /dev/zfs, which returns every property of the
// dataset, user properties among them, as a packed nvlist. The prototype
// times that ioctl with the decoding of its answer (nvlist.go) and the
// check the driver makes: the managed mark set, no deleted mark.

// zfsIocObjsetStats is ZFS_IOC_OBJSET_STATS ('Z' << 8 + 0x12, include/sys/fs/zfs.h).
const zfsIocObjsetStats = 0x5a12

// zfs_cmd_t starts with zc_name[MAXPATHLEN], then zc_nvlist_src and its
// size, zc_nvlist_dst and its size (uint64 each); the whole struct is below
// 16 KiB in the OpenZFS 2.x releases.
const (
	zcNvlistDst     = 4096 + 16
	zcNvlistDstSize = 4096 + 24
	zcSize          = 16 << 10
)

// objsetStats reads a dataset's properties by ioctl on an open /dev/zfs.
func objsetStats(zfsDevice int, dataset string) ([]byte, error) {
	cmd := make([]byte, zcSize)
	copy(cmd, dataset)
	dst := make([]byte, 64<<10)
	binary.LittleEndian.PutUint64(cmd[zcNvlistDst:], uint64(uintptr(unsafe.Pointer(&dst[0]))))
	binary.LittleEndian.PutUint64(cmd[zcNvlistDstSize:], uint64(len(dst)))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(zfsDevice), zfsIocObjsetStats, uintptr(unsafe.Pointer(&cmd[0])))
	runtime.KeepAlive(dst)
	if errno != 0 {
		return nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %w", dataset, errno)
	}
	size := binary.LittleEndian.Uint64(cmd[zcNvlistDstSize:])
	if size > uint64(len(dst)) {
		return nil, fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: %d bytes", dataset, size)
	}
	return dst[:size], nil
}

// ownershipReads times NodeStageVolume's zfs list of a volume (as section 6
// captured it) beside the ioctl, interleaved, rounds times.
func (b *bench) ownershipReads(ctx context.Context, kind, dataset string, rounds int) (row, error) {
	what := "NodeStage " + kind + ": its ownership read (zfs list) vs prototype: the ioctl zfs uses, in-process"
	list, ok := b.templates["stage-list "+kind]
	if !ok {
		return row{}, fmt.Errorf("section 6 captured no zfs list of NodeStageVolume %s", kind)
	}
	device, err := unix.Open("/dev/zfs", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return row{}, err
	}
	defer unix.Close(device)
	var exec, ioctl samples
	for i := range rounds {
		err := interleave(i, nil, func() (time.Duration, error) {
			took, _, err := run(ctx, append([]string{b.tools.zfs}, list.with(nil, dataset)...)...)
			return took, err
		}, func() (time.Duration, error) {
			start := time.Now()
			out, err := objsetStats(device, dataset)
			live := false
			if err == nil {
				live, err = b.liveVolume(out)
			}
			took := time.Since(start)
			if err == nil && !live {
				err = fmt.Errorf("ZFS_IOC_OBJSET_STATS %s: not a live volume by its properties", dataset)
			}
			if err == nil && i == 0 && b.cfg.out != "" {
				// What ZFS answered, for a decoder's tests.
				err = os.WriteFile(filepath.Join(filepath.Dir(b.cfg.out), "objset-stats-"+strings.ReplaceAll(kind, " ", "-")+".bin"), out, 0o644)
			}
			return took, err
		}, &exec, &ioctl)
		if err != nil {
			return row{}, err
		}
	}
	r := compare("4", what, exec, ioctl, 0)
	r.commands = "1: list / 0"
	return r, nil
}

// liveVolume decodes ZFS_IOC_OBJSET_STATS's answer and applies the driver's
// rule: the managed mark is "true" and there is no deleted mark. Each
// property is a list of its value and its source.
func (b *bench) liveVolume(packed []byte) (bool, error) {
	properties, err := decodeNVList(packed)
	if err != nil {
		return false, err
	}
	value := func(name string) (string, bool) {
		property, ok := properties[name].(nvlist)
		if !ok {
			return "", false
		}
		text, ok := property["value"].(string)
		return text, ok
	}
	managed, _ := value(b.props.Managed)
	_, deleted := value(b.props.Deleted)
	return managed == "true" && !deleted, nil
}
