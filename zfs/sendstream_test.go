package zfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

// streamBuilder writes records as zfs send does, in one byte order.
type streamBuilder struct {
	order binary.ByteOrder
	buf   bytes.Buffer
}

// record writes a record of kind with the given fields (offset → value;
// values of uint8 and uint32 are written at their width) and a payload of
// payload bytes.
func (b *streamBuilder) record(kind uint32, fields map[int]any, payload int) *streamBuilder {
	var record [recordSize]byte
	b.order.PutUint32(record[0:], kind)
	for off, value := range fields {
		switch v := value.(type) {
		case uint8:
			record[off] = v
		case uint32:
			b.order.PutUint32(record[off:], v)
		case uint64:
			b.order.PutUint64(record[off:], v)
		case int:
			b.order.PutUint64(record[off:], uint64(v))
		}
	}
	b.buf.Write(record[:])
	b.buf.Write(bytes.Repeat([]byte{0xa5}, payload))
	return b
}

func (b *streamBuilder) begin(header uint64, nvlist int) *streamBuilder {
	return b.record(drrBegin, map[int]any{offPayloadLen: uint32(nvlist), offMagic: uint64(streamMagic), offVersionInfo: header}, nvlist)
}

// sampleStream has one record of every kind ReadStream must step over or
// report, and ranges of another object that must not be reported.
func sampleStream(order binary.ByteOrder) []byte {
	b := &streamBuilder{order: order}
	b.begin(1|(1<<24), 24).
		record(drrObject, map[int]any{offObject: 1, offObjectBonusLen: uint32(5)}, 8).
		record(drrObject, map[int]any{offObject: 2, offObjectBonusLen: uint32(3), offObjectRawBonus: uint32(40)}, 40).
		record(drrFreeObjects, map[int]any{offObject: 3}, 0).
		record(drrWrite, map[int]any{offObject: 1, offWriteOffset: 0, offWriteLogical: 16384}, 16384).
		record(drrWrite, map[int]any{offObject: 1, offWriteOffset: 32768, offWriteLogical: 16384, offWriteCompType: uint8(15),
			offWriteCompSize: 700}, 700).
		record(drrWrite, map[int]any{offObject: 2, offWriteOffset: 0, offWriteLogical: 512}, 512).
		record(drrWriteEmbedded, map[int]any{offObject: 1, offRangeOffset: 49152, offRangeLength: 16384, offEmbeddedPSize: uint32(13)}, 16).
		record(drrWriteByRef, map[int]any{offObject: 1, offRangeOffset: 65536, offRangeLength: 16384}, 0).
		record(drrSpill, map[int]any{offObject: 1, offSpillLength: 512}, 512).
		record(drrSpill, map[int]any{offObject: 1, offSpillLength: 512, offSpillCompressed: 64}, 64).
		record(drrFree, map[int]any{offObject: 1, offRangeOffset: 81920, offRangeLength: 32768}, 0).
		record(drrFree, map[int]any{offObject: 1, offRangeOffset: 131072, offRangeLength: ToEnd}, 0).
		record(drrFree, map[int]any{offObject: 2, offRangeOffset: 0, offRangeLength: ToEnd}, 0).
		record(drrEnd, nil, 0)
	return b.buf.Bytes()
}

func readRanges(stream []byte) ([]StreamRange, error) {
	var got []StreamRange
	err := ReadStream(bytes.NewReader(stream), func(r StreamRange) error {
		got = append(got, r)
		return nil
	})
	return got, err
}

func TestReadStreamReportsTheVolumesRangesInBothByteOrders(t *testing.T) {
	want := []StreamRange{{0, 16384, false}, {32768, 16384, false}, {49152, 16384, false}, {65536, 16384, false},
		{81920, 32768, true}, {131072, ToEnd, true}}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		got, err := readRanges(sampleStream(order))
		if err != nil {
			t.Fatalf("%v: %v", order, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%v:\n got %v\nwant %v", order, got, want)
		}
	}
}

