// Package zfs is the only code in zfs-csi that talks to ZFS.
//
// It knows nothing of CSI, gRPC or any orchestrator: callers get typed values
// (Dataset, Pool, sizes in bytes as uint64) and typed errors (ErrNotFound,
// ErrExists, …) and decide what they mean. The real implementation (Exec) runs
// the zfs and zpool commands directly, without a shell, with LC_ALL=C and the
// caller's context deadline, and reads one dataset's identity (Inspect) with
// the ioctl zfs itself uses; Fake is a stateful in-memory pool for tests.
package zfs

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"
)

// Type is the kind of a ZFS dataset.
type Type string

// The dataset types the driver deals with.
const (
	Filesystem Type = "filesystem"
	Volume     Type = "volume"
	Snapshot   Type = "snapshot"
)

// Dataset is one row of `zfs list -H -p`: the native properties every caller
// needs, plus the user properties the caller asked for.
type Dataset struct {
	Name string
	Type Type
	// Origin is the snapshot a clone was made from; empty for other datasets.
	Origin string

	Used        uint64
	Referenced  uint64
	Available   uint64
	LogicalUsed uint64

	RefQuota       uint64 // filesystems; 0 means none
	RefReservation uint64
	VolSize        uint64 // volumes only
	VolBlockSize   uint64 // volumes only

	Creation time.Time
	ReadOnly bool
	// KeyStatus is "available" or "unavailable" for an encrypted dataset,
	// "" otherwise; read only when ListOptions.Crypto asks for it.
	KeyStatus string
	// EncryptionRoot is the dataset whose key opens this one (itself, the
	// origin's root for a clone, an encrypted ancestor's for a dataset that
	// inherits its encryption), "" when not encrypted; read with KeyStatus.
	// Keys load and unload only there, for every dataset sharing it.
	EncryptionRoot string
	// GUID identifies a snapshot (or dataset) for good: a receive keeps a
	// snapshot's GUID, so a snapshot received on another node is proven the
	// same as its source's by it. Written is what the dataset holds that its
	// newest snapshot does not (0 right after a snapshot with no write
	// since). Both read only when ListOptions.Provenance asks for them.
	GUID    uint64
	Written uint64
	// CreateTxg is the transaction group that made it; reported by
	// SnapshotGroup and by List with Provenance (0 elsewhere).
	CreateTxg uint64

	// UsedBySnapshots and CompressRatio are read only when ListOptions.Space
	// asks for them (zero otherwise). CompressRatio is 1.0 for data stored
	// uncompressed.
	UsedBySnapshots uint64
	CompressRatio   float64

	// Clones lists the clones of a snapshot; DeferDestroy is set on a snapshot
	// marked by `zfs destroy -d` that still has clones. Snapshots only.
	Clones       []string
	DeferDestroy bool

	// User holds the requested user properties that have a value (set here or
	// inherited); unset ones are absent.
	User map[string]string
	// Native holds the native properties ListOptions.Native asked for.
	Native map[string]string
}

// Pool is one row of `zpool list -H -p`.
type Pool struct {
	Name          string
	Health        string // ONLINE, DEGRADED, FAULTED, OFFLINE, UNAVAIL, REMOVED, SUSPENDED
	Size          uint64
	Allocated     uint64
	Free          uint64
	Fragmentation uint64 // percent
}

// CreateOptions describe a new filesystem or volume. Every property is set by
// the same `zfs create` command.
type CreateOptions struct {
	// VolSize makes a volume (zvol) of that many bytes; 0 makes a filesystem.
	VolSize uint64
	// Sparse makes a volume without a reservation (`zfs create -s`).
	Sparse bool
	// Properties are native and user properties, passed as -o name=value.
	Properties map[string]string
	// Key is the wrapping key or passphrase of a new encrypted dataset
	// (Properties set keylocation=prompt and keyformat): zfs reads it on
	// stdin, so that it is never in an argv, a file or a log line.
	Key []byte
}

// DestroyOptions select how Destroy treats descendants and dependents.
type DestroyOptions struct {
	// Recursive destroys snapshots and children too (`-r`).
	Recursive bool
	// Defer marks a snapshot that still has clones for destruction when the
	// last clone goes (`-d`); without clones it is destroyed at once.
	Defer bool
}

