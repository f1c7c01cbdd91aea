package controller

import (
	"strings"
	"sync"
)

// sourceIndex remembers the snapshots this service has seen to be live CSI
// snapshots of its own, with what CreateVolume needs of them as a content
// source (kind, filesystem, least size), so that a volume from a known
// snapshot is one `zfs clone` instead of a `zfs list` and a `zfs clone`
// (in the emulated e2e guest the list is ~110 ms of a ~250 ms clone; make
// bench).
//
// An entry is only ever what ZFS told this service: CreateSnapshot fills it
// from the channel program that made (or found) the snapshot, which reports
// the snapshotted volume in the same transaction, and resolveSource from the
// listing it makes when it has no entry. The clone itself checks that the
// snapshot still exists: `zfs clone` of one that is gone fails with ENOENT,
// which forgets the entry and answers NOT_FOUND, as the listing would have.
//
// Every change this service makes to what an entry says forgets it, after
// the change: DeleteSnapshot (a snapshot with clones lives on, deferred, but
// is no CSI snapshot any more), and DeleteVolume, ControllerExpandVolume and
// ControllerModifyVolume of its volume (the size of a dataset's snapshot as
// a source is at least the volume's refquota). A fill records the epoch from
// before it read ZFS and is dropped if anything was forgotten since, so a
// read that raced with a deletion cannot bring the entry back. What it
// cannot see is a change made by hand outside the driver (`zfs destroy -d`
// of a CSI snapshot, a mark removed): until the daemon restarts, a clone of
// such a snapshot is made as it was before the change.
type sourceIndex struct {
	mu    sync.Mutex
	epoch uint64
	// byVolume: volume dataset → snapshot name → source.
	byVolume map[string]map[string]source
}

// begin returns the epoch to pass to remember for what is read from now on.
func (x *sourceIndex) begin() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.epoch
}

// remember records a snapshot source read since begin returned epoch,
// unless something was forgotten since.
func (x *sourceIndex) remember(epoch uint64, src source) {
	volume, _, _ := strings.Cut(src.snapshot, "@")
	x.mu.Lock()
	defer x.mu.Unlock()
	if epoch != x.epoch {
		return
	}
	if x.byVolume == nil {
		x.byVolume = map[string]map[string]source{}
	}
	if x.byVolume[volume] == nil {
		x.byVolume[volume] = map[string]source{}
	}
	x.byVolume[volume][src.snapshot] = src
}

// lookup returns the source remembered for a snapshot.
func (x *sourceIndex) lookup(snapshot string) (source, bool) {
	volume, _, _ := strings.Cut(snapshot, "@")
	x.mu.Lock()
	defer x.mu.Unlock()
	src, ok := x.byVolume[volume][snapshot]
	return src, ok
}

// forget drops a snapshot.
func (x *sourceIndex) forget(snapshot string) {
	volume, _, _ := strings.Cut(snapshot, "@")
	x.mu.Lock()
	defer x.mu.Unlock()
	x.epoch++
	delete(x.byVolume[volume], snapshot)
}

// forgetVolume drops every snapshot of a volume.
func (x *sourceIndex) forgetVolume(volume string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.epoch++
	delete(x.byVolume, volume)
}
