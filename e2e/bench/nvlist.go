package main

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The ownership prototype's decoder (ownership.go). The kernel answers
// ioctls on /dev/zfs with packed nvlists in the native
// encoding (nvlist_pack(NV_ENCODE_NATIVE), module/nvpair/nvpair.c): a
// 4-byte header (encoding 0, endianness, two reserved bytes), the list's
// version and flags (two int32), then its pairs, and a 4-byte zero at the
// end of the list. A pair is its size (int32, the whole pair, 8-byte
// aligned), the length of its name with the NUL (int16), a reserved int16,
// its element count and type (int32 each), the name, padding to 8 bytes,
// and the value. An embedded list's pair holds a zeroed nvlist_t; its own
// pairs and their zero follow the pair. Only what the driver reads is
// decoded (strings, 64-bit numbers, booleans, embedded lists); other pairs
// are skipped by their size.

// nvlist is a decoded list: string, uint64, bool or nvlist values by name.
type nvlist map[string]any

// errNVList is a packed nvlist this decoder cannot read.
var errNVList = errors.New("malformed packed nvlist")

const (
	nvEncodeNative  = 0
	nvLittleEndian  = 1
	nvHeaderSize    = 4 + 8 // stream header, then version and flags
	nvPairHeader    = 16
	nvTypeBoolean   = 1  // DATA_TYPE_BOOLEAN: a name without a value
	nvTypeInt64     = 7  // DATA_TYPE_INT64
	nvTypeUint64    = 8  // DATA_TYPE_UINT64
	nvTypeString    = 9  // DATA_TYPE_STRING
	nvTypeNVList    = 19 // DATA_TYPE_NVLIST
	nvTypeNVListArr = 20 // DATA_TYPE_NVLIST_ARRAY
	nvTypeBoolValue = 21 // DATA_TYPE_BOOLEAN_VALUE
	nvMaxDepth      = 8
)

// decodeNVList decodes a packed native nvlist from a little-endian host.
func decodeNVList(packed []byte) (nvlist, error) {
	if len(packed) < nvHeaderSize || packed[0] != nvEncodeNative || packed[1] != nvLittleEndian {
		return nil, fmt.Errorf("%w: header % x", errNVList, packed[:min(len(packed), 4)])
	}
	d := nvDecoder{data: packed, at: nvHeaderSize}
	list, err := d.pairs(0)
	if err != nil {
		return nil, err
	}
	return list, nil
}

type nvDecoder struct {
	data []byte
	at   int
}

func (d *nvDecoder) fail(format string, args ...any) error {
	return fmt.Errorf("%w: at byte %d: %s", errNVList, d.at, fmt.Sprintf(format, args...))
}

// pairs decodes pairs up to the list's terminating zero.
func (d *nvDecoder) pairs(depth int) (nvlist, error) {
	if depth > nvMaxDepth {
		return nil, d.fail("lists nested deeper than %d", nvMaxDepth)
	}
	list := nvlist{}
	for {
		if d.at+4 > len(d.data) {
			return nil, d.fail("no end of list")
		}
		size := int(int32(binary.LittleEndian.Uint32(d.data[d.at:])))
		if size == 0 {
			d.at += 4
			return list, nil
		}
		if size < nvPairHeader || size%8 != 0 || d.at+size > len(d.data) {
			return nil, d.fail("pair size %d", size)
		}
		pair := d.data[d.at : d.at+size]
		nameSize := int(binary.LittleEndian.Uint16(pair[4:]))
		elements := int(int32(binary.LittleEndian.Uint32(pair[8:])))
		kind := int32(binary.LittleEndian.Uint32(pair[12:]))
		valueAt := (nvPairHeader + nameSize + 7) &^ 7
		if nameSize < 1 || valueAt > size || pair[nvPairHeader+nameSize-1] != 0 {
			return nil, d.fail("name of %d bytes in a pair of %d", nameSize, size)
		}
		name := string(pair[nvPairHeader : nvPairHeader+nameSize-1])
		value := pair[valueAt:]
		d.at += size
		switch kind {
		case nvTypeBoolean:
			list[name] = true
		case nvTypeBoolValue:
			if len(value) < 4 {
				return nil, d.fail("%s: boolean of %d bytes", name, len(value))
			}
			list[name] = binary.LittleEndian.Uint32(value) != 0
		case nvTypeUint64, nvTypeInt64:
			if len(value) < 8 {
				return nil, d.fail("%s: number of %d bytes", name, len(value))
			}
			list[name] = binary.LittleEndian.Uint64(value)
		case nvTypeString:
			end := 0
			for end < len(value) && value[end] != 0 {
				end++
			}
			if end == len(value) {
				return nil, d.fail("%s: string without its NUL", name)
			}
			list[name] = string(value[:end])
		case nvTypeNVList:
			embedded, err := d.pairs(depth + 1)
			if err != nil {
				return nil, err
			}
			list[name] = embedded
		case nvTypeNVListArr:
			// Skipped, but its lists follow the pair and must be passed.
			for range elements {
				if _, err := d.pairs(depth + 1); err != nil {
					return nil, err
				}
			}
		}
	}
}