func TestReadStreamRefusesWhatItCannotRead(t *testing.T) {
	whole := sampleStream(binary.LittleEndian)
	compound := (&streamBuilder{order: binary.LittleEndian}).begin(2, 0).record(drrEnd, nil, 0).buf.Bytes()
	unknown := (&streamBuilder{order: binary.LittleEndian}).begin(1, 0).record(42, nil, 0).record(drrEnd, nil, 0).buf.Bytes()
	noBegin := (&streamBuilder{order: binary.LittleEndian}).record(drrWrite, map[int]any{offObject: 1}, 0).buf.Bytes()
	for name, stream := range map[string][]byte{
		"empty":                     nil,
		"cut inside a record":       whole[:recordSize+100],
		"cut inside a payload":      whole[:len(whole)-recordSize*3-10],
		"without its END":           whole[:len(whole)-recordSize],
		"compound (zfs send -R)":    compound,
		"an unknown record type":    unknown,
		"not starting with a BEGIN": noBegin,
	} {
		if _, err := readRanges(stream); !errors.Is(err, ErrStream) {
			t.Errorf("%s: got %v, want ErrStream", name, err)
		}
	}
	stop := errors.New("enough")
	if err := ReadStream(bytes.NewReader(whole), func(StreamRange) error { return stop }); err != stop {
		t.Errorf("fn's error: got %v", err)
	}
}

// A payload is skipped, never held: a stream of 1 GiB of writes is read
// through a reader that produces it on the fly.
func TestReadStreamSkipsPayloadsOfAnySize(t *testing.T) {
	b := &streamBuilder{order: binary.LittleEndian}
	b.begin(1, 0)
	const writes = 1024
	head := b.buf.Len()
	b.record(drrWrite, map[int]any{offObject: 1, offWriteLogical: 1 << 20}, 0)
	record := append([]byte(nil), b.buf.Bytes()[head:]...)
	end := (&streamBuilder{order: binary.LittleEndian}).record(drrEnd, nil, 0).buf.Bytes()
	var readers []io.Reader
	readers = append(readers, bytes.NewReader(b.buf.Bytes()[:head]))
	for i := range writes {
		binary.LittleEndian.PutUint64(record[offWriteOffset:], uint64(i)<<20)
		readers = append(readers, bytes.NewReader(append([]byte(nil), record...)), io.LimitReader(zeros{}, 1<<20))
	}
	readers = append(readers, bytes.NewReader(end))
	var total uint64
	if err := ReadStream(io.MultiReader(readers...), func(r StreamRange) error { total += r.Length; return nil }); err != nil {
		t.Fatal(err)
	}
	if total != writes<<20 {
		t.Errorf("read %d bytes of ranges, want %d", total, writes<<20)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestVolumeRangesReadsZFSSendAsItComes(t *testing.T) {
	f := newFakeZFS(t)
	f.set("zfs.send", "stdout", string(sampleStream(binary.LittleEndian)))
	var got []StreamRange
	err := NewExec(ExecConfig{}).VolumeRanges(t.Context(), "tank/csi/v@b", "tank/csi/v@a", func(r StreamRange) error {
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"send", "-L", "-e", "-c", "-i", "tank/csi/v@a", "tank/csi/v@b"}; !reflect.DeepEqual(f.argv("zfs.send"), want) {
		t.Errorf("argv %q, want %q", f.argv("zfs.send"), want)
	}
	if len(got) != 6 {
		t.Errorf("got %v", got)
	}
	f.fail("zfs.send", "cannot send 'tank/csi/v@a': not an earlier snapshot from the same fs")
	err = NewExec(ExecConfig{}).VolumeRanges(t.Context(), "tank/csi/v@a", "tank/csi/v@b", func(StreamRange) error { return nil })
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("a base that is not earlier: got %v, want ErrInvalid (send's own error, not the empty stream's)", err)
	}
}
