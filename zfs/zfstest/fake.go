package zfstest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Fake is a stateful in-memory ZFS for tests: a tree of filesystems, volumes
// and snapshots with clones and origins, user-property inheritance, deferred
// destroy and simple space accounting. It refuses what ZFS refuses (missing
// parents, unknown properties, destroying datasets with dependents, …) with the
// same typed errors as Exec, so tests assert on end state, not on call order.
type Fake struct {
	mu       sync.Mutex
	pools    map[string]*fakePool
	datasets map[string]*fakeDataset
	clock    time.Time
	txg      uint64 // each call is a transaction group of its own
	before22 bool   // PlayBefore22: programs cannot set properties, new zvols get 8 KiB blocks
	calls    map[string]int
	failures map[string][]error
	busy     map[string]bool
	stalls   map[string]chan struct{}
	cutAfter int  // InterruptInherit: the next Inherit keeps this many; -1 none
	crashIn  int  // CrashAfter: commands left before the daemon dies; -1 never
	crashed  bool // CrashAfter's daemon died: every command fails until Revive
}

type fakePool struct {
	size   uint64
	health string
	errors zfs.PoolStatus // the counters SetPoolErrors set
}

type fakeDataset struct {
	name           string
	typ            zfs.Type
	origin         string
	referenced     uint64 // bytes of data the dataset (or snapshot) refers to
	volSize        uint64
	props          map[string]string // locally set native and user properties
	creation       time.Time
	createTxg      uint64
	clones         map[string]bool // snapshots only
	deferDestroy   bool
	holds          int                  // user holds (zfs hold), snapshots only
	key            []byte               // encryption roots only (fake_crypto.go)
	keyLoaded      bool                 // encryption roots only
	encryptionRoot string               // "" when not encrypted; fixed when made
	blocks         map[uint64]fakeBlock // volumes and their snapshots (fake_data.go)
	guid           uint64               // snapshots: fixed when made, kept by a receive (fake_transfer.go)
	written        uint64               // bytes written since the newest snapshot (ZFS's written)
	changed        uint64               // the transaction group of its last write: its block pointer's birth
	partial        *fakePartial         // a resumable receive cut short (fake_transfer.go)
	inconsistent   bool                 // made by a receive still partial: no data to read yet
}

// NewFake returns a Fake holding the given pools (name → size in bytes), each
// with its root filesystem, ONLINE.
func NewFake(pools map[string]uint64) *Fake {
	f := &Fake{
		pools:    map[string]*fakePool{},
		datasets: map[string]*fakeDataset{},
		clock:    time.Unix(1_700_000_000, 0),
		calls:    map[string]int{},
		failures: map[string][]error{},
		busy:     map[string]bool{},
		stalls:   map[string]chan struct{}{},
		cutAfter: -1,
		crashIn:  -1,
	}
	for name, size := range pools {
		f.pools[name] = &fakePool{size: size, health: "ONLINE"}
		f.datasets[name] = &fakeDataset{name: name, typ: zfs.Filesystem, props: map[string]string{}, creation: f.clock}
	}
	return f
}

// begin counts a call and returns an injected failure, if any. Callers hold mu.
func (f *Fake) begin(ctx context.Context, method string) error {
	if f.crashed || f.crashIn == 0 {
		f.crashed, f.crashIn = true, -1
		return ErrKilled
	}
	if f.crashIn > 0 {
		f.crashIn--
	}
	f.calls[method]++
	f.txg++
	if err := ctx.Err(); err != nil {
		return err
	}
	if queue := f.failures[method]; len(queue) > 0 {
		f.failures[method] = queue[1:]
		return queue[0]
	}
	return nil
}

// suspended fails op when name's pool is SUSPENDED. Callers hold mu.
func (f *Fake) suspended(op, name string) error {
	if pool, ok := f.pools[zfs.PoolOf(name)]; ok && pool.health == "SUSPENDED" {
		return f.fail(op, name, zfs.ErrPoolSuspended)
	}
	return nil
}

