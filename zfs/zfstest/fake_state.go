package zfstest

import (
	"fmt"
	"github.com/zfs-csi/zfs-csi/zfs"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The state keeping behind Fake: naming rules, property checks, inheritance
// and space accounting. Every function here expects Fake.mu to be held.

// fakeNativeProps are the native properties the Fake accepts, with the types
// that have them; the value checks are ZFS's where a test can hit them.
var fakeNativeProps = map[string][]zfs.Type{
	"mountpoint": {zfs.Filesystem}, "canmount": {zfs.Filesystem}, "refquota": {zfs.Filesystem}, "quota": {zfs.Filesystem},
	"recordsize": {zfs.Filesystem}, "atime": {zfs.Filesystem}, "relatime": {zfs.Filesystem}, "xattr": {zfs.Filesystem},
	"acltype": {zfs.Filesystem}, "snapdir": {zfs.Filesystem}, "exec": {zfs.Filesystem}, "setuid": {zfs.Filesystem},
	"devices": {zfs.Filesystem}, "dnodesize": {zfs.Filesystem}, "special_small_blocks": {zfs.Filesystem},
	"normalization": {zfs.Filesystem}, "casesensitivity": {zfs.Filesystem}, "utf8only": {zfs.Filesystem},
	"volblocksize": {zfs.Volume}, "volmode": {zfs.Volume},
	"refreservation": {zfs.Filesystem, zfs.Volume}, "reservation": {zfs.Filesystem, zfs.Volume}, "readonly": {zfs.Filesystem, zfs.Volume},
	"compression": {zfs.Filesystem, zfs.Volume}, "checksum": {zfs.Filesystem, zfs.Volume}, "sync": {zfs.Filesystem, zfs.Volume},
	"logbias": {zfs.Filesystem, zfs.Volume}, "primarycache": {zfs.Filesystem, zfs.Volume}, "secondarycache": {zfs.Filesystem, zfs.Volume},
	"dedup": {zfs.Filesystem, zfs.Volume}, "copies": {zfs.Filesystem, zfs.Volume}, "redundant_metadata": {zfs.Filesystem, zfs.Volume},
	"snapdev": {zfs.Volume}, "volsize": {zfs.Volume},
}

// createOnlyProps can be given at creation but not changed later.
var createOnlyProps = map[string]bool{"volblocksize": true, "normalization": true, "casesensitivity": true, "utf8only": true}

var fakeSizeProps = map[string]bool{"refquota": true, "quota": true, "refreservation": true, "reservation": true,
	"volsize": true, "volblocksize": true, "recordsize": true, "special_small_blocks": true}

var fakeEnumProps = map[string][]string{
	"compression": {"on", "off", "lz4", "zstd", "gzip", "zle", "lzjb"},
	"atime":       {"on", "off"}, "relatime": {"on", "off"}, "readonly": {"on", "off"}, "exec": {"on", "off"},
	"canmount": {"on", "off", "noauto"}, "sync": {"standard", "always", "disabled"},
	"logbias": {"latency", "throughput"}, "volmode": {"default", "full", "geom", "dev", "none"},
}

func checkProps(typ zfs.Type, props map[string]string, creating bool) error {
	for key, value := range props {
		if strings.Contains(key, ":") {
			if key != strings.ToLower(key) || len(key) > 256 || len(value) > 8192 {
				return zfs.ErrInvalid
			}
			continue
		}
		types, known := fakeNativeProps[key]
		if !known || !hasType(types, typ) || (!creating && createOnlyProps[key]) {
			return zfs.ErrInvalid
		}
		if err := checkValue(key, value); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(key, value string) error {
	if fakeSizeProps[key] {
		if key == "refreservation" && value == "auto" {
			return nil
		}
		if _, err := strconv.ParseUint(value, 10, 64); err != nil && value != "none" {
			return zfs.ErrInvalid
		}
		if key == "volblocksize" {
			size, _ := strconv.ParseUint(value, 10, 64)
			if size < 512 || size > 128<<10 || size&(size-1) != 0 {
				return zfs.ErrInvalid
			}
		}
		return nil
	}
	if allowed, ok := fakeEnumProps[key]; ok {
		for _, candidate := range allowed {
			if value == candidate {
				return nil
			}
		}
		return zfs.ErrInvalid
	}
	return nil
}

// nameProblem is what zfs says of a name it refuses, "" for one it takes,
// and the kind Exec classifies that message as (nil: none). The rules and
// their order are libzfs's zfs_validate_name (lib/libzfs/libzfs_dataset.c)
// over entity_namecheck (module/zcommon/zfs_namecheck.c), OpenZFS 2.3:
// components of alphanumerics and "-_.: ", one '@' in a snapshot's name
// only, no '#' or '%', fewer than 256 bytes (ZFS_MAX_DATASET_NAME_LEN
// counts the NUL). RuleCases holds the kinds to real ZFS through Exec.
func nameProblem(name string, snapshot bool) (string, error) {
	switch {
	case !snapshot && strings.Contains(name, "@"):
		return "snapshot delimiter '@' is not expected here", zfs.ErrInvalid
	case snapshot && !strings.Contains(name, "@"):
		return "missing '@' delimiter in snapshot name", zfs.ErrInvalid
	case strings.Contains(name, "#"):
		return "bookmark delimiter '#' is not expected here", zfs.ErrInvalid
	case strings.Contains(name, "%"):
		return "invalid character % in name", zfs.ErrInvalid
	case len(name) >= 256:
		return "name is too long", zfs.ErrInvalid
	case strings.HasPrefix(name, "/"):
		return "leading slash in name", nil
	case name == "":
		return emptyComponent, nil
	}
	delimited := false
	for start := 0; ; {
		end := start
		for end < len(name) && name[end] != '/' && name[end] != '@' {
			end++
		}
		if end == len(name) && name[end-1] == '/' {
			return "trailing slash in name", nil
		}
		for i := start; i < end; i++ {
			if !validNameByte(name[i]) {
				// The byte as zfs prints it, half a UTF-8 sequence or not.
				return "invalid character '" + name[i:i+1] + "' in name", zfs.ErrInvalid
			}
		}
		if component := name[start:end]; end == len(name) || name[end] == '/' {
			if component == "." {
				return "self reference, '.' is found in name", nil
			}
			if component == ".." {
				return "parent reference, '..' is found in name", nil
			}
		}
		if end < len(name) && name[end] == '@' {
			if delimited {
				return "multiple '@' and/or '#' delimiters in name", nil
			}
			delimited = true
		}
		if start == end {
			return emptyComponent, nil
		}
		if end == len(name) {
			return "", nil
		}
		if name[end] == '/' && delimited {
			return "trailing slash in name", nil // a '/' after the '@'
		}
		start = end + 1
	}
}

const emptyComponent = "empty component or misplaced '@' or '#' delimiter in name"

func validNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.: ", c) >= 0
}

// nameError is zfs's refusal of a name for op, or nil. zfs receive checks
// the name without asking for the reason (zfs_name_valid), so it says only
// "invalid name".
func nameError(op, name string, snapshot bool) error {
	message, kind := nameProblem(name, snapshot)
	switch {
	case message == "":
		return nil
	case op == "receive":
		return &zfs.CommandError{Argv: []string{"zfs", op, name}, ExitCode: 1, Kind: zfs.ErrInvalid,
			Stderr: "cannot receive: invalid name\n"}
	}
	prefix := map[string]string{"snapshot": "cannot create snapshot", "rename": "cannot rename to"}[op]
	if prefix == "" {
		prefix = "cannot create"
	}
	return &zfs.CommandError{Argv: []string{"zfs", op, name}, ExitCode: 1, Kind: kind,
		Stderr: fmt.Sprintf("%s '%s': %s\n", prefix, name, message)}
}

// dependentsError is zfs destroy's refusal of a dataset or snapshot that
// others need (destroy_check_dependent in cmd/zfs/zfs_main.c): its type,
// what it has, the flag that would take them too, and their names.
func dependentsError(name string, typ zfs.Type, has, flag string, blocking []string) error {
	sort.Strings(blocking)
	return &zfs.CommandError{Argv: []string{"zfs", "destroy", name}, ExitCode: 1, Kind: zfs.ErrHasDependents,
		Stderr: fmt.Sprintf("cannot destroy '%s': %s has %s\nuse '%s' to destroy the following datasets:\n%s\n",
			name, typ, has, flag, strings.Join(blocking, "\n"))}
}

// volsizeError is libzfs's refusal of a volsize for an existing zvol or a
// clone of one (zfs_valid_proplist in lib/libzfs/libzfs_dataset.c): off
// the block size (ErrInvalid to Exec: "must be "), or zero, in words Exec
// has no kind for; nil for a size it takes.
func volsizeError(op, name string, size, blockSize uint64) error {
	prefix := "cannot set property for"
	if op == "clone" {
		prefix = "cannot create"
	}
	refused := func(message string, kind error) error {
		return &zfs.CommandError{Argv: []string{"zfs", op, name}, ExitCode: 1, Kind: kind,
			Stderr: fmt.Sprintf("%s '%s': %s\n", prefix, name, message)}
	}
	switch {
	case size%blockSize != 0:
		// zfs_nicebytes of a power of two from 512 to 128K.
		nice := fmt.Sprintf("%dK", blockSize>>10)
		if blockSize < 1<<10 {
			nice = fmt.Sprintf("%dB", blockSize)
		}
		return refused("'volsize' must be a multiple of volume block size ("+nice+")", zfs.ErrInvalid)
	case size == 0:
		return refused("'volsize' cannot be zero", nil)
	}
	return nil
}

func (f *Fake) checkNewDataset(op, name string, typ zfs.Type, props map[string]string) error {
	if err := nameError(op, name, false); err != nil {
		return err
	}
	if _, exists := f.datasets[name]; exists {
		return f.fail(op, name, zfs.ErrExists)
	}
	parent, ok := f.datasets[parentOf(name)]
	if !ok || parent.typ != zfs.Filesystem {
		return &zfs.CommandError{Argv: []string{"zfs", op, name}, ExitCode: 1, Kind: zfs.ErrParentMissing,
			Stderr: "cannot " + op + " '" + name + "': parent does not exist"}
	}
	if err := checkProps(typ, props, true); err != nil {
		return f.fail(op, name, err)
	}
	return nil
}

// add inserts a new dataset if the pool has room for its reservation.
func (f *Fake) add(d *fakeDataset) error {
	pool := f.pools[zfs.PoolOf(d.name)]
	if f.allocated(zfs.PoolOf(d.name))+d.reservation()+d.referencedIfNew() > pool.size {
		return f.fail("create", d.name, zfs.ErrNoSpace)
	}
	f.clock = f.clock.Add(time.Second)
	d.creation, d.createTxg = f.clock, f.txg
	if d.typ == zfs.Snapshot {
		if parent, ok := f.datasets[datasetOf(d.name)]; ok {
			parent.written = 0 // ZFS's written counts from the newest snapshot
		}
	}
	f.inheritBlocks(d)
	f.setEncryptionRoot(d)
	f.datasets[d.name] = d
	return nil
}

// referencedIfNew is the space a new dataset takes beyond what it shares: a
// clone shares its origin's blocks, a received copy does not.
func (d *fakeDataset) referencedIfNew() uint64 {
	if d.origin != "" || d.typ == zfs.Snapshot {
		return 0
	}
	return d.referenced
}

func (f *Fake) remove(name string) {
	d, ok := f.datasets[name]
	if !ok {
		return // a deferred-destroyed origin that went with its last clone
	}
	delete(f.datasets, name)
	if d.origin == "" {
		return
	}
	if origin, ok := f.datasets[d.origin]; ok {
		delete(origin.clones, name)
		if origin.deferDestroy && len(origin.clones) == 0 {
			delete(f.datasets, d.origin)
		}
	}
}

// descendants are the children and snapshots below name, at any depth.
func (f *Fake) descendants(name string) []string {
	var out []string
	for candidate := range f.datasets {
		if candidate != name && isUnder(candidate, name) {
			out = append(out, candidate)
		}
	}
	return out
}

func isUnder(candidate, ancestor string) bool {
	return candidate == ancestor || strings.HasPrefix(candidate, ancestor+"/") || strings.HasPrefix(candidate, ancestor+"@")
}

func depthBelow(root, name string) int {
	rest := strings.TrimPrefix(name, root)
	return strings.Count(rest, "/") + strings.Count(rest, "@")
}

func parentOf(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return ""
}

func datasetOf(snapshot string) string {
	if i := strings.IndexByte(snapshot, '@'); i >= 0 {
		return snapshot[:i]
	}
	return snapshot
}

func snapshotOf(snapshot string) string {
	return snapshot[strings.IndexByte(snapshot, '@')+1:]
}

func hasType(types []zfs.Type, typ zfs.Type) bool {
	for _, t := range types {
		if t == typ {
			return true
		}
	}
	return false
}

func copyProps(props map[string]string) map[string]string {
	out := make(map[string]string, len(props))
	for k, v := range props {
		out[k] = v
	}
	return out
}

func (d *fakeDataset) sizeProp(key string) uint64 {
	if key == "refreservation" && d.props[key] == "auto" {
		return thickReservation(d.volSize, d.volBlockSize())
	}
	value, _ := strconv.ParseUint(d.props[key], 10, 64)
	return value
}

func (d *fakeDataset) volBlockSize() uint64 {
	if size := d.sizeProp("volblocksize"); size > 0 {
		return size
	}
	return defaultVolBlockSize22
}

// The volblocksize `zfs create -V` gives a zvol when none is asked for:
// 16 KiB from OpenZFS 2.2 (ZVOL_DEFAULT_BLOCKSIZE, raised in 2.2.0), 8 KiB
// before. The Fake's own figures, not zfs.DefaultVolBlockSize, so that a
// change to what the driver assumes cannot change what the Fake does.
const (
	defaultVolBlockSize21 = 8 << 10
	defaultVolBlockSize22 = 16 << 10
)

// defaultVolBlockSize is the default of the OpenZFS version the Fake plays.
func (f *Fake) defaultVolBlockSize() uint64 {
	if f.before22 {
		return defaultVolBlockSize21
	}
	return defaultVolBlockSize22
}

// reservation is the space held for the dataset whether written or not.
func (d *fakeDataset) reservation() uint64 {
	return max(d.sizeProp("refreservation"), d.sizeProp("reservation"))
}

// charge is what the dataset takes from its pool: its reservation or, past
// that, the data it holds itself (not shared with an origin).
func (d *fakeDataset) charge() uint64 {
	own := d.referenced
	if d.origin != "" || d.typ == zfs.Snapshot {
		own = 0
	}
	return max(d.reservation(), own)
}

func (f *Fake) allocated(pool string) uint64 {
	var total uint64
	for _, d := range f.datasets {
		if zfs.PoolOf(d.name) == pool {
			total += d.charge()
		}
	}
	return total
}

// checkSpaceProps refuses what the kernel refuses of a Set that changes d
// into updated (module/zfs/dsl_dataset.c, OpenZFS 2.3): a refquota below
// what the dataset references or its refreservation
// (dsl_dataset_set_refquota_check), a refreservation above the refquota or
// one that grows past the pool's free space
// (dsl_dataset_set_refreservation_check). Both are ENOSPC, which libzfs
// words by property (zfs_setprop_error in lib/libzfs/libzfs_util.c); Exec
// classifies the refquota's as ErrInvalid, the refreservation's as
// ErrNoSpace. Callers hold mu.
func (f *Fake) checkSpaceProps(d, updated *fakeDataset, properties map[string]string) error {
	refused := func(message string, kind error) error {
		return &zfs.CommandError{Argv: []string{"zfs", "set", d.name}, ExitCode: 1, Kind: kind,
			Stderr: fmt.Sprintf("cannot set property for '%s': %s\n", d.name, message)}
	}
	quota := updated.sizeProp("refquota")
	if _, setting := properties["refquota"]; setting && quota > 0 &&
		(quota < d.referenced || quota < d.sizeProp("refreservation")) {
		return refused("size is less than current used or reserved space", zfs.ErrInvalid)
	}
	if _, setting := properties["refreservation"]; setting && quota > 0 && updated.sizeProp("refreservation") > quota {
		return refused("size is greater than available space", zfs.ErrNoSpace)
	}
	pool := zfs.PoolOf(d.name)
	if grown := updated.charge(); grown > d.charge() && f.allocated(pool)-d.charge()+grown > f.pools[pool].size {
		return refused("size is greater than available space", zfs.ErrNoSpace)
	}
	return nil
}

// row renders a dataset as Exec's List would parse it from zfs.
func (f *Fake) row(d *fakeDataset, userProps []string) zfs.Dataset {
	pool := f.pools[zfs.PoolOf(d.name)]
	free := pool.size - f.allocated(zfs.PoolOf(d.name))
	used := d.charge()
	for _, name := range f.descendants(d.name) {
		used += f.datasets[name].charge()
	}
	row := zfs.Dataset{
		Name: d.name, Type: d.typ, Origin: d.origin, Used: used, Referenced: d.referenced,
		LogicalUsed: d.referenced, RefQuota: d.sizeProp("refquota"), RefReservation: d.sizeProp("refreservation"),
		Creation: d.creation, ReadOnly: f.inherited(d, "readonly") == "on", DeferDestroy: d.deferDestroy,
	}
	switch d.typ {
	case zfs.Volume:
		row.VolSize, row.VolBlockSize, row.Available = d.volSize, d.volBlockSize(), free
	case zfs.Filesystem:
		row.Available = free + d.reservation() - min(d.reservation(), d.referenced)
		if row.RefQuota > 0 {
			row.Available = min(row.Available, row.RefQuota-min(row.RefQuota, d.referenced))
		}
	case zfs.Snapshot:
		row.VolSize = d.volSize
		for clone := range d.clones {
			row.Clones = append(row.Clones, clone)
		}
		sort.Strings(row.Clones)
	}
	for _, key := range userProps {
		if value := f.inherited(d, key); value != "" {
			if row.User == nil {
				row.User = map[string]string{}
			}
			row.User[key] = value
		}
	}
	return row
}

// asListed makes a row what Exec's List reads from `zfs list -H -p`: zfs
// prints "-" for a property that is not set, so a value "-" reads as unset,
// and it prints values as they are, so a value with a tab or a newline
// breaks the columns or the rows and the listing fails to parse.
func asListed(row *zfs.Dataset, index int) error {
	for key, value := range row.User {
		if strings.ContainsAny(value, "\t\n") {
			return fmt.Errorf("zfs list: row %d: the value of %s holds a tab or newline, so the columns do not parse", index, key)
		}
		if value == "-" {
			delete(row.User, key)
		}
	}
	if len(row.User) == 0 {
		row.User = nil
	}
	return nil
}

// inherited resolves a property as ZFS does: set locally, or on the nearest
// ancestor (a snapshot's ancestor is its dataset).
func (f *Fake) inherited(d *fakeDataset, key string) string {
	for name := d.name; name != ""; {
		if current, ok := f.datasets[name]; ok {
			if value, set := current.props[key]; set {
				return value
			}
		}
		if strings.Contains(name, "@") {
			name = datasetOf(name)
		} else {
			name = parentOf(name)
		}
	}
	return ""
}

var _ zfs.Interface = (*Fake)(nil)