// ListOptions select what List reports.
type ListOptions struct {
	// Roots are the datasets to list; they are listed themselves (unless
	// their type is not in Types) along with descendants up to Depth.
	Roots []string
	// Depth limits descent below each root: 0 lists the roots only, -1 is
	// unlimited. Snapshots of a dataset count one level below it.
	Depth int
	// Types to report; empty means filesystems and volumes.
	Types []Type
	// UserProps are the user properties to read into Dataset.User.
	UserProps []string
	// SkipMissing makes roots that do not exist no error.
	SkipMissing bool
	// SkipSuspended makes roots in a pool whose I/O is suspended no error:
	// their rows are left out and the other roots' rows returned, so that
	// one stuck pool does not stop work on the others. A caller that needs
	// a complete listing checks that its roots are among the rows.
	SkipSuspended bool
	// Space also reads usedbysnapshots and compressratio (for metrics and
	// operator listings; the RPCs do not need them).
	Space bool
	// Crypto also reads keystatus ("available", "unavailable", or "" for a
	// dataset that is not encrypted) and encryptionroot: what staging needs
	// to know.
	Crypto bool
	// Provenance also reads guid and written: what proves that a snapshot
	// received elsewhere is this one, and that nothing was written since.
	Provenance bool
	// Native are other native properties to read into Dataset.Native, as
	// zfs prints them ("-" where one does not apply).
	Native []string
}

// CopyOptions are the options of Interface.Copy.
type CopyOptions struct {
	// Properties are set on the new dataset by the receive.
	Properties map[string]string
	// Received, when not nil, counts the bytes of the stream received so far:
	// a long copy's progress.
	Received *atomic.Uint64
}

// Interface is what the rest of the driver uses of ZFS. Each method is one
// zfs or zpool command (Copy is two, piped), so callers can count the
// commands an RPC costs.
type Interface interface {
	// Create makes a filesystem, or a volume when opts.VolSize > 0.
	Create(ctx context.Context, name string, opts CreateOptions) error
	// Clone makes name a clone of snapshot with the given properties.
	Clone(ctx context.Context, snapshot, name string, properties map[string]string) error
	// Copy makes name an independent copy of snapshot (zfs send | zfs receive).
	// The received snapshot is kept on name.
	Copy(ctx context.Context, snapshot, name string, opts CopyOptions) error
	// Snapshot makes the snapshot name ("dataset@snap") with the given properties.
	Snapshot(ctx context.Context, name string, properties map[string]string) error
	// Destroy destroys a dataset or a snapshot.
	Destroy(ctx context.Context, name string, opts DestroyOptions) error
	// Set sets properties of a dataset or snapshot in one command.
	Set(ctx context.Context, name string, properties map[string]string) error
	// Inherit removes properties set on a dataset (`zfs inherit`): a user
	// property goes, a native one takes its inherited or default value.
	// Several go in one transaction group, in the order given: a command
	// killed midway keeps a prefix of them, never a later one without an
	// earlier.
	Inherit(ctx context.Context, name string, properties ...string) error
	// List reports datasets as selected by opts. The order is zfs's own
	// (all roots merged, snapshots after their dataset): callers that need an
	// order sort the rows themselves.
	List(ctx context.Context, opts ListOptions) ([]Dataset, error)
	// Pool reports one pool.
	Pool(ctx context.Context, name string) (Pool, error)
	// LoadKey loads an encryption root's key (keylocation=prompt) from
	// key, on stdin. A wrong key is ErrKeyRejected; a dataset that is not
	// its own encryption root is ErrNotEncryptionRoot (ZFS loads keys only
	// at the root); a key already loaded is ErrKeyLoaded, which zfs says
	// before it reads the key given: that key is unchecked (VerifyKey).
	LoadKey(ctx context.Context, name string, key []byte) error
	// VerifyKey checks that key opens an encryption root without loading
	// it (`zfs load-key -n`, key on stdin), whether or not it is loaded: nil
	// when it does, ErrKeyRejected when not, ErrNotEncryptionRoot as LoadKey.
	VerifyKey(ctx context.Context, name string, key []byte) error
	// VolumeRanges reports the ranges of a zvol snapshot's data (from == "")
	// or of what changed since the earlier snapshot from, as the records of
	// a zfs send stream name them (send.go).
	VolumeRanges(ctx context.Context, snapshot, from string, fn func(StreamRange) error) error
	// Send writes `zfs send` of snapshot to w (transfer.go), checked by
	// opts.Check before a byte leaves.
	Send(ctx context.Context, snapshot string, opts SendOptions, w io.Writer) error
	// Receive reads a stream from r into name with a resumable `zfs
	// receive -s -u`: cut short, name keeps what arrived and a resume token.
	Receive(ctx context.Context, name string, opts ReceiveOptions, r io.Reader) error
	// ResumeToken is the receive_resume_token of name ("" for none).
	ResumeToken(ctx context.Context, name string) (string, error)
	// AbortReceive drops the partial state of a receive cut short.
	AbortReceive(ctx context.Context, name string) error
	// Rename renames a filesystem or volume within its pool.
	Rename(ctx context.Context, from, to string) error
	// PoolStatus reports a pool's vdev errors and data errors.
	PoolStatus(ctx context.Context, name string) (PoolStatus, error)
	// Guarded changes check ownership and make the change in one command.
	Guarded
}

