package zfstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Send and receive as the Fake plays them, after OpenZFS 2.3. A stream
// begins with a BEGIN record laid out as OpenZFS writes it (magic, feature
// flags, object-set type, GUIDs, the snapshot's full name), made here by
// hand from the on-disk format, not by the package's parser. What follows
// is the Fake's own: the snapshot's state as JSON and an end mark. A
// resumable receive (-s) cut short keeps the bytes that arrived: a new
// dataset then exists (ZFS makes it at the BEGIN record and marks it
// inconsistent), carrying a receive_resume_token; an incremental one keeps
// its state aside and the dataset is unchanged. `send -t token` sends the
// rest of the same stream with the RESUMING flag. A raw send (-w) of an
// encrypted dataset carries its key only as wrapped material the same
// passphrase opens: the received dataset is an encryption root of its own,
// its key not loaded.

// fakeStreamEnd ends the Fake's stream body; fakeStreamData is the most of
// a snapshot's data its stream carries.
const (
	fakeStreamEnd  = "FAKE-END"
	fakeStreamData = 1 << 20
)

// fakeStreamState is what the Fake's stream carries of a snapshot.
type fakeStreamState struct {
	Type         zfs.Type
	Snapshot     string // the snapshot's component, after '@'
	GUID         uint64
	FromGUID     uint64
	Referenced   uint64
	VolSize      uint64
	VolBlockSize uint64
	Written      []uint64 // a zvol's blocks holding data
	Freed        []uint64 // … and its holes
	WrappedKey   []byte   // raw sends of encrypted data only
}

// fakePartial is what a receive cut short kept.
type fakePartial struct {
	stream []byte // the stream's bytes so far, BEGIN record first
	token  string
	props  map[string]string
}

// fakeToken is the Fake's receive_resume_token, hex-encoded JSON. A real
// token is another format; nothing outside zfs reads either.
type fakeToken struct {
	ToName   string
	ToGUID   uint64
	FromGUID uint64
	Raw      bool
	Offset   int
}

// guidOf is a snapshot's GUID: fixed at its creation, kept by a receive.
func (d *fakeDataset) guidOf() uint64 {
	if d.guid == 0 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%d", d.name, d.createTxg)
		d.guid = h.Sum64() | 1
	}
	return d.guid
}

// Feature flags and object-set types as OpenZFS numbers them.
const (
	fakeFeatureResuming = 1 << 20
	fakeFeatureRaw      = 1 << 24
	fakeObjsetZFS       = 2
	fakeObjsetZVOL      = 3
)

// beginRecord lays out a BEGIN record: dmu_replay_record_t, 312 bytes,
// little-endian, drr_type 0.
func beginRecord(toName string, toGUID, fromGUID uint64, typ zfs.Type, raw, resuming bool) []byte {
	record := make([]byte, 312)
	binary.LittleEndian.PutUint32(record[0:], 0) // DRR_BEGIN
	binary.LittleEndian.PutUint64(record[8:], 0x2F5bacbac)
	features := uint64(0)
	if raw {
		features |= fakeFeatureRaw
	}
	if resuming {
		features |= fakeFeatureResuming
	}
	binary.LittleEndian.PutUint64(record[16:], features<<2|1) // DMU_SUBSTREAM
	objset := uint32(fakeObjsetZFS)
	if typ == zfs.Volume {
		objset = fakeObjsetZVOL
	}
	binary.LittleEndian.PutUint32(record[32:], objset)
	binary.LittleEndian.PutUint64(record[40:], toGUID)
	binary.LittleEndian.PutUint64(record[48:], fromGUID)
	copy(record[56:], toName)
	return record
}

