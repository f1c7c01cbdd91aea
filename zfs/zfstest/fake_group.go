package zfstest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// SnapshotGroup implements Guarded, following the rules of Exec's channel
// program (zfs/group.go): every member in the call's one transaction group.
//
// long: every rule of the channel program, in its order, under one lock
func (f *Fake) SnapshotGroup(ctx context.Context, req zfs.GroupSnapshotRequest) (zfs.GroupSnapshotResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "SnapshotGroup"); err != nil {
		return zfs.GroupSnapshotResult{}, err
	}
	if f.before22 {
		return zfs.GroupSnapshotResult{}, fmt.Errorf("zfs program: zfs.sync.set_prop: %w", zfs.ErrUnsupported)
	}
	if len(req.Datasets) == 0 || req.Snapshot == "" || req.Group == "" || req.Named == "" || req.Name == "" {
		return zfs.GroupSnapshotResult{}, fmt.Errorf("SnapshotGroup: %w", zfs.ErrInvalid)
	}
	requested := map[string]bool{}
	excludedAt := "" // the excluded mark stops only a change
	for _, dataset := range req.Datasets {
		if zfs.PoolOf(dataset) != zfs.PoolOf(req.Datasets[0]) {
			return zfs.GroupSnapshotResult{}, fmt.Errorf("SnapshotGroup: %s and %s: %w", req.Datasets[0], dataset, zfs.ErrCrossPool)
		}
		if err := f.suspended("program", dataset); err != nil {
			return zfs.GroupSnapshotResult{}, err
		}
		d, ok := f.datasets[dataset]
		if !ok || d.typ == zfs.Snapshot {
			return zfs.GroupSnapshotResult{}, f.fail("program", dataset, zfs.ErrNotFound)
		}
		if f.inherited(d, req.Guard.Owned) != "true" {
			return zfs.GroupSnapshotResult{Outcome: zfs.NotOwned, At: dataset}, nil
		}
		if excludedAt == "" && !f.passes(d, req.Guard) {
			excludedAt = dataset
		}
		requested[dataset] = true
	}
	for _, parent := range req.Parents {
		for _, child := range f.descendants(parent) {
			snapshot, ok := f.datasets[child+"@"+req.Snapshot]
			if parentOf(child) == parent && !requested[child] && ok && snapshot.props[req.Group] == req.Name {
				return zfs.GroupSnapshotResult{Outcome: zfs.Taken, At: snapshot.name}, nil
			}
		}
	}
	for _, other := range req.Others {
		dataset, _, _ := strings.Cut(other, "@")
		if snapshot, ok := f.datasets[other]; ok && !requested[dataset] && snapshot.props[req.Group] == req.Name {
			return zfs.GroupSnapshotResult{Outcome: zfs.Taken, At: other}, nil
		}
	}
	whole, leftovers, missing, member := 0, 0, 0, ""
	for _, dataset := range req.Datasets {
		snapshot, ok := f.datasets[dataset+"@"+req.Snapshot]
		switch {
		case !ok:
			missing++
		case snapshot.deferDestroy: // a deleted group's member, kept by a clone
			return zfs.GroupSnapshotResult{}, f.fail("program", snapshot.name, zfs.ErrExists)
		case snapshot.props[req.Group] == req.Name && snapshot.props[req.Named] == req.Name+"/"+dataset:
			whole, member = whole+1, snapshot.name
		case snapshot.props[req.Named] == "" && (snapshot.props[req.Group] == req.Name ||
			snapshot.props[req.Group] == "" && req.Pending != "" && f.inherited(f.datasets[dataset], req.Pending) == req.Name):
			leftovers++ // what an interrupted call left: marked with the group, or bare on a dataset marked pending
		default:
			return zfs.GroupSnapshotResult{}, f.fail("program", snapshot.name, zfs.ErrExists)
		}
	}
	if whole > 0 && missing > 0 {
		return zfs.GroupSnapshotResult{Outcome: zfs.Taken, At: member}, nil
	}
	outcome := zfs.Present
	if whole != len(req.Datasets) && excludedAt != "" {
		return zfs.GroupSnapshotResult{Outcome: zfs.NotOwned, At: excludedAt}, nil
	}
	if whole != len(req.Datasets) {
		outcome = zfs.Done
		if whole+leftovers > 0 {
			// Exec destroys them and runs the program again: a new
			// transaction group for every member.
			for _, dataset := range req.Datasets {
				if _, ok := f.datasets[dataset+"@"+req.Snapshot]; ok {
					f.remove(dataset + "@" + req.Snapshot)
				}
			}
			f.txg++
		}
		for _, dataset := range req.Datasets {
			if err := f.takeMember(req, dataset); err != nil {
				return zfs.GroupSnapshotResult{}, err
			}
		}
	}
	result := zfs.GroupSnapshotResult{Outcome: outcome}
	for _, dataset := range req.Datasets {
		d, snapshot := f.datasets[dataset], f.datasets[dataset+"@"+req.Snapshot]
		member := f.row(snapshot, nil)
		member.User, member.CreateTxg, member.VolSize = nil, snapshot.createTxg, snapshot.volSize
		if value := snapshot.props[req.SizeProperty]; req.SizeProperty != "" && value != "" {
			member.User = map[string]string{req.SizeProperty: value}
		}
		result.Members = append(result.Members, member)
		result.Volumes = append(result.Volumes, f.snapshottedVolume(d, ""))
	}
	return result, nil
}

// ProgramsSetProperties implements Guarded: the Fake's programs set
// properties unless PlayBefore22 was called.
func (f *Fake) ProgramsSetProperties(ctx context.Context, pool string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, "ProgramsSetProperties"); err != nil {
		return false, err
	}
	return !f.before22, nil
}

// PlayBefore22 makes the Fake answer as an older ZFS may: new zvols get
// 8 KiB blocks (OpenZFS 2.1's default), and programs cannot set properties
// (no zfs.sync.set_prop, which 2.1.11 does have), so SnapshotGuarded and
// SnapshotGroup are ErrUnsupported.
func (f *Fake) PlayBefore22() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.before22 = true
}

// takeMember snapshots one dataset of a group with the group's marks.
// Callers hold mu.
func (f *Fake) takeMember(req zfs.GroupSnapshotRequest, dataset string) error {
	d := f.datasets[dataset]
	name := dataset + "@" + req.Snapshot
	if message, _ := nameProblem(name, true); message != "" {
		return f.fail("program", name, zfs.ErrInvalid)
	}
	props := map[string]string{req.Group: req.Name, req.Named: req.Name + "/" + dataset}
	if req.CountProperty != "" {
		props[req.CountProperty] = strconv.Itoa(len(req.Datasets))
	}
	delete(d.props, req.Pending) // set before the snapshot, taken away with its marks
	if req.SizeProperty != "" {
		size := d.sizeProp("refquota")
		if d.typ == zfs.Volume {
			size = d.volSize
		}
		props[req.SizeProperty] = strconv.FormatUint(size, 10)
	}
	return f.add(&fakeDataset{name: name, typ: zfs.Snapshot, referenced: d.referenced, volSize: d.volSize,
		props: props, clones: map[string]bool{}})
}
