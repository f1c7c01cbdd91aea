package main

import (
	"encoding/binary"
	"strings"
	"testing"
)

func TestCreateRequestRefusesWhatItWouldGuess(t *testing.T) {
	for _, p := range []property{{"compression", "gzip-9"}, {"atime", "off"}, {"refquota", "1G"}} {
		if _, err := createRequest([]property{p}); err == nil || !strings.Contains(err.Error(), p.name) {
			t.Errorf("%s=%s: got %v, want a refusal naming it", p.name, p.value, err)
		}
	}
}

// The packed request walked pair by pair as the kernel's nvs_native decoder
// does: each pair's size, name and type, the embedded list after its pair,
// a zero ending each list, nothing after the top list's end.
func TestCreateRequestPacksANativeNVList(t *testing.T) {
	packed, err := createRequest([]property{{"mountpoint", "legacy"}, {"refquota", "1073741824"},
		{"compression", "lz4"}, {"zfs.csi.dev:name", "pvc-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(packed[:4]) != "\x00\x01\x00\x00" {
		t.Fatalf("header % x", packed[:4])
	}
	type pair struct {
		name     string
		dataType uint32
		value    []byte
	}
	at := 12
	var walk func() []pair
	walk = func() []pair {
		var pairs []pair
		for {
			size := int(binary.LittleEndian.Uint32(packed[at:]))
			if size == 0 {
				at += 4
				return pairs
			}
			if size%8 != 0 || at+size > len(packed) {
				t.Fatalf("pair of %d bytes at %d", size, at)
			}
			nameSize := int(binary.LittleEndian.Uint16(packed[at+4:]))
			p := pair{name: string(packed[at+16 : at+16+nameSize-1]), dataType: binary.LittleEndian.Uint32(packed[at+12:]),
				value: packed[at+align8(16+nameSize) : at+size]}
			at += size
			pairs = append(pairs, p)
			if p.dataType == nvTypeNVList {
				pairs = append(pairs, walk()...)
			}
		}
	}
	got := walk()
	if at != len(packed) {
		t.Errorf("%d bytes after the end", len(packed)-at)
	}
	want := []struct {
		name     string
		dataType uint32
		value    uint64
	}{{"type", nvTypeInt32, dmuOstZFS}, {"props", nvTypeNVList, 0}, {"mountpoint", nvTypeString, 0},
		{"refquota", nvTypeUint64, 1 << 30}, {"compression", nvTypeUint64, 15}, {"zfs.csi.dev:name", nvTypeString, 0}}
	if len(got) != len(want) {
		t.Fatalf("pairs %+v", got)
	}
	for i, w := range want {
		g := got[i]
		if g.name != w.name || g.dataType != w.dataType {
			t.Errorf("pair %d: %s of type %d, want %s of type %d", i, g.name, g.dataType, w.name, w.dataType)
		}
		if w.dataType == nvTypeUint64 && binary.LittleEndian.Uint64(g.value) != w.value {
			t.Errorf("%s = %d, want %d", g.name, binary.LittleEndian.Uint64(g.value), w.value)
		}
	}
	if v := got[2].value; string(v[:7]) != "legacy\x00" {
		t.Errorf("mountpoint % x", v)
	}
}
