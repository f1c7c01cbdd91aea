package zfs

import (
	"encoding/binary"
	"errors"
	"os"
	"reflect"
	"testing"
)

// ZFS's own answers to ZFS_IOC_OBJSET_STATS, kept by make bench in the
// guest (OpenZFS 2.3.2): a dataset and an ext4 zvol the driver made.
var recordedObjsetStats = []struct {
	file     string
	name     string
	typ      uint64
	txg      uint64
	guid     uint64
	user     map[string]string
	volsize  bool
	property string // one more property, with its decoded value
	value    any
}{
	{"testdata/objset-stats-dataset.bin", "tank/bench/seq/node-fs", objsetTypeZFS, 0x206, 0xc3ee199c05bfe6c8,
		map[string]string{"zfs.csi.dev:managed": "true", "zfs.csi.dev:csi-name": "node-fs"}, false, "mountpoint", "legacy"},
	{"testdata/objset-stats-ext4-zvol.bin", "tank/bench/seq/node-ext4", objsetTypeZvol, 0x214, 0xa57ac80dc925dc61,
		map[string]string{"zfs.csi.dev:managed": "true", "zfs.csi.dev:csi-name": "node-ext4", "zfs.csi.dev:fstype": "ext4"}, true, "volblocksize", uint64(16384)},
}

// decodeRecorded reads and decodes one of ZFS's recorded answers.
func decodeRecorded(t *testing.T, file string) ([]byte, nvList) {
	t.Helper()
	packed, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	props, err := decodeNVList(packed)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return packed, props
}

func TestTheDecoderReadsWhatZFSAnswered(t *testing.T) {
	for _, recorded := range recordedObjsetStats {
		packed, props := decodeRecorded(t, recorded.file)
		for name, want := range recorded.user {
			property, _ := props[name].(nvList)
			if property["value"] != want || property["source"] != recorded.name {
				t.Errorf("%s: %s is %v, want the value %q set on %s", recorded.file, name, property, want, recorded.name)
			}
		}
		if got := propValue(props, "type"); got != recorded.typ {
			t.Errorf("%s: type %v", recorded.file, got)
		}
		if _, ok := propValue(props, "volsize").(uint64); ok != recorded.volsize {
			t.Errorf("%s: volsize %v", recorded.file, props["volsize"])
		}
		if got := propValue(props, recorded.property); got != recorded.value {
			t.Errorf("%s: %s %#v, want %#v", recorded.file, recorded.property, got, recorded.value)
		}
		if redact, ok := props["redact_snaps"].(nvList); !ok || len(redact) != 0 {
			t.Errorf("%s: redact_snaps %#v, want an empty list", recorded.file, props["redact_snaps"])
		}
		// Decoded only for what Inspect reads, the answer gives the same row.
		stats := objsetStats{creationTxg: recorded.txg, guid: recorded.guid, objsetType: uint32(recorded.typ)}
		userProps := []string{"zfs.csi.dev:managed", "zfs.csi.dev:csi-name", "zfs.csi.dev:fstype", "zfs.csi.dev:deleted"}
		kept, err := decodeNVListOf(packed, inspectedProps(userProps))
		if err != nil {
			t.Fatal(err)
		}
		whole, err1 := objsetDataset(recorded.name, stats, props, userProps)
		part, err2 := objsetDataset(recorded.name, stats, kept, userProps)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(whole, part) {
			t.Errorf("%s: the row from the whole answer %+v (%v), from the kept properties %+v (%v)", recorded.file, whole, err1, part, err2)
		}
		if len(kept) >= len(props) || kept["mountpoint"] != nil {
			t.Errorf("%s: kept %d of %d properties, mountpoint among them: %v", recorded.file, len(kept), len(props), kept["mountpoint"])
		}
		// Every cut of the answer, and anything after it, is refused, never
		// misread, whether all of it is kept or only what Inspect reads.
		for cut := 0; cut < len(packed); cut++ {
			if _, err := decodeNVList(packed[:cut]); !errors.Is(err, errNVList) {
				t.Fatalf("%s cut at %d: %v", recorded.file, cut, err)
			}
			if _, err := decodeNVListOf(packed[:cut], inspectedProps(userProps)); !errors.Is(err, errNVList) {
				t.Fatalf("%s cut at %d, decoded for Inspect: %v", recorded.file, cut, err)
			}
		}
		if _, err := decodeNVList(append(packed[:len(packed):len(packed)], 0, 0, 0, 0)); !errors.Is(err, errNVList) {
			t.Errorf("%s with bytes after its end: %v", recorded.file, err)
		}
	}
}

// nvBuilder packs nvlists by the native encoding (nvpair.c), for the cases
// ZFS's recorded answers do not hold.
type nvBuilder struct{ out []byte }

func newNVBuilder() *nvBuilder {
	return &nvBuilder{out: []byte{nvEncodeNative, nvLittleEndian, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}}
}

// pair appends a pair of dataType with elements and the value bytes.
func (b *nvBuilder) pair(name string, dataType, elements int32, value []byte) *nvBuilder {
	valueAt := (nvPairHeader + len(name) + 1 + 7) &^ 7
	size := (valueAt + len(value) + 7) &^ 7
	pair := make([]byte, size)
	binary.LittleEndian.PutUint32(pair, uint32(size))
	binary.LittleEndian.PutUint16(pair[4:], uint16(len(name)+1))
	binary.LittleEndian.PutUint32(pair[8:], uint32(elements))
	binary.LittleEndian.PutUint32(pair[12:], uint32(dataType))
	copy(pair[nvPairHeader:], name)
	copy(pair[valueAt:], value)
	b.out = append(b.out, pair...)
	return b
}

