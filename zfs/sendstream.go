package zfs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// A `zfs send` stream is a sequence of 312-byte records (OpenZFS's
// dmu_replay_record_t), some followed by a payload. Of a zvol's stream the
// records of object 1, the zvol's data, say which byte ranges were written
// (WRITE, WRITE_EMBEDDED, WRITE_BYREF) and which were freed (FREE): in a
// full stream what the snapshot holds, in an incremental one what changed
// since its base. ReadStream reads only the records and skips every payload,
// so a stream of any size is read in bounded memory.

// VolumeObject is the object that holds a zvol's data.
const VolumeObject = 1

// ToEnd is a FREE record's length meaning "to the end of the object".
const ToEnd = ^uint64(0)

// ErrStream means a send stream this package cannot read (cut short,
// compound, or with a record it does not know).
var ErrStream = errors.New("unreadable zfs send stream")

// StreamRange is a byte range of the zvol's data that a stream names.
type StreamRange struct {
	Offset, Length uint64 // Length may be ToEnd for a freed range
	Freed          bool
}

const (
	recordSize  = 312
	streamMagic = 0x2F5bacbac
)

// Record types, in the order of OpenZFS's enum.
const (
	drrBegin = iota
	drrObject
	drrFreeObjects
	drrWrite
	drrFree
	drrEnd
	drrWriteByRef
	drrSpill
	drrWriteEmbedded
	drrObjectRange
	drrRedact
)

// Byte offsets in a record: the union starts at 8.
const (
	offPayloadLen      = 4
	offMagic           = 8  // drr_begin.drr_magic
	offVersionInfo     = 16 // drr_begin.drr_versioninfo: low two bits 1 substream, 2 compound
	offObject          = 8  // drr_object, drr_write, drr_free, …: the object number
	offObjectBonusLen  = 28 // drr_object.drr_bonuslen (uint32)
	offObjectRawBonus  = 36 // drr_object.drr_raw_bonuslen (uint32)
	offWriteOffset     = 24 // drr_write.drr_offset
	offWriteLogical    = 32 // drr_write.drr_logical_size
	offWriteCompType   = 50 // drr_write.drr_compressiontype (uint8)
	offWriteCompSize   = 96 // drr_write.drr_compressed_size
	offRangeOffset     = 16 // drr_free, drr_write_byref, drr_write_embedded: offset
	offRangeLength     = 24 // … and length
	offEmbeddedPSize   = 52 // drr_write_embedded.drr_psize (uint32)
	offSpillLength     = 16 // drr_spill.drr_length
	offSpillCompressed = 40 // drr_spill.drr_compressed_size
)

// ReadStream reads a substream (what `zfs send` writes without -R) and
// calls fn for each range of VolumeObject it writes or frees, in stream
// order. It returns fn's first error, or ErrStream for a stream it cannot
// read to its END record.
func ReadStream(r io.Reader, fn func(StreamRange) error) error {
	in := bufio.NewReaderSize(r, 256<<10)
	var record [recordSize]byte
	var order binary.ByteOrder
	for n := 0; ; n++ {
		if _, err := io.ReadFull(in, record[:]); err != nil {
			if n == 0 && errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: empty", ErrStream)
			}
			return fmt.Errorf("%w: cut short after %d records: %v", ErrStream, n, err)
		}
		if n == 0 {
			var ok bool
			if order, ok = streamOrder(record[:]); !ok {
				return fmt.Errorf("%w: no BEGIN record", ErrStream)
			}
		}
		kind := order.Uint32(record[0:])
		if (n == 0) != (kind == drrBegin) {
			return fmt.Errorf("%w: record %d has type %d", ErrStream, n, kind)
		}
		u64 := func(off int) uint64 { return order.Uint64(record[off:]) }
		u32 := func(off int) uint64 { return uint64(order.Uint32(record[off:])) }
		var payload uint64
		var named *StreamRange
		switch kind {
		case drrBegin:
			if header := u64(offVersionInfo) & 3; header != 1 {
				return fmt.Errorf("%w: a compound stream (zfs send -R) or an unknown header type %d", ErrStream, header)
			}
			payload = u32(offPayloadLen)
		case drrEnd:
			return nil
		case drrObject:
			payload = u32(offObjectRawBonus)
			if payload == 0 {
				payload = (u32(offObjectBonusLen) + 7) &^ 7
			}
		case drrWrite:
			payload = u64(offWriteLogical)
			if record[offWriteCompType] != 0 {
				payload = u64(offWriteCompSize)
			}
			named = &StreamRange{Offset: u64(offWriteOffset), Length: u64(offWriteLogical)}
		case drrWriteEmbedded:
			payload = (u32(offEmbeddedPSize) + 7) &^ 7
			named = &StreamRange{Offset: u64(offRangeOffset), Length: u64(offRangeLength)}
		case drrWriteByRef:
			named = &StreamRange{Offset: u64(offRangeOffset), Length: u64(offRangeLength)}
		case drrFree:
			named = &StreamRange{Offset: u64(offRangeOffset), Length: u64(offRangeLength), Freed: true}
		case drrSpill:
			payload = u64(offSpillCompressed)
			if payload == 0 {
				payload = u64(offSpillLength)
			}
		case drrFreeObjects, drrObjectRange, drrRedact:
		default:
			return fmt.Errorf("%w: record %d has unknown type %d", ErrStream, n, kind)
		}
		if named != nil && u64(offObject) == VolumeObject && named.Length > 0 {
			if err := fn(*named); err != nil {
				return err
			}
		}
		if err := skip(in, payload); err != nil {
			return fmt.Errorf("%w: record %d's payload of %d bytes cut short: %v", ErrStream, n, payload, err)
		}
	}
}

// streamOrder is the byte order of a stream whose first record is record:
// the sender's, which the BEGIN record's magic number shows.
func streamOrder(record []byte) (binary.ByteOrder, bool) {
	switch {
	case binary.LittleEndian.Uint64(record[offMagic:]) == streamMagic:
		return binary.LittleEndian, true
	case binary.BigEndian.Uint64(record[offMagic:]) == streamMagic:
		return binary.BigEndian, true
	}
	return nil, false
}

// skip discards n bytes of in.
func skip(in *bufio.Reader, n uint64) error {
	for n > 0 {
		chunk := min(n, 1<<30)
		if _, err := in.Discard(int(chunk)); err != nil {
			return err
		}
		n -= chunk
	}
	return nil
}
