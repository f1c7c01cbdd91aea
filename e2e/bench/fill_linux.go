package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Section 9 fills a parent with up to 10,000 volumes before it measures
// anything. Made by `zfs create`, that takes most of an hour under TCG: each
// create is a process that loads libzfs, and the guest's two CPUs run 32 of
// them. createByIoctl makes the same dataset with the one ioctl zfs create
// ends in (ZFS_IOC_CREATE, as lzc_create sends it), from the bench's own
// process; many at once share each transaction group. What is measured
// afterwards (listings, the reaper) reads the datasets, not how they were
// made: growth checks the first one against the local properties zfs create
// gave the template (fillsAsCreated) and falls back to zfs create if they
// differ.

// zfsIocCreate is ZFS_IOC_CREATE, ('Z' << 8) + 0x17 (include/sys/fs/zfs.h,
// the same in OpenZFS 2.1 and 2.3).
const zfsIocCreate = 0x5a17

// zfs_cmd_t offsets (ownership.go): zc_name[4096], then zc_nvlist_src and
// zc_nvlist_src_size.
const (
	zcName          = 4096
	zcNvlistSrc     = 4096
	zcNvlistSrcSize = 4096 + 8
	dmuOstZFS       = 2 // DMU_OST_ZFS, a filesystem
)

// property is one local property of the template volume, as zfs get -p
// prints it.
type property struct{ name, value string }

// createByIoctl makes the filesystem name with these local properties.
func createByIoctl(name string, props []property) error {
	if len(name) >= zcName {
		return fmt.Errorf("%s: name too long", name)
	}
	packed, err := createRequest(props)
	if err != nil {
		return err
	}
	dev, err := os.OpenFile("/dev/zfs", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer dev.Close()
	cmd := make([]byte, zcSize)
	copy(cmd, name)
	binary.LittleEndian.PutUint64(cmd[zcNvlistSrc:], uint64(uintptr(unsafe.Pointer(&packed[0]))))
	binary.LittleEndian.PutUint64(cmd[zcNvlistSrcSize:], uint64(len(packed)))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, dev.Fd(), zfsIocCreate, uintptr(unsafe.Pointer(&cmd[0])))
	runtime.KeepAlive(packed)
	if errno != 0 {
		return fmt.Errorf("ZFS_IOC_CREATE %s: %w", name, errno)
	}
	return nil
}

// compressionIndex is the kernel's number for each compression value
// (enum zio_compress, include/sys/zio_compress.h, the same in OpenZFS 2.1
// and 2.3): index properties go to the ioctl as numbers, and the
// StorageClass parameters the bench's template gets set compression.
var compressionIndex = map[string]uint64{"on": 1, "off": 2, "lzjb": 3, "zle": 14, "lz4": 15, "zstd": 16}

// createRequest packs lzc_create's arguments, {type: DMU_OST_ZFS, props:
// {…}}, as a native nvlist (nvlist_pack NV_ENCODE_NATIVE: the layout
// zfs/nvlist.go decodes). User properties and mountpoint are strings,
// compression its index, the others numbers (zfs get -p); anything else is
// refused, not guessed.
func createRequest(props []property) ([]byte, error) {
	var list nvEncoder
	for _, p := range props {
		index, isIndex := compressionIndex[p.value]
		switch {
		case strings.Contains(p.name, ":") || p.name == "mountpoint":
			list.str(p.name, p.value)
		case p.name == "compression" && isIndex:
			list.uint64(p.name, index)
		default:
			n, err := strconv.ParseUint(p.value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("property %s=%s: neither a string property nor a number", p.name, p.value)
			}
			list.uint64(p.name, n)
		}
	}
	var top nvEncoder
	top.int32("type", dmuOstZFS)
	top.list("props", &list)
	return append([]byte{0, 1, 0, 0}, top.bytes(true)...), nil
}

// nvEncoder builds one list's pairs (and embedded lists after their pair).
type nvEncoder struct{ buf []byte }

const (
	nvTypeInt32  = 5
	nvTypeUint64 = 8
	nvTypeString = 9
	nvTypeNVList = 19
	nvUniqueName = 1 // NV_UNIQUE_NAME
)

func align8(n int) int { return (n + 7) &^ 7 }

// pair appends a pair's header and name, and value padded to 8 bytes.
func (e *nvEncoder) pair(name string, dataType int32, elements int32, value []byte) {
	nameSize := len(name) + 1
	valueAt := align8(16 + nameSize)
	size := valueAt + align8(len(value))
	p := make([]byte, size)
	binary.LittleEndian.PutUint32(p[0:], uint32(size))
	binary.LittleEndian.PutUint16(p[4:], uint16(nameSize))
	binary.LittleEndian.PutUint32(p[8:], uint32(elements))
	binary.LittleEndian.PutUint32(p[12:], uint32(dataType))
	copy(p[16:], name)
	copy(p[valueAt:], value)
	e.buf = append(e.buf, p...)
}

func (e *nvEncoder) int32(name string, v int32) {
	e.pair(name, nvTypeInt32, 1, binary.LittleEndian.AppendUint32(nil, uint32(v)))
}

func (e *nvEncoder) uint64(name string, v uint64) {
	e.pair(name, nvTypeUint64, 1, binary.LittleEndian.AppendUint64(nil, v))
}

func (e *nvEncoder) str(name, v string) { e.pair(name, nvTypeString, 1, append([]byte(v), 0)) }

// list appends an embedded list: its nvlist_t (version 0, flags, a zeroed
// pointer, flag, pad: 24 bytes) as the pair's value, then its pairs and end.
func (e *nvEncoder) list(name string, embedded *nvEncoder) {
	value := make([]byte, 24)
	binary.LittleEndian.PutUint32(value[4:], nvUniqueName)
	e.pair(name, nvTypeNVList, 1, value)
	e.buf = append(e.buf, embedded.bytes(false)...)
}

// bytes is the list as packed: for the top list its version and flags
// first; then the pairs and the 4-byte zero that ends a list.
func (e *nvEncoder) bytes(top bool) []byte {
	var out []byte
	if top {
		out = binary.LittleEndian.AppendUint32(out, 0)
		out = binary.LittleEndian.AppendUint32(out, nvUniqueName)
	}
	out = append(out, e.buf...)
	return binary.LittleEndian.AppendUint32(out, 0)
}
