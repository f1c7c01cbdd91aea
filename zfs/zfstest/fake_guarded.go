package zfstest

import (
	"context"
	"fmt"
	"github.com/zfs-csi/zfs-csi/zfs"
	"strconv"
	"strings"
)

// DestroyGuarded implements Guarded, following the rules of Exec's channel
// program.
func (f *Fake) DestroyGuarded(ctx context.Context, req zfs.DestroyRequest) (zfs.DestroyResult, error) {
	name := req.Name
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.datasets[name]
	if err := f.begin(ctx, "DestroyGuarded"); err != nil {
		if ok { // an injected failure (such as zfs.ErrBusy) still says what it met
			return zfs.DestroyResult{Type: d.typ}, err
		}
		return zfs.DestroyResult{}, err
	}
	if err := f.suspended("program", name); err != nil {
		return zfs.DestroyResult{}, err
	}
	if !ok || d.typ == zfs.Snapshot {
		return zfs.DestroyResult{}, f.fail("program", name, zfs.ErrNotFound)
	}
	result := zfs.DestroyResult{Type: d.typ}
	if !f.passes(d, req.Guard) {
		result.Outcome = zfs.NotOwned
		return result, nil
	}
	var snapshots []string
	held := false
	for _, child := range f.descendants(name) {
		if !strings.HasPrefix(child, name+"@") {
			result.Outcome, result.Reason = zfs.Blocked, "it has a child dataset, "+child+", that the driver did not make"
			return result, nil
		}
		snapshot := f.datasets[child]
		if snapshot.holds > 0 {
			result.Outcome, result.Reason = zfs.Blocked, "its snapshot "+child+" has a user hold"
			return result, nil
		}
		held = held || len(snapshot.clones) > 0
		for _, key := range req.Keep {
			held = held || f.inherited(snapshot, key) != ""
		}
		snapshots = append(snapshots, child)
	}
	if held {
		result.Outcome = zfs.Held
		return result, nil
	}
	if f.busy[name] {
		// The program destroys the snapshots before it meets the busy
		// dataset, and keeps what it destroyed.
		for _, snapshot := range snapshots {
			f.remove(snapshot)
		}
		return result, f.fail("program", name, zfs.ErrBusy)
	}
	for _, snapshot := range snapshots {
		f.remove(snapshot)
	}
	if origin, ok := f.datasets[d.origin]; ok {
		for _, key := range req.OriginMarks {
			result.OriginMarked = result.OriginMarked || f.inherited(origin, key) != ""
		}
	}
	result.Outcome, result.Origin = zfs.Done, d.origin
	f.remove(name)
	return result, nil
}

// SnapshotGuarded implements Guarded, following the rules of Exec's channel
// program (on a ZFS that has zfs.sync.set_prop; FailNext("SnapshotGuarded",
// ErrUnsupported) plays an older one).
func (f *Fake) SnapshotGuarded(ctx context.Context, req zfs.SnapshotRequest) (zfs.SnapshotResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "SnapshotGuarded"); err != nil {
		return zfs.SnapshotResult{}, err
	}
	if err := f.suspended("snapshot", req.Name); err != nil {
		return zfs.SnapshotResult{}, err
	}
	dataset, _, found := strings.Cut(req.Name, "@")
	value, unique := req.Properties[req.Unique]
	if !found || !unique {
		return zfs.SnapshotResult{}, fmt.Errorf("SnapshotGuarded %q: %w", req.Name, zfs.ErrInvalid)
	}
	d, ok := f.datasets[dataset]
	if !ok || d.typ == zfs.Snapshot {
		return zfs.SnapshotResult{}, f.fail("program", dataset, zfs.ErrNotFound)
	}
	// The managed mark first; the excluded one stops only a change.
	if f.inherited(d, req.Guard.Owned) != "true" {
		return zfs.SnapshotResult{Outcome: zfs.NotOwned}, nil
	}
	carries := func(name string) bool {
		snapshot, ok := f.datasets[name]
		return ok && snapshot.typ == zfs.Snapshot && !snapshot.deferDestroy && f.inherited(snapshot, req.Unique) == value
	}
	present := func(name string) zfs.SnapshotResult {
		return zfs.SnapshotResult{Outcome: zfs.Present, Snapshot: f.row(f.datasets[name], sizeProps(req)), Volume: f.snapshottedVolume(d, req.Report)}
	}
	for _, other := range req.Others {
		if carries(other) {
			if strings.HasPrefix(other, dataset+"@") {
				return present(other), nil
			}
			return zfs.SnapshotResult{Outcome: zfs.Taken, Snapshot: f.row(f.datasets[other], nil)}, nil
		}
	}
	if carries(req.Name) {
		return present(req.Name), nil
	}
	if !f.passes(d, req.Guard) {
		return zfs.SnapshotResult{Outcome: zfs.NotOwned}, nil
	}
	snapshot, exists := f.datasets[req.Name]
	switch {
	case exists && (req.Pending == "" || f.inherited(d, req.Pending) != value || f.inherited(snapshot, req.Unique) != "" ||
		(req.Internal != "" && f.inherited(snapshot, req.Internal) != "")):
		// Not what an interrupted run of this request left (it marks the
		// dataset before it snapshots): someone else's.
		return zfs.SnapshotResult{}, f.fail("program", req.Name, zfs.ErrExists)
	case !exists:
		if message, _ := nameProblem(req.Name, true); message != "" {
			return zfs.SnapshotResult{}, f.fail("program", req.Name, zfs.ErrInvalid)
		}
		snapshot = &fakeDataset{name: req.Name, typ: zfs.Snapshot, referenced: d.referenced, volSize: d.volSize,
			props: map[string]string{}, clones: map[string]bool{}}
		if err := f.add(snapshot); err != nil {
			return zfs.SnapshotResult{}, err
		}
	}
	// else: an interrupted earlier call's snapshot, which gets its properties now.
	for key, value := range req.Properties {
		snapshot.props[key] = value
	}
	delete(d.props, req.Pending) // the program's mark goes when the properties are set
	if req.SizeProperty != "" {
		size := d.sizeProp("refquota")
		if d.typ == zfs.Volume {
			size = snapshot.volSize
		}
		snapshot.props[req.SizeProperty] = strconv.FormatUint(size, 10)
	}
	return zfs.SnapshotResult{Outcome: zfs.Done, Snapshot: f.row(snapshot, sizeProps(req)), Volume: f.snapshottedVolume(d, req.Report)}, nil
}

