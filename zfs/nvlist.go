package zfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The decoder of ZFS's packed nvlists, as the kernel answers ioctls on
// /dev/zfs (ZFS_IOC_OBJSET_STATS, inspect.go). The encoding is the native
// one of nvlist_pack(NV_ENCODE_NATIVE), module/nvpair/nvpair.c (the same in
// OpenZFS 2.1 and 2.3):
//
//   - a 4-byte header: encoding (0, native), endianness (1, little), two
//     reserved bytes; then the list's version (int32, NV_VERSION 0) and
//     flags (int32);
//   - the pairs, each the nvpair_t as it lies in memory: its size (int32,
//     the whole pair, a multiple of 8), the length of its name with the NUL
//     (int16), a reserved int16, its element count and data type (int32
//     each), the name, padding to 8 bytes, and the value;
//   - a 4-byte zero after the last pair of a list.
//
// An embedded list's pair holds an nvlist_t (version, flags, a zeroed
// pointer, …) as its value, and the list's own pairs and zero follow the
// pair; an array of lists likewise, its lists one after the other. Only what
// ZFS's answers carry that the driver reads is decoded (strings, 64-bit
// numbers, booleans, lists); other values are skipped by their pair's size.
// Anything that does not follow the encoding is errNVList: the caller falls
// back to the zfs command, it never guesses.

// nvList is a decoded list: its values by name, each a string, a uint64, an
// int64, a bool, an nvList, or nvSkipped.
type nvList map[string]any

// nvSkipped stands for a value of a type this decoder does not read.
type nvSkipped struct{ dataType int32 }

// errNVList is a packed nvlist this decoder cannot read.
var errNVList = errors.New("malformed packed nvlist")

const (
	nvEncodeNative  = 0
	nvLittleEndian  = 1
	nvVersion       = 0
	nvHeaderSize    = 4 + 8 // stream header, then version and flags
	nvPairHeader    = 16
	nvListSize      = 24 // nvlist_t: version, flags, priv pointer, flag, pad
	nvTypeBoolean   = 1  // DATA_TYPE_BOOLEAN: a name without a value
	nvTypeInt64     = 7  // DATA_TYPE_INT64
	nvTypeUint64    = 8  // DATA_TYPE_UINT64
	nvTypeString    = 9  // DATA_TYPE_STRING
	nvTypeNVList    = 19 // DATA_TYPE_NVLIST
	nvTypeNVListArr = 20 // DATA_TYPE_NVLIST_ARRAY
	nvTypeBoolValue = 21 // DATA_TYPE_BOOLEAN_VALUE
	nvTypeLast      = 27 // DATA_TYPE_DOUBLE, the last type nvpair.h knows
	nvMaxDepth      = 16
)

// decodeNVList decodes a whole packed native nvlist, refusing anything
// after its end.
func decodeNVList(packed []byte) (nvList, error) { return decodeNVListOf(packed, nil) }

// decodeNVListOf is decodeNVList keeping, of the outer list, only the pairs
// named in keep (all when keep is nil). The others are checked as strictly
// (sizes, names, types, their embedded lists) but nothing of them is kept,
// and a name of theirs given twice is not looked for: an answer of
// ZFS_IOC_OBJSET_STATS holds some 60 properties, of which Inspect reads
// eight or so, and decoding them all was most of its cost in the guest.
func decodeNVListOf(packed []byte, keep map[string]bool) (nvList, error) {
	if len(packed) < nvHeaderSize || packed[0] != nvEncodeNative || packed[1] != nvLittleEndian {
		return nil, fmt.Errorf("%w: header % x", errNVList, packed[:min(len(packed), 4)])
	}
	if version := int32(binary.LittleEndian.Uint32(packed[4:])); version != nvVersion {
		return nil, fmt.Errorf("%w: version %d", errNVList, version)
	}
	d := nvDecoder{data: packed, at: nvHeaderSize, keep: keep}
	list, err := d.pairs(0, false)
	if err != nil {
		return nil, err
	}
	if d.at != len(packed) {
		return nil, d.fail("%d bytes after the end of the list", len(packed)-d.at)
	}
	return list, nil
}

type nvDecoder struct {
	data []byte
	at   int
	keep map[string]bool // the outer list's pairs to keep; nil: all
}

// failAt is fail for the value of a pair, named in the message.
func (d *nvDecoder) failAt(pair []byte, format string, args ...any) error {
	nameSize := int(binary.LittleEndian.Uint16(pair[4:]))
	return d.fail("%s: %s", pair[nvPairHeader:nvPairHeader+nameSize-1], fmt.Sprintf(format, args...))
}

func (d *nvDecoder) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", errNVList, d.at, fmt.Sprintf(format, args...))
}

