package zfs

import (
	"context"
	"errors"
)

// Guarded changes check and change in one command and one transaction
// group: nothing can slip between the check and the change, and the caller
// pays one zfs command instead of a zfs list and a change. Exec runs them as
// ZFS channel programs (`zfs program`, program.go); Fake follows the same
// rules in memory.

// Guard is the ownership a guarded change checks on the dataset it changes.
type Guard struct {
	// Owned is a user property the dataset must carry with the value "true".
	Owned string
	// Excluded is a user property the dataset must not carry (a mark such as
	// "deleted"); empty for none.
	Excluded string
}

// Outcome is what a guarded change did.
type Outcome string

// The outcomes of guarded changes. A missing dataset is ErrNotFound, not an
// outcome.
const (
	// Done: the change was made.
	Done Outcome = "done"
	// NotOwned: the dataset does not pass the Guard; nothing changed.
	NotOwned Outcome = "not-owned"
	// Held: DestroyGuarded found a snapshot that must outlive the dataset;
	// nothing changed.
	Held Outcome = "held"
	// Blocked: DestroyGuarded found something that stops the destroy and
	// that only an operator can remove (a child dataset, a user hold on a
	// snapshot); nothing changed, Reason says what.
	Blocked Outcome = "blocked"
	// Present: SnapshotGuarded found a snapshot of the dataset already
	// carrying the unique value; nothing changed, Snapshot describes it.
	Present Outcome = "present"
	// Refused: DestroySnapshotGuarded found the snapshot carrying the
	// request's Refused mark; nothing changed.
	Refused Outcome = "refused"
	// Taken: SnapshotGuarded found one of the other snapshots carrying the
	// unique value; nothing changed, Snapshot names it.
	Taken Outcome = "taken"
)

// ErrUnsupported is returned by guarded changes this ZFS cannot make in one
// transaction (SnapshotGuarded needs channel programs that set properties,
// zfs.sync.set_prop: OpenZFS 2.1.11 and 2.3.2 both have it). Nothing changed;
// the caller falls back to separate commands.
var ErrUnsupported = errors.New("not supported by this ZFS version")

// DestroyRequest describes a DestroyGuarded call.
type DestroyRequest struct {
	// Name is the filesystem or volume.
	Name string
	// Guard is checked on it.
	Guard Guard
	// Keep are user properties a snapshot of it must not carry (with any
	// value) for it to go.
	Keep []string
	// OriginMarks are user properties looked up on a clone's origin
	// snapshot, its own or inherited from the origin's dataset; the result
	// says whether any was set.
	OriginMarks []string
}

// DestroyResult describes a DestroyGuarded call.
type DestroyResult struct {
	Outcome Outcome
	// Type is the dataset's type (also when the outcome is not Done, and
	// alongside ErrBusy).
	Type Type
	// Origin is the destroyed dataset's origin snapshot, for a clone.
	Origin string
	// OriginMarked: the origin snapshot carried one of the request's
	// OriginMarks (as it was before the destroy).
	OriginMarked bool
	// Reason says what blocks the destroy (outcome Blocked).
	Reason string
}

// SnapshotRequest describes a SnapshotGuarded call.
type SnapshotRequest struct {
	// Name is the new snapshot, "dataset@snap".
	Name string
	// Properties are user properties the snapshot gets.
	Properties map[string]string
	// Guard is checked on the dataset.
	Guard Guard
	// Unique is a key of Properties whose value no live snapshot (one not
	// marked by `zfs destroy -d`) at Name or among Others may already
	// carry: one at Name or among Others of the same dataset is Present,
	// one among Others of another dataset is Taken.
	Unique string
	// Others are the snapshots that may carry the unique value (the
	// caller's index of them); ones that do not exist are ignored. The
	// dataset's other snapshots are not read, so the cost of a call does
	// not grow with their number.
	Others []string
	// Report is a user property of the dataset to return in Volume.User
	// (inherited values included); empty for none.
	Report string
	// SizeProperty is a user property the new snapshot gets with the
	// dataset's size in the snapshot's transaction (a volume's volsize, a
	// filesystem's refquota), and that Snapshot.User reports for a Done or
	// Present snapshot; empty for none.
	SizeProperty string
	// Internal is a user property marking snapshots that are not this
	// request's to take over.
	Internal string
	// Pending is a user property the dataset carries, with the unique
	// value, from just before the snapshot is made until its properties are
	// set (a signal can end a program between the two). A snapshot at Name
	// that carries neither Unique nor Internal is taken over (it gets the
	// properties) only while the dataset carries Pending with this value:
	// what an interrupted earlier call left. Any other is ErrExists. Empty:
	// nothing is ever taken over.
	Pending string
}