func (f *Fake) fail(op, name string, kind error) error {
	return &zfs.CommandError{Argv: []string{"zfs", op, name}, ExitCode: 1, Stderr: fmt.Sprintf("cannot %s '%s': %v", op, name, kind), Kind: kind}
}

// Create implements Interface.
func (f *Fake) Create(ctx context.Context, name string, opts zfs.CreateOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Create"); err != nil {
		return err
	}
	if err := f.suspended("create", name); err != nil {
		return err
	}
	typ := zfs.Filesystem
	if opts.VolSize > 0 {
		typ = zfs.Volume
	}
	props := copyProps(opts.Properties)
	format := props["keyformat"]
	encrypted, err := f.cryptoProps(name, props, opts.Key)
	if err != nil {
		return err
	}
	if encrypted && (opts.Properties["keylocation"] != "prompt" || checkKey(format, opts.Key) != nil) {
		return f.fail("create", name, zfs.ErrInvalid)
	}
	if err := f.checkNewDataset("create", name, typ, props); err != nil {
		return err
	}
	if _, set := props["volblocksize"]; typ == zfs.Volume && !set {
		// volblocksize is fixed at creation: the version's default then is
		// the zvol's for good, whatever the Fake plays later.
		props["volblocksize"] = strconv.FormatUint(f.defaultVolBlockSize(), 10)
	}
	d := &fakeDataset{name: name, typ: typ, volSize: opts.VolSize, props: props}
	if encrypted {
		d.key, d.keyLoaded = append([]byte(nil), opts.Key...), true
	}
	if typ == zfs.Volume {
		// zfs create -V rounds a size off the block size up to it (in
		// cmd/zfs/zfs_main.c since OpenZFS 2.1, before libzfs's own check
		// that the size is a multiple could refuse it); zfs set volsize
		// does not.
		d.volSize = (opts.VolSize + d.volBlockSize() - 1) / d.volBlockSize() * d.volBlockSize()
		if _, set := d.props["refreservation"]; !set && !opts.Sparse {
			d.props["refreservation"] = "auto" // what zfs create -V computes for itself
		}
	}
	return f.add(d)
}

// Clone implements Interface.
func (f *Fake) Clone(ctx context.Context, snapshot, name string, properties map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Clone"); err != nil {
		return err
	}
	if err := f.suspended("clone", name); err != nil {
		return err
	}
	snap, ok := f.datasets[snapshot]
	if !ok || snap.typ != zfs.Snapshot {
		return f.fail("clone", snapshot, zfs.ErrNotFound)
	}
	source := f.datasets[datasetOf(snapshot)]
	if zfs.PoolOf(snapshot) != zfs.PoolOf(name) {
		return f.fail("create", name, zfs.ErrCrossPool)
	}
	if err := f.checkNewDataset("clone", name, source.typ, properties); err != nil {
		return err
	}
	d := &fakeDataset{name: name, typ: source.typ, origin: snapshot, referenced: snap.referenced,
		volSize: snap.volSize, props: copyProps(properties)}
	if source.typ == zfs.Volume {
		d.props["volblocksize"] = strconv.FormatUint(source.volBlockSize(), 10)
		// zfs clone sets a volsize among its properties after the clone exists.
		if volsize, given := d.props["volsize"]; given {
			d.volSize, _ = strconv.ParseUint(volsize, 10, 64)
			delete(d.props, "volsize")
			if err := volsizeError("clone", name, d.volSize, d.volBlockSize()); err != nil {
				return err
			}
		}
	}
	if err := f.add(d); err != nil {
		return err
	}
	snap.clones[name] = true
	return nil
}