func (b *nvBuilder) uint64(name string, value uint64) *nvBuilder {
	return b.pair(name, nvTypeUint64, 1, binary.LittleEndian.AppendUint64(nil, value))
}

func (b *nvBuilder) string(name, value string) *nvBuilder {
	return b.pair(name, nvTypeString, 1, append([]byte(value), 0))
}

// list opens an embedded list; end closes it.
func (b *nvBuilder) list(name string) *nvBuilder {
	return b.pair(name, nvTypeNVList, 1, make([]byte, nvListSize))
}

func (b *nvBuilder) end() *nvBuilder {
	b.out = append(b.out, 0, 0, 0, 0)
	return b
}

// property appends a property as dsl_prop_get_all does: a list of its value
// (a string or a uint64) and, when given, its source.
func (b *nvBuilder) property(name string, value any, source ...string) *nvBuilder {
	b.list(name)
	switch v := value.(type) {
	case string:
		b.string("value", v)
	case uint64:
		b.uint64("value", v)
	}
	for _, s := range source {
		b.string("source", s)
	}
	return b.end()
}

func (b *nvBuilder) bytes() []byte { return append([]byte(nil), b.end().out...) }

func TestTheDecoderReadsEachTypeAndSkipsTheOthers(t *testing.T) {
	packed := newNVBuilder().
		pair("flag", nvTypeBoolean, 0, nil).
		pair("on", nvTypeBoolValue, 1, []byte{1, 0, 0, 0}).
		pair("negative", nvTypeInt64, 1, binary.LittleEndian.AppendUint64(nil, uint64(1<<64-5))).
		uint64("big", 1<<63+1).
		string("empty", "").
		pair("bytes", 10, 3, []byte{1, 2, 3}). // DATA_TYPE_BYTE_ARRAY
		list("outer").string("inner", "x").list("deeper").end().end().
		// An array of two lists: two pointers and two nvlist_t, the lists after the pair.
		pair("lists", nvTypeNVListArr, 2, make([]byte, 2*(8+nvListSize))).uint64("first", 1).end().end().
		string("after", "the lists").
		bytes()
	got, err := decodeNVList(packed)
	if err != nil {
		t.Fatal(err)
	}
	want := nvList{"flag": true, "on": true, "negative": int64(-5), "big": uint64(1<<63 + 1), "empty": "",
		"bytes": nvSkipped{10}, "outer": nvList{"inner": "x", "deeper": nvList{}}, "lists": nvSkipped{nvTypeNVListArr},
		"after": "the lists"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded\n%#v\nwant\n%#v", got, want)
	}
	// Kept: the named pairs of the outer list, embedded lists whole.
	got, err = decodeNVListOf(packed, map[string]bool{"big": true, "outer": true, "after": true, "inner": true, "first": true})
	want = nvList{"big": uint64(1<<63 + 1), "outer": nvList{"inner": "x", "deeper": nvList{}}, "after": "the lists"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("decoded for three names\n%#v (%v)\nwant\n%#v", got, err, want)
	}
}

func TestTheDecoderRefusesWhatBreaksTheEncoding(t *testing.T) {
	valid := newNVBuilder().string("name", "value").bytes()
	edit := func(at int, b ...byte) []byte {
		out := append([]byte(nil), valid...)
		copy(out[at:], b)
		return out
	}
	for what, packed := range map[string][]byte{
		"XDR encoding":                edit(0, 1),
		"big-endian":                  edit(1, 0),
		"another list version":        edit(4, 1),
		"a pair size not 8-aligned":   edit(nvHeaderSize, 33),
		"a pair larger than the rest": edit(nvHeaderSize, 0, 1),
		"a name without its NUL":      edit(nvHeaderSize+4, 4),
		"a name of one byte":          edit(nvHeaderSize+4, 1),
		"an unknown data type":        edit(nvHeaderSize+12, 99),
		"a string of two elements":    edit(nvHeaderSize+8, 2),
		"a boolean with an element":   newNVBuilder().pair("flag", nvTypeBoolean, 1, nil).bytes(),
		"a string without its NUL":    newNVBuilder().pair("name", nvTypeString, 1, []byte("12345678")).bytes(),
		"a number of four bytes":      newNVBuilder().pair("n", nvTypeUint64, 1, nil).bytes(),
		"one name twice":              newNVBuilder().string("a", "1").string("a", "2").bytes(),
		"an embedded list unended":    newNVBuilder().list("outer").string("inner", "x").out,
		"an embedded list of version 1": newNVBuilder().pair("outer", nvTypeNVList, 1,
			append([]byte{1}, make([]byte, nvListSize-1)...)).end().bytes(),
		"lists nested too deep": func() []byte {
			b := newNVBuilder()
			for range nvMaxDepth + 2 {
				b.list("l")
			}
			for range nvMaxDepth + 2 {
				b.end()
			}
			return b.bytes()
		}(),
	} {
		if got, err := decodeNVList(packed); !errors.Is(err, errNVList) {
			t.Errorf("%s: decoded %v, %v", what, got, err)
		}
		// A pair that is not kept is checked as strictly, except that its
		// name is not looked for among the others.
		if what == "one name twice" {
			continue
		}
		if got, err := decodeNVListOf(packed, map[string]bool{"other": true}); !errors.Is(err, errNVList) {
			t.Errorf("%s, not kept: decoded %v, %v", what, got, err)
		}
	}
	if got, err := decodeNVListOf(newNVBuilder().string("a", "1").string("a", "2").bytes(), map[string]bool{"a": true}); !errors.Is(err, errNVList) {
		t.Errorf("a kept name twice: decoded %v, %v", got, err)
	}
}