// SnapshotResult describes a SnapshotGuarded call.
type SnapshotResult struct {
	Outcome Outcome
	// Snapshot is the new snapshot (Done), the dataset's snapshot already
	// carrying the value (Present) or the other one (Taken), with its name,
	// Referenced and Creation.
	Snapshot Dataset
	// Volume is the snapshotted dataset as the same transaction saw it
	// (Done and Present): its Name, Type, VolSize and VolBlockSize (a
	// volume) or RefQuota (a filesystem), and the Report property in User
	// when it is set.
	Volume Dataset
}

// SnapshotDestroyRequest describes a DestroySnapshotGuarded call.
type SnapshotDestroyRequest struct {
	// Name is the snapshot, "dataset@snap".
	Name string
	// Named is a user property the snapshot must carry, with any value.
	Named string
	// Excluded is a user property it must not carry; empty for none.
	Excluded string
	// Report is a user property whose value, as the snapshot sees it (its
	// own or inherited from its dataset), the result reports.
	Report string
	// Refused is a user property that keeps an owned snapshot from being
	// destroyed alone (a group snapshot's member): the outcome is Refused,
	// with its value in Reported, and nothing changes. Empty for none.
	Refused string
}

// SnapshotDestroyResult describes a DestroySnapshotGuarded call.
type SnapshotDestroyResult struct {
	Outcome Outcome
	// Reported is the value of the request's Report property ("" for none).
	Reported string
}

// Guarded is implemented by Exec and Fake. Each call is one zfs command.
type Guarded interface {
	// DestroyGuarded destroys a filesystem or volume and its snapshots when
	// it passes req.Guard and none of its snapshots has clones or carries any
	// of the req.Keep user properties (Held otherwise), and it has no child
	// dataset and no snapshot with a user hold (Blocked otherwise).
	// ErrNotFound when it does not exist; ErrBusy when it is in use
	// (mounted, or a zvol held open).
	DestroyGuarded(ctx context.Context, req DestroyRequest) (DestroyResult, error)
	// SnapshotGuarded makes a snapshot with its properties when the dataset
	// passes the guard and the unique value is free. A snapshot already
	// carrying the value is Present when the dataset carries Guard.Owned,
	// whatever Guard.Excluded says (a retry after the volume was deleted).
	// ErrNotFound when the dataset does not exist, ErrExists when a snapshot
	// of that name exists without the value (see Pending), ErrUnsupported
	// (nothing changed) on a ZFS without zfs.sync.set_prop.
	SnapshotGuarded(ctx context.Context, req SnapshotRequest) (SnapshotResult, error)
	// DestroySnapshotGuarded destroys a snapshot as `zfs destroy -d` does (at
	// once, or with its last clone) when it carries req.Named, does not carry
	// req.Excluded and is not already marked for deferred destruction
	// (NotOwned otherwise: nothing changed). ErrNotFound when it does not
	// exist.
	DestroySnapshotGuarded(ctx context.Context, req SnapshotDestroyRequest) (SnapshotDestroyResult, error)
	// SnapshotGroup snapshots every dataset of req in one transaction group
	// when all pass the guard and the group's name is free (group.go).
	// ErrNotFound when a dataset does not exist, ErrExists when a snapshot
	// of that name exists that is no member of this group, ErrCrossPool for
	// datasets of several pools, ErrUnsupported (nothing changed) on a ZFS
	// without zfs.sync.set_prop.
	SnapshotGroup(ctx context.Context, req GroupSnapshotRequest) (GroupSnapshotResult, error)
	// ProgramsSetProperties reports whether channel programs on pool can
	// set properties (zfs.sync.set_prop; measured in OpenZFS 2.1.11 and
	// 2.3.2): what SnapshotGuarded
	// and SnapshotGroup need.
	ProgramsSetProperties(ctx context.Context, pool string) (bool, error)
}