// Copy implements Interface. The stream it counts into opts.Received is the
// snapshot's referenced bytes.
func (f *Fake) Copy(ctx context.Context, snapshot, name string, opts zfs.CopyOptions) error {
	received := opts.Received
	if received == nil {
		received = new(atomic.Uint64)
	}
	f.mu.Lock()
	var stream uint64
	if snap, ok := f.datasets[snapshot]; ok {
		stream = snap.referenced
	}
	f.mu.Unlock()
	if err := f.stall(ctx, "Copy", func() { received.Store(stream / 2) }); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Copy"); err != nil {
		return err
	}
	snap, ok := f.datasets[snapshot]
	if !ok || snap.typ != zfs.Snapshot {
		return f.fail("send", snapshot, zfs.ErrNotFound)
	}
	source := f.datasets[datasetOf(snapshot)]
	if err := f.checkNewDataset("receive", name, source.typ, opts.Properties); err != nil {
		return err
	}
	d := &fakeDataset{name: name, typ: source.typ, referenced: snap.referenced, volSize: snap.volSize, props: copyProps(opts.Properties)}
	if source.typ == zfs.Volume {
		d.props["volblocksize"] = strconv.FormatUint(source.volBlockSize(), 10)
	}
	if err := f.add(d); err != nil {
		return err
	}
	received.Store(snap.referenced)
	copied := &fakeDataset{name: name + "@" + snapshotOf(snapshot), typ: zfs.Snapshot, referenced: snap.referenced,
		volSize: snap.volSize, props: map[string]string{}, clones: map[string]bool{}}
	return f.add(copied)
}

// Snapshot implements Interface.
func (f *Fake) Snapshot(ctx context.Context, name string, properties map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Snapshot"); err != nil {
		return err
	}
	if err := f.suspended("snapshot", name); err != nil {
		return err
	}
	source, ok := f.datasets[datasetOf(name)]
	if !ok || source.typ == zfs.Snapshot || !strings.Contains(name, "@") {
		return f.fail("snapshot", name, zfs.ErrNotFound)
	}
	// zfs snapshot opens the dataset, checks the whole name, then asks
	// the kernel, which finds a snapshot already there.
	if err := nameError("snapshot", name, true); err != nil {
		return err
	}
	if _, exists := f.datasets[name]; exists {
		return f.fail("snapshot", name, zfs.ErrExists)
	}
	for key := range properties {
		if !strings.Contains(key, ":") {
			return f.fail("snapshot", name, zfs.ErrInvalid) // only user properties may be set on snapshots
		}
	}
	return f.add(&fakeDataset{name: name, typ: zfs.Snapshot, referenced: source.referenced, volSize: source.volSize,
		props: copyProps(properties), clones: map[string]bool{}})
}

// Destroy implements Interface.
func (f *Fake) Destroy(ctx context.Context, name string, opts zfs.DestroyOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Destroy"); err != nil {
		return err
	}
	if err := f.suspended("destroy", name); err != nil {
		return err
	}
	d, ok := f.datasets[name]
	if !ok {
		return f.fail("destroy", name, zfs.ErrNotFound)
	}
	if d.typ == zfs.Snapshot {
		if len(d.clones) > 0 || d.holds > 0 {
			if !opts.Defer {
				if d.holds > 0 {
					return f.fail("destroy", name, zfs.ErrHeld)
				}
				return dependentsError(name, d.typ, "dependent clones", "-R", slices.Collect(maps.Keys(d.clones)))
			}
			d.deferDestroy = true
			return nil
		}
		f.remove(name)
		return nil
	}
	doomed := f.descendants(name)
	if len(doomed) > 0 && !opts.Recursive {
		return dependentsError(name, d.typ, "children", "-r", doomed)
	}
	doomed = append(doomed, name)
	for _, victim := range doomed {
		if f.busy[victim] {
			return f.fail("destroy", victim, zfs.ErrBusy)
		}
		if f.datasets[victim].holds > 0 {
			return f.fail("destroy", victim, zfs.ErrHeld)
		}
		for clone := range f.datasets[victim].clones {
			if !isUnder(clone, name) {
				return dependentsError(name, d.typ, "dependent clones", "-R", []string{clone})
			}
		}
	}
	// Clones first, so that their origins are free when their turn comes.
	sort.Slice(doomed, func(i, j int) bool { return f.datasets[doomed[i]].origin != "" && f.datasets[doomed[j]].origin == "" })
	for _, victim := range doomed {
		f.remove(victim)
	}
	return nil
}