// stream builds the whole stream of snapshot (from: an earlier snapshot of
// the same dataset, or ""). Callers hold mu.
func (f *Fake) stream(snapshot, from string, raw bool) ([]byte, error) {
	snap, ok := f.datasets[snapshot]
	if !ok || snap.typ != zfs.Snapshot {
		return nil, f.fail("send", snapshot, zfs.ErrNotFound)
	}
	source := f.datasets[datasetOf(snapshot)]
	state := fakeStreamState{Type: source.typ, Snapshot: snapshotOf(snapshot), GUID: snap.guidOf(),
		Referenced: snap.referenced, VolSize: snap.volSize}
	if from != "" {
		base, ok := f.datasets[from]
		if !ok || base.typ != zfs.Snapshot {
			return nil, f.fail("send", from, zfs.ErrNotFound)
		}
		if datasetOf(from) != datasetOf(snapshot) || base.createTxg >= snap.createTxg {
			return nil, &zfs.CommandError{Argv: []string{"zfs", "send", "-i", from, snapshot}, ExitCode: 1, Kind: zfs.ErrInvalid,
				Stderr: fmt.Sprintf("cannot send '%s': not an earlier snapshot from the same fs\n", snapshot)}
		}
		state.FromGUID = base.guidOf()
	}
	if source.typ == zfs.Volume {
		state.VolBlockSize = source.volBlockSize()
		for block, b := range snap.blocks {
			if b.hole {
				state.Freed = append(state.Freed, block)
			} else {
				state.Written = append(state.Written, block)
			}
		}
		sort.Slice(state.Written, func(i, j int) bool { return state.Written[i] < state.Written[j] })
		sort.Slice(state.Freed, func(i, j int) bool { return state.Freed[i] < state.Freed[j] })
	}
	if snap.encryptionRoot != "" {
		root := f.datasets[snap.encryptionRoot]
		switch {
		case raw:
			state.WrappedKey = append([]byte(nil), root.key...)
		case !root.keyLoaded:
			return nil, &zfs.CommandError{Argv: []string{"zfs", "send", snapshot}, ExitCode: 1, Kind: zfs.ErrKeyUnavailable,
				Stderr: fmt.Sprintf("cannot send '%s': encryption key not loaded\n", snapshot)}
		}
	} else {
		raw = false // -w of unencrypted data is an ordinary stream
	}
	body, err := json.Marshal(state)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Write(beginRecord(snapshot, state.GUID, state.FromGUID, source.typ, raw, false))
	_ = binary.Write(&out, binary.LittleEndian, uint32(len(body)))
	out.Write(body)
	// The data itself, as much of it as a test needs to cut a stream in
	// its middle: at most a MiB, so that large fake volumes cost nothing.
	out.Write(make([]byte, min(snap.referenced, fakeStreamData)))
	out.WriteString(fakeStreamEnd)
	return out.Bytes(), nil
}