// pairs decodes pairs up to the list's terminating zero; discard checks
// them and keeps nothing (the list is nil).
func (d *nvDecoder) pairs(depth int, discard bool) (nvList, error) {
	if depth > nvMaxDepth {
		return nil, d.fail("lists nested deeper than %d", nvMaxDepth)
	}
	var list nvList
	if !discard {
		list = nvList{}
	}
	for {
		if d.at+4 > len(d.data) {
			return nil, d.fail("no end of list")
		}
		size := int(int32(binary.LittleEndian.Uint32(d.data[d.at:])))
		if size == 0 {
			d.at += 4
			return list, nil
		}
		if size < nvPairHeader+8 || size%8 != 0 || size > len(d.data)-d.at {
			return nil, d.fail("pair size %d", size)
		}
		pair := d.data[d.at : d.at+size]
		rawName, err := d.pairName(pair)
		if err != nil {
			return nil, err
		}
		skip := discard || (depth == 0 && d.keep != nil && !d.keep[string(rawName)])
		name := ""
		if !skip {
			if name, err = d.newName(list, rawName); err != nil {
				return nil, err
			}
		}
		d.at += size
		if err := d.value(list, name, pair, depth, skip); err != nil {
			return nil, err
		}
	}
}

// pairName checks one pair's header and name and returns the name's bytes.
func (d *nvDecoder) pairName(pair []byte) ([]byte, error) {
	nameSize := int(binary.LittleEndian.Uint16(pair[4:]))
	valueAt := (nvPairHeader + nameSize + 7) &^ 7
	if nameSize < 2 || valueAt > len(pair) || pair[nvPairHeader+nameSize-1] != 0 {
		return nil, d.fail("name of %d bytes in a pair of %d", nameSize, len(pair))
	}
	name := pair[nvPairHeader : nvPairHeader+nameSize-1]
	if bytes.IndexByte(name, 0) >= 0 {
		return nil, d.fail("name %q holds a NUL", name)
	}
	return name, nil
}

// newName is a kept pair's name, which its list must not hold already.
func (d *nvDecoder) newName(list nvList, raw []byte) (string, error) {
	name := string(raw)
	if _, twice := list[name]; twice {
		return "", d.fail("%s twice in one list", name)
	}
	return name, nil
}

// value decodes the value of the pair named name into list, or with
// discard only checks it; an embedded list's pairs are read from the stream
// after the pair.
//
// long: one case a data type of the nvpair switch
func (d *nvDecoder) value(list nvList, name string, pair []byte, depth int, discard bool) error {
	elements := int32(binary.LittleEndian.Uint32(pair[8:]))
	dataType := int32(binary.LittleEndian.Uint32(pair[12:]))
	nameSize := int(binary.LittleEndian.Uint16(pair[4:]))
	value := pair[(nvPairHeader+nameSize+7)&^7:]
	scalar := func(size int) error {
		if elements != 1 || len(value) < size {
			return d.failAt(pair, "%d elements in %d bytes", elements, len(value))
		}
		return nil
	}
	switch dataType {
	case nvTypeBoolean:
		if elements != 0 {
			return d.failAt(pair, "a boolean with %d elements", elements)
		}
		if !discard {
			list[name] = true
		}
	case nvTypeBoolValue:
		if err := scalar(4); err != nil {
			return err
		}
		if !discard {
			list[name] = binary.LittleEndian.Uint32(value) != 0
		}
	case nvTypeUint64:
		if err := scalar(8); err != nil {
			return err
		}
		if !discard {
			list[name] = binary.LittleEndian.Uint64(value)
		}
	case nvTypeInt64:
		if err := scalar(8); err != nil {
			return err
		}
		if !discard {
			list[name] = int64(binary.LittleEndian.Uint64(value))
		}
	case nvTypeString:
		if err := scalar(1); err != nil {
			return err
		}
		end := 0
		for end < len(value) && value[end] != 0 {
			end++
		}
		if end == len(value) {
			return d.failAt(pair, "string without its NUL")
		}
		if !discard {
			list[name] = string(value[:end])
		}
	case nvTypeNVList:
		if err := scalar(nvListSize); err != nil {
			return err
		}
		if version := int32(binary.LittleEndian.Uint32(value)); version != nvVersion {
			return d.failAt(pair, "embedded list of version %d", version)
		}
		embedded, err := d.pairs(depth+1, discard)
		if err != nil {
			return err
		}
		if !discard {
			list[name] = embedded
		}
	case nvTypeNVListArr:
		// Not read, but its lists follow the pair and must be passed.
		if elements < 0 || len(value) < int(elements)*(8+nvListSize) {
			return d.failAt(pair, "%d lists in %d bytes", elements, len(value))
		}
		for range elements {
			if _, err := d.pairs(depth+1, true); err != nil {
				return err
			}
		}
		if !discard {
			list[name] = nvSkipped{dataType}
		}
	default:
		if dataType < nvTypeBoolean || dataType > nvTypeLast {
			return d.failAt(pair, "unknown data type %d", dataType)
		}
		if !discard {
			list[name] = nvSkipped{dataType}
		}
	}
	return nil
}