// sizeProps is the user property a SnapshotResult reports of its snapshot.
func sizeProps(req zfs.SnapshotRequest) []string {
	if req.SizeProperty == "" {
		return nil
	}
	return []string{req.SizeProperty}
}

// snapshottedVolume is SnapshotResult.Volume: the facts Exec's program
// reports of the dataset it snapshotted.
func (f *Fake) snapshottedVolume(d *fakeDataset, report string) zfs.Dataset {
	volume := zfs.Dataset{Name: d.name, Type: d.typ, VolSize: d.volSize, RefQuota: d.sizeProp("refquota")}
	if d.typ == zfs.Volume {
		volume.VolBlockSize = d.volBlockSize()
	}
	if value := f.inherited(d, report); report != "" && value != "" {
		volume.User = map[string]string{report: value}
	}
	return volume
}

// DestroySnapshotGuarded implements Guarded, following the rules of Exec's
// channel program.
func (f *Fake) DestroySnapshotGuarded(ctx context.Context, req zfs.SnapshotDestroyRequest) (zfs.SnapshotDestroyResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "DestroySnapshotGuarded"); err != nil {
		return zfs.SnapshotDestroyResult{}, err
	}
	if err := f.suspended("destroy", req.Name); err != nil {
		return zfs.SnapshotDestroyResult{}, err
	}
	if !strings.Contains(req.Name, "@") || req.Named == "" {
		return zfs.SnapshotDestroyResult{}, fmt.Errorf("DestroySnapshotGuarded %q: %w", req.Name, zfs.ErrInvalid)
	}
	d, ok := f.datasets[req.Name]
	if !ok {
		return zfs.SnapshotDestroyResult{}, f.fail("program", req.Name, zfs.ErrNotFound)
	}
	if f.inherited(d, req.Named) == "" || (req.Excluded != "" && f.inherited(d, req.Excluded) != "") || d.deferDestroy {
		return zfs.SnapshotDestroyResult{Outcome: zfs.NotOwned}, nil
	}
	if value := d.props[req.Refused]; req.Refused != "" && value != "" {
		return zfs.SnapshotDestroyResult{Outcome: zfs.Refused, Reported: value}, nil
	}
	result := zfs.SnapshotDestroyResult{Outcome: zfs.Done}
	if req.Report != "" {
		result.Reported = f.inherited(d, req.Report)
	}
	if len(d.clones) > 0 || d.holds > 0 {
		d.deferDestroy = true
	} else {
		f.remove(req.Name)
	}
	return result, nil
}

// passes reports whether a dataset passes a Guard.
func (f *Fake) passes(d *fakeDataset, guard zfs.Guard) bool {
	return f.inherited(d, guard.Owned) == "true" && (guard.Excluded == "" || f.inherited(d, guard.Excluded) == "")
}

// Hold places a user hold on a snapshot, as `zfs hold` does (zrepl and
// syncoid hold the snapshots they still need).
func (f *Fake) Hold(snapshot string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.datasets[snapshot]
	if !ok || d.typ != zfs.Snapshot {
		return f.fail("hold", snapshot, zfs.ErrNotFound)
	}
	d.holds++
	return nil
}

// Release takes away a user hold Hold placed (`zfs release`).
func (f *Fake) Release(snapshot string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.datasets[snapshot]
	if !ok || d.typ != zfs.Snapshot || d.holds == 0 {
		return f.fail("release", snapshot, zfs.ErrNotFound)
	}
	d.holds--
	return nil
}