// Set implements Interface.
func (f *Fake) Set(ctx context.Context, name string, properties map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Set"); err != nil {
		return err
	}
	if err := f.suspended("set", name); err != nil {
		return err
	}
	d, ok := f.datasets[name]
	if !ok {
		return f.fail("set", name, zfs.ErrNotFound)
	}
	settable := properties
	if location, ok := properties["keylocation"]; ok {
		// ZFS sets keylocation on an encryption root only (a raw receive
		// makes one), to prompt or a file URI.
		if d.encryptionRoot != d.name || (location != "prompt" && !strings.HasPrefix(location, "file:///")) {
			return f.fail("set", name, zfs.ErrInvalid)
		}
		settable = maps.Clone(properties)
		delete(settable, "keylocation")
	}
	if err := checkProps(d.typ, settable, false); err != nil {
		return f.fail("set", name, err)
	}
	updated := *d
	updated.props = copyProps(d.props)
	for key, value := range properties {
		if key == "volsize" {
			size, _ := strconv.ParseUint(value, 10, 64)
			if err := volsizeError("set", name, size, d.volBlockSize()); err != nil {
				return err
			}
			// As ZFS does: a thick volume's reservation follows its size.
			if _, explicit := properties["refreservation"]; !explicit && d.sizeProp("refreservation") == d.volSize {
				updated.props["refreservation"] = value
			}
			updated.volSize = size
			continue
		}
		updated.props[key] = value
	}
	if err := f.checkSpaceProps(d, &updated, properties); err != nil {
		return err
	}
	*d = updated
	return nil
}

// Inherit implements Interface: the properties' local values go, all
// at once; a property zfs does not know, or one that cannot be inherited,
// is refused as zfs refuses it, before any goes.
func (f *Fake) Inherit(ctx context.Context, name string, properties ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Inherit"); err != nil {
		return err
	}
	d, ok := f.datasets[name]
	if !ok {
		return f.fail("inherit", name, zfs.ErrNotFound)
	}
	for _, property := range properties {
		if !strings.Contains(property, ":") {
			if types, known := fakeNativeProps[property]; !known || !hasType(types, d.typ) || createOnlyProps[property] || fakeSizeProps[property] {
				return f.fail("inherit", name, zfs.ErrInvalid)
			}
		}
	}
	props := copyProps(d.props)
	kept := len(properties)
	if f.cutAfter >= 0 {
		kept = min(kept, f.cutAfter)
	}
	f.cutAfter = -1
	for _, property := range properties[:kept] {
		delete(props, property)
	}
	d.props = props
	if kept < len(properties) {
		return &zfs.CommandError{Argv: []string{"zfs", "program", name}, ExitCode: -1, Stderr: "signal: killed"}
	}
	return nil
}

// nativeValue is a native property as zfs get prints it: set here or
// inherited, else ZFS's default (a filesystem's mountpoint is /<name>
// below an inherited one), "-" where it does not apply.
func (f *Fake) nativeValue(d *fakeDataset, prop string) string {
	if prop != "mountpoint" {
		if value := f.inherited(d, prop); value != "" {
			return value
		}
		return "-"
	}
	if d.typ != zfs.Filesystem {
		return "-"
	}
	for name, below := d.name, ""; ; {
		if value := f.datasets[name].props["mountpoint"]; value != "" {
			if value == "legacy" || value == "none" {
				return value
			}
			return strings.TrimSuffix(value, "/") + below
		}
		slash := strings.LastIndexByte(name, '/')
		if slash < 0 {
			return "/" + d.name
		}
		below, name = name[slash:]+below, name[:slash]
	}
}