// Send implements Interface.
func (f *Fake) Send(ctx context.Context, snapshot string, opts zfs.SendOptions, w io.Writer) error {
	f.mu.Lock()
	if err := f.begin(ctx, "Send"); err != nil {
		f.mu.Unlock()
		return err
	}
	var stream []byte
	var err error
	if opts.ResumeToken != "" {
		stream, err = f.resumedStream(opts.ResumeToken)
	} else {
		stream, err = f.stream(snapshot, opts.From, opts.Raw)
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if opts.Check != nil {
		begin, err := zfs.ParseStreamBegin(stream[:312])
		if err != nil {
			return err
		}
		if err := opts.Check(begin); err != nil {
			return fmt.Errorf("%w: %w", zfs.ErrRefusedStream, err)
		}
	}
	for len(stream) > 0 {
		if err := f.stall(ctx, "Send", func() {}); err != nil {
			return err
		}
		chunk := stream[:min(len(stream), 64)]
		n, err := w.Write(chunk)
		if opts.Sent != nil {
			opts.Sent.Add(uint64(n))
		}
		if err != nil {
			return err
		}
		stream = stream[n:]
	}
	return nil
}

// resumedStream is what `zfs send -t token` sends. Callers hold mu.
func (f *Fake) resumedStream(token string) ([]byte, error) {
	encoded, found := strings.CutPrefix(token, "fake1-")
	raw, err := hex.DecodeString(encoded)
	var t fakeToken
	if !found || err != nil || json.Unmarshal(raw, &t) != nil {
		return nil, &zfs.CommandError{Argv: []string{"zfs", "send", "-t", token}, ExitCode: 255, Kind: zfs.ErrInvalid,
			Stderr: "cannot resume send: malformed resume token\n"}
	}
	snap, ok := f.datasets[t.ToName]
	if !ok || snap.typ != zfs.Snapshot || snap.guidOf() != t.ToGUID {
		return nil, &zfs.CommandError{Argv: []string{"zfs", "send", "-t", token}, ExitCode: 255, Kind: zfs.ErrNotFound,
			Stderr: fmt.Sprintf("cannot resume send: '%s' used in the initial send no longer exists\n", t.ToName)}
	}
	from := ""
	if t.FromGUID != 0 {
		for name, d := range f.datasets {
			if d.typ == zfs.Snapshot && datasetOf(name) == datasetOf(t.ToName) && d.guidOf() == t.FromGUID {
				from = name
			}
		}
	}
	whole, err := f.stream(t.ToName, from, t.Raw)
	if err != nil {
		return nil, err
	}
	if t.Offset < 312 || t.Offset > len(whole) {
		return nil, f.fail("send", t.ToName, zfs.ErrInvalid)
	}
	begin := beginRecord(t.ToName, t.ToGUID, t.FromGUID, snap.typ, t.Raw, true)
	begin[32] = whole[32] // the object-set type as the whole stream said
	return append(begin, whole[t.Offset:]...), nil
}

// Receive implements Interface (always -s -u).
func (f *Fake) Receive(ctx context.Context, name string, opts zfs.ReceiveOptions, r io.Reader) error {
	var data bytes.Buffer
	_, readErr := io.Copy(countingBuffer{buffer: &data, n: opts.Received}, r)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(context.WithoutCancel(ctx), "Receive"); err != nil {
		return err
	}
	if err := f.suspended("receive", name); err != nil {
		return err
	}
	incoming := data.Bytes()
	if len(incoming) < 312 && readErr != nil {
		// zfs read too little to know what the stream is, and failed on
		// it; Exec names the broken stream then.
		return fmt.Errorf("zfs receive of %s: the stream broke off: %w", name, readErr)
	}
	if len(incoming) < 312 {
		return f.receiveFailed(name, "invalid stream (bad magic number)", zfs.ErrInvalid, readErr)
	}
	begin, err := zfs.ParseStreamBegin(incoming[:312])
	if err != nil {
		return f.receiveFailed(name, "invalid stream (bad magic number)", zfs.ErrInvalid, readErr)
	}
	target, exists := f.datasets[name]
	var stream []byte
	var props map[string]string
	switch {
	case begin.Resuming:
		if !exists || target.partial == nil {
			return f.receiveFailed(name, "destination does not have any resumable receive state", zfs.ErrInvalid, readErr)
		}
		stream, props = append(append([]byte(nil), target.partial.stream...), incoming[312:]...), target.partial.props
	case target != nil && target.partial != nil:
		return f.receiveFailed(name, "destination contains partially-complete state from \"zfs receive -s\"", zfs.ErrExists, readErr)
	case begin.FromGUID == 0 && exists:
		return f.receiveFailed(name, "destination '"+name+"' exists\nmust specify -F to overwrite it", zfs.ErrExists, readErr)
	case begin.FromGUID == 0:
		if err := f.checkNewDataset("receive", name, zfs.Filesystem, opts.Properties); err != nil {
			return err
		}
		stream, props = incoming, copyProps(opts.Properties)
	default:
		if !exists {
			return f.receiveFailed(name, "destination '"+name+"' does not exist", zfs.ErrNotFound, readErr)
		}
		if err := f.checkIncrementalBase(target, begin.FromGUID); err != nil {
			return err
		}
		stream, props = incoming, copyProps(opts.Properties)
	}
	state, complete := parseFakeStream(stream)
	if !complete {
		return f.keepPartial(name, begin, stream, props, readErr)
	}
	return f.finishReceive(name, begin, state, props)
}

// checkIncrementalBase is the kernel's check of an incremental stream's
// base (recv_begin_check_existing_impl in module/zfs/dmu_recv.c, OpenZFS
// 2.3): the target must hold a snapshot with the stream's from-GUID, its
// newest or an older one (ENODEV otherwise), and nothing may have been
// written to it since that snapshot (ETXTBSY). libzfs words both
// (zfs_receive_one in lib/libzfs/libzfs_sendrecv.c) in messages Exec has no
// kind for. Callers hold mu.
func (f *Fake) checkIncrementalBase(target *fakeDataset, fromGUID uint64) error {
	message := "most recent snapshot of " + target.name + " does not\nmatch incremental source"
	for name, snap := range f.datasets {
		if snap.typ == zfs.Snapshot && datasetOf(name) == target.name && snap.guidOf() == fromGUID {
			if target.changed <= snap.createTxg {
				return nil
			}
			message = "destination " + target.name + " has been modified\nsince most recent snapshot"
		}
	}
	return &zfs.CommandError{Argv: []string{"zfs", "receive", "-s", "-u", target.name}, ExitCode: 1,
		Stderr: "cannot receive incremental stream: " + message + "\n"}
}

// receiveFailed is receive's error, or the reader's when the stream broke.
func (f *Fake) receiveFailed(name, message string, kind, readErr error) error {
	return &zfs.CommandError{Argv: []string{"zfs", "receive", "-s", "-u", name}, ExitCode: 1, Kind: kind,
		Stderr: "cannot receive new filesystem stream: " + message + "\n"}
}

// keepPartial keeps what arrived of a stream cut short. Callers hold mu.
func (f *Fake) keepPartial(name string, begin zfs.StreamBegin, stream []byte, props map[string]string, readErr error) error {
	token, _ := json.Marshal(fakeToken{ToName: begin.ToName, ToGUID: begin.ToGUID, FromGUID: begin.FromGUID, Raw: begin.Raw, Offset: len(stream)})
	partial := &fakePartial{stream: stream, token: "fake1-" + hex.EncodeToString(token), props: props}
	if d, ok := f.datasets[name]; ok {
		d.partial = partial
	} else {
		typ := zfs.Filesystem
		if binary.LittleEndian.Uint32(stream[32:]) == fakeObjsetZVOL {
			typ = zfs.Volume
		}
		d := &fakeDataset{name: name, typ: typ, props: map[string]string{}, partial: partial, inconsistent: true}
		if err := f.add(d); err != nil {
			return err
		}
	}
	message := "checksum mismatch or incomplete stream.\nPartially received snapshot is saved.\nA resuming stream can be generated on the sending system by running:\n    zfs send -t " + partial.token
	err := &zfs.CommandError{Argv: []string{"zfs", "receive", "-s", "-u", name}, ExitCode: 1, Stderr: "cannot receive new filesystem stream: " + message + "\n"}
	if readErr != nil {
		return fmt.Errorf("zfs receive of %s: the stream broke off: %w", name, readErr)
	}
	return err
}

// finishReceive makes what a whole stream carried. Callers hold mu.
func (f *Fake) finishReceive(name string, begin zfs.StreamBegin, state fakeStreamState, props map[string]string) error {
	d, exists := f.datasets[name]
	if !exists || d.inconsistent {
		if exists {
			delete(f.datasets, name)
		}
		if state.Type == zfs.Volume {
			props["volblocksize"] = fmt.Sprint(state.VolBlockSize)
		}
		d = &fakeDataset{name: name, typ: state.Type, props: props}
		if begin.Raw && state.WrappedKey != nil {
			d.key = state.WrappedKey // an encryption root of its own, its key not loaded
		}
		if err := f.add(d); err != nil {
			return err
		}
	} else {
		for key, value := range props {
			d.props[key] = value
		}
	}
	d.partial = nil
	d.referenced, d.volSize, d.changed = state.Referenced, state.VolSize, f.txg
	if state.Type == zfs.Volume {
		d.blocks = map[uint64]fakeBlock{}
		f.txg++
		for _, block := range state.Written {
			d.blocks[block] = fakeBlock{birth: f.txg}
		}
		for _, block := range state.Freed {
			d.blocks[block] = fakeBlock{birth: f.txg, hole: true}
		}
	}
	snap := &fakeDataset{name: name + "@" + state.Snapshot, typ: zfs.Snapshot, referenced: state.Referenced,
		volSize: state.VolSize, props: map[string]string{}, clones: map[string]bool{}}
	if err := f.add(snap); err != nil {
		return err
	}
	snap.guid = state.GUID
	return nil
}

// parseFakeStream reads a whole stream's state; complete is false for one
// cut short.
func parseFakeStream(stream []byte) (fakeStreamState, bool) {
	var state fakeStreamState
	if len(stream) < 316 {
		return state, false
	}
	length := int(binary.LittleEndian.Uint32(stream[312:]))
	body := stream[316:]
	if len(body) < length || json.Unmarshal(body[:length], &state) != nil {
		return state, false
	}
	end := length + int(min(state.Referenced, fakeStreamData))
	return state, len(body) == end+len(fakeStreamEnd) && string(body[end:]) == fakeStreamEnd
}

// ResumeToken implements Interface.
func (f *Fake) ResumeToken(ctx context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "ResumeToken"); err != nil {
		return "", err
	}
	d, ok := f.datasets[name]
	if !ok || d.typ == zfs.Snapshot {
		return "", f.fail("get", name, zfs.ErrNotFound)
	}
	if d.partial == nil {
		return "", nil
	}
	return d.partial.token, nil
}