// Errors classified from zfs stderr. Match with errors.Is; the concrete error
// also carries the command and its stderr.
var (
	ErrNotFound      = errors.New("dataset does not exist")
	ErrExists        = errors.New("dataset already exists")
	ErrBusy          = errors.New("dataset is busy")
	ErrNoSpace       = errors.New("out of space")
	ErrHasDependents = errors.New("dataset has children or dependent clones")
	ErrInvalid       = errors.New("invalid argument to zfs")
	ErrPoolSuspended = errors.New("pool I/O is currently suspended")
	ErrPoolNotFound  = errors.New("no such pool")
	ErrPermission    = errors.New("permission denied")
	// ErrParentMissing: the parent of a dataset being made does not exist
	// (the source of a clone or copy is there; its destination's parent is not).
	ErrParentMissing = errors.New("parent dataset does not exist")
	// ErrHeld: a snapshot carries a user hold (`zfs hold`, as zrepl and
	// syncoid place them) and cannot go until it is released.
	ErrHeld = errors.New("snapshot is held")
	// ErrReadOnlyPool: the pool was imported read-only.
	ErrReadOnlyPool = errors.New("pool is read-only")
	// ErrIO: ZFS met an I/O error (a faulted or missing device).
	ErrIO = errors.New("I/O error")
	// ErrProgram: a channel program failed in Lua (a bug of ours, never the
	// caller's input: arguments reach programs as data).
	ErrProgram = errors.New("channel program failed")
	// ErrCrossPool: a clone was asked for in another pool than its origin.
	ErrCrossPool = errors.New("source and target pools differ")
	// ErrKeyRejected: the key or passphrase given does not open the
	// encrypted dataset; nothing changed.
	ErrKeyRejected = errors.New("incorrect encryption key")
	// ErrKeyLoaded: load-key found the key already loaded.
	ErrKeyLoaded = errors.New("encryption key already loaded")
	// ErrNotEncryptionRoot: load-key was asked for a dataset whose key is
	// its encryption root's (a clone, or a child of an encrypted dataset);
	// the stderr names that root.
	ErrNotEncryptionRoot = errors.New("keys load only at the encryption root")
	// ErrKeyUnavailable: the dataset's key is not loaded, so it cannot be
	// mounted or its device used.
	ErrKeyUnavailable = errors.New("encryption key not loaded")
)

// Get reports one dataset (filesystem, volume or snapshot) with the given user
// properties, or ErrNotFound.
func Get(ctx context.Context, z Interface, name string, userProps []string) (Dataset, error) {
	return get(ctx, z, ListOptions{Roots: []string{name}, UserProps: userProps})
}

// GetWithKeyStatus is Get that also reads keystatus and encryptionroot
// (ListOptions.Crypto).
func GetWithKeyStatus(ctx context.Context, z Interface, name string, userProps []string) (Dataset, error) {
	return get(ctx, z, ListOptions{Roots: []string{name}, UserProps: userProps, Crypto: true})
}

func get(ctx context.Context, z Interface, opts ListOptions) (Dataset, error) {
	opts.Types = []Type{Filesystem, Volume, Snapshot}
	rows, err := z.List(ctx, opts)
	if err != nil {
		return Dataset{}, err
	}
	if len(rows) == 0 {
		return Dataset{}, ErrNotFound
	}
	return rows[0], nil
}

// PoolOf is the pool that holds a dataset or snapshot name.
func PoolOf(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == '@' {
			return name[:i]
		}
	}
	return name
}