// List implements Interface.
func (f *Fake) List(ctx context.Context, opts zfs.ListOptions) ([]zfs.Dataset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "List"); err != nil {
		return nil, err
	}
	types := opts.Types
	if len(types) == 0 {
		types = []zfs.Type{zfs.Filesystem, zfs.Volume}
	}
	var rows []zfs.Dataset
	for _, root := range opts.Roots {
		if err := f.suspended("open", root); err != nil {
			if opts.SkipSuspended {
				continue
			}
			return nil, err
		}
		if _, ok := f.datasets[root]; !ok {
			if opts.SkipMissing {
				continue
			}
			return nil, f.fail("open", root, zfs.ErrNotFound)
		}
		names := []string{root}
		if opts.Depth != 0 {
			names = append(names, f.descendants(root)...)
		}
		sort.Slice(names, func(i, j int) bool {
			a, b := f.datasets[names[i]], f.datasets[names[j]]
			if a.typ == zfs.Snapshot && b.typ == zfs.Snapshot && datasetOf(a.name) == datasetOf(b.name) {
				return a.createTxg < b.createTxg // zfs list sorts a dataset's snapshots by createtxg
			}
			return names[i] < names[j]
		})
		for _, name := range names {
			d := f.datasets[name]
			if !hasType(types, d.typ) || (opts.Depth > 0 && depthBelow(root, name) > opts.Depth) {
				continue
			}
			row := f.row(d, opts.UserProps)
			if opts.Crypto {
				f.cryptoColumns(d, &row)
			}
			if opts.Provenance {
				row.GUID, row.Written, row.CreateTxg = d.guidOf(), d.written, d.createTxg
			}
			for _, prop := range opts.Native {
				if row.Native == nil {
					row.Native = map[string]string{}
				}
				row.Native[prop] = f.nativeValue(d, prop)
			}
			if opts.Space {
				// The fake neither compresses nor overwrites: snapshots hold
				// nothing the dataset does not.
				row.CompressRatio = 1
			}
			if err := asListed(&row, len(rows)+1); err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

var _ zfs.Inspector = (*Fake)(nil)

// Inspect implements zfs.Inspector as Exec's answers: a dataset's name,
// type, origin, key status, encryption root and user properties, the other
// fields zero, so that a caller relying on one Inspect leaves out fails its
// tests here. It counts as "Inspect", not as a command. Where Exec falls
// back to zfs list its answer is List's: a suspended pool's error, and the
// refusal of a value with a tab or newline.
func (f *Fake) Inspect(ctx context.Context, name string, userProps []string) (zfs.Dataset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Inspect"); err != nil {
		return zfs.Dataset{}, err
	}
	if err := f.suspended("open", name); err != nil {
		return zfs.Dataset{}, err
	}
	d, ok := f.datasets[name]
	if !ok {
		return zfs.Dataset{}, f.fail("open", name, zfs.ErrNotFound)
	}
	listed := f.row(d, userProps)
	f.cryptoColumns(d, &listed)
	if err := asListed(&listed, 1); err != nil {
		return zfs.Dataset{}, err
	}
	return zfs.Dataset{Name: listed.Name, Type: listed.Type, Origin: listed.Origin, KeyStatus: listed.KeyStatus,
		EncryptionRoot: listed.EncryptionRoot, User: listed.User}, nil
}

// PoolStatus implements Interface.
func (f *Fake) PoolStatus(ctx context.Context, name string) (zfs.PoolStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "PoolStatus"); err != nil {
		return zfs.PoolStatus{}, err
	}
	p, ok := f.pools[name]
	if !ok {
		return zfs.PoolStatus{}, &zfs.CommandError{Argv: []string{"zpool", "status", name}, ExitCode: 1, Kind: zfs.ErrPoolNotFound,
			Stderr: fmt.Sprintf("cannot open '%s': no such pool", name)}
	}
	status := p.errors
	status.Name, status.State = name, p.health
	return status, nil
}

// Pool implements Interface.
func (f *Fake) Pool(ctx context.Context, name string) (zfs.Pool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "Pool"); err != nil {
		return zfs.Pool{}, err
	}
	p, ok := f.pools[name]
	if !ok {
		return zfs.Pool{}, &zfs.CommandError{Argv: []string{"zpool", "list", name}, ExitCode: 1, Kind: zfs.ErrPoolNotFound,
			Stderr: fmt.Sprintf("cannot open '%s': no such pool", name)}
	}
	allocated := f.allocated(name)
	return zfs.Pool{Name: name, Health: p.health, Size: p.size, Allocated: allocated, Free: p.size - allocated}, nil
}