// AbortReceive implements Interface.
func (f *Fake) AbortReceive(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "AbortReceive"); err != nil {
		return err
	}
	d, ok := f.datasets[name]
	switch {
	case !ok:
		return f.fail("receive", name, zfs.ErrNotFound)
	case d.partial == nil:
		return &zfs.CommandError{Argv: []string{"zfs", "receive", "-A", name}, ExitCode: 1, Kind: zfs.ErrInvalid,
			Stderr: fmt.Sprintf("cannot resume send: '%s' does not have any resumable receive state to abort\n", name)}
	case d.inconsistent:
		f.remove(name)
	default:
		d.partial = nil
	}
	return nil
}

// Rename implements Interface: the dataset and its snapshots and children
// take the new name; clones keep pointing at their origins.
func (f *Fake) Rename(ctx context.Context, from, to string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Rename"); err != nil {
		return err
	}
	d, ok := f.datasets[from]
	switch {
	case !ok || d.typ == zfs.Snapshot:
		return f.fail("rename", from, zfs.ErrNotFound)
	case zfs.PoolOf(from) != zfs.PoolOf(to):
		return f.fail("rename", to, zfs.ErrInvalid)
	case isUnder(to, from):
		return f.fail("rename", to, zfs.ErrInvalid)
	}
	if err := f.checkNewDataset("rename", to, d.typ, nil); err != nil {
		return err
	}
	if d.inconsistent {
		return f.fail("rename", from, zfs.ErrBusy)
	}
	renamed := func(name string) string {
		if name == from || isUnder(name, from) || strings.HasPrefix(name, from+"@") {
			return to + strings.TrimPrefix(name, from)
		}
		return name
	}
	moved := map[string]*fakeDataset{}
	for name, dataset := range f.datasets {
		if renamed(name) != name {
			delete(f.datasets, name)
			moved[renamed(name)] = dataset
		}
	}
	for name, dataset := range moved {
		dataset.name = name
		f.datasets[name] = dataset
	}
	for _, dataset := range f.datasets {
		dataset.origin = renamed(dataset.origin)
		if dataset.encryptionRoot != "" {
			dataset.encryptionRoot = renamed(dataset.encryptionRoot)
		}
		for clone := range dataset.clones {
			if renamed(clone) != clone {
				delete(dataset.clones, clone)
				dataset.clones[renamed(clone)] = true
			}
		}
	}
	return nil
}

// countingBuffer is a buffer that counts what it took in.
type countingBuffer struct {
	buffer *bytes.Buffer
	n      *atomic.Uint64
}

func (c countingBuffer) Write(p []byte) (int, error) {
	n, err := c.buffer.Write(p)
	if c.n != nil {
		c.n.Add(uint64(n))
	}
	return n, err
}
