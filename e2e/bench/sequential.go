package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/zfs-csi/zfs-csi/rules"
)

// item is one comparison of section 1: round i of the driver's call and of
// the bare command.
type item struct {
	what   string
	count  string // the section-6 label whose commands it shows
	driver func(ctx context.Context, i int) error
	bare   func(ctx context.Context, i int) error
	// program, when set, is the CSI name prefix the item's zfs program
	// carries: the item gets a second row, the program alone (its duration
	// as the daemon logged it) against the same bare commands, which
	// splits the call's cost into the program's and the daemon's.
	program string
	// bareProgram, when set, runs the zfs program the driver ran for the
	// call on the bare side's objects (programs.go) and returns its time
	// (set-up it needs is not timed): a third side, and a row of its own.
	bareProgram func(ctx context.Context, i int) (time.Duration, error)
	// prototype, when set, is a design option measured beside the others
	// (the snapshot program's prototype): a fourth side and a row of its own.
	prototype *prototype
}

// prototype is a side that runs a design option bare.
type prototype struct {
	what string
	run  func(ctx context.Context, i int) (time.Duration, error)
}

// sequential is section 1, on a daemon of its own (parent <pool>/bench/seq;
// the bare side works in <pool>/bench/bare). The items build on each other:
// snapshots of the datasets, clones of the snapshots; then the deletions
// take the clones, the snapshots and the datasets away again.
//
// long: one bench section whose rows build on the volumes before them
func (b *bench) sequential(ctx context.Context) error {
	cfg := b.daemonConfig("seq")
	// Debug: each zfs command with its duration, for the program rows. No
	// periodic reaper pass: the background rows show what the calls
	// themselves leave running, and the sweep at start is waited out.
	cfg.extra = []string{"--log-level", "debug", "--reap-interval", "1h"}
	d, err := startDaemon(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.stop()
	d.quiesce()
	logPath := filepath.Join(cfg.dir, "driver.log")
	n := b.cfg.n
	if err := b.roomFor(ctx, n); err != nil {
		return err
	}
	datasets, snapshots, clones := make([]*csi.Volume, n), make([]*csi.Snapshot, n), make([]*csi.Volume, n)
	bareDataset := func(kind string, i int) string { return b.dataset("bare") + fmt.Sprintf("/%s-%d", kind, i) }
	bareSnapshot := func(i int) string { return bareDataset("fs", i) + "@snap" }
	csiName, snapshotName := b.props.CSIName, b.props.SnapshotName
	bareCreate := func(templateName, kind string) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			name := fmt.Sprintf("bare-%s-%d", kind, i)
			return b.zfs(ctx, b.templates[templateName].with(map[string]string{csiName: name}, bareDataset(kind, i)))
		}
	}
	bareDestroy := func(name func(int) string) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error { return b.zfs(ctx, []string{"destroy", name(i)}) }
	}
	deleteVolume := func(volumes []*csi.Volume) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			_, err := d.controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volumes[i].GetVolumeId()})
			return err
		}
	}
	deep, bareDeep, err := b.deepSnapshots(ctx, d)
	if err != nil {
		return err
	}
	// The program side's objects: a second snapshot of each bare dataset
	// (and a clone of it), a dataset of its own to destroy.
	programSnapshot := func(i int) string { return bareDataset("fs", i) + "@prog" }
	minimal := func(values func(i int) map[string]string) *prototype {
		t, ok := b.programs["snapshot"]
		if !ok {
			return nil
		}
		return &prototype{"the minimal snapshot program (snapshot + properties, nothing read) run bare",
			func(ctx context.Context, i int) (time.Duration, error) {
				took, err := b.runProgram(ctx, t.as(values(i)).minimal())
				if err == nil { // untimed: the bare dataset's deletion must find it gone
					err = b.zfs(ctx, []string{"destroy", values(i)["snapshot"]})
				}
				return took, err
			}}
	}
	program := func(name string, values func(i int) map[string]string, setUp func(ctx context.Context, i int) error) func(ctx context.Context, i int) (time.Duration, error) {
		t, ok := b.programs[name]
		if _, made := b.programs["snapshot"]; !ok || name != "destroy" && !made {
			return nil // the program sides of the deletions take the snapshots its side made
		}
		return func(ctx context.Context, i int) (time.Duration, error) {
			if setUp != nil {
				if err := setUp(ctx, i); err != nil {
					return 0, err
				}
			}
			return b.runProgram(ctx, t.as(values(i)))
		}
	}
	items := []item{
		{"CreateVolume dataset 1GiB +3 props vs zfs create", "CreateVolume dataset",
			func(ctx context.Context, i int) (err error) {
				datasets[i], err = createVolume(ctx, d, volumeRequest(fmt.Sprintf("seq-fs-%d", i), mountCapability(""), false))
				return err
			}, bareCreate("create-fs", "fs"), "", nil, nil},
		{"CreateVolume zvol 1GiB +3 props vs zfs create -V", "CreateVolume zvol",
			func(ctx context.Context, i int) error {
				_, err := createVolume(ctx, d, volumeRequest(fmt.Sprintf("seq-zvol-%d", i), blockCapability(), false))
				return err
			}, bareCreate("create-zvol", "zvol"), "", nil, nil},
		{"CreateSnapshot vs zfs snapshot", "CreateSnapshot",
			func(ctx context.Context, i int) error {
				response, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("seq-snap-%d", i),
					SourceVolumeId: datasets[i].GetVolumeId()})
				snapshots[i] = response.GetSnapshot()
				return err
			},
			func(ctx context.Context, i int) error {
				return b.zfs(ctx, b.templates["snapshot"].with(map[string]string{snapshotName: fmt.Sprintf("bare-snap-%d", i)}, bareSnapshot(i)))
			}, "seq-snap-",
			program("snapshot", func(i int) map[string]string {
				return map[string]string{"snapshot": programSnapshot(i), "dataset": bareDataset("fs", i), "name": fmt.Sprintf("bare-psnap-%d", i)}
			}, nil),
			minimal(func(i int) map[string]string {
				return map[string]string{"snapshot": bareDataset("fs", i) + "@min", "dataset": bareDataset("fs", i), "name": fmt.Sprintf("bare-msnap-%d", i)}
			})},
		{fmt.Sprintf("CreateSnapshot, %d+ snapshots on the volume, vs zfs snapshot", snapshotDepth), "CreateSnapshot",
			func(ctx context.Context, i int) error {
				_, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("seq-deep-new-%d", i),
					SourceVolumeId: deep.GetVolumeId()})
				return err
			},
			func(ctx context.Context, i int) error {
				return b.zfs(ctx, b.templates["snapshot"].with(map[string]string{snapshotName: fmt.Sprintf("bare-deep-new-%d", i)},
					fmt.Sprintf("%s@new-%d", bareDeep, i)))
			}, "seq-deep-new-",
			program("snapshot", func(i int) map[string]string {
				return map[string]string{"snapshot": fmt.Sprintf("%s@pnew-%d", bareDeep, i), "dataset": bareDeep, "name": fmt.Sprintf("bare-pdeep-new-%d", i)}
			}, nil),
			minimal(func(i int) map[string]string {
				return map[string]string{"snapshot": fmt.Sprintf("%s@mnew-%d", bareDeep, i), "dataset": bareDeep, "name": fmt.Sprintf("bare-mdeep-new-%d", i)}
			})},
		{"CreateVolume from snapshot vs zfs clone", "CreateVolume from snapshot",
			func(ctx context.Context, i int) (err error) {
				clones[i], err = createVolume(ctx, d, fromSnapshot(fmt.Sprintf("seq-clone-%d", i), snapshots[i].GetSnapshotId()))
				return err
			},
			func(ctx context.Context, i int) error {
				return b.zfs(ctx, b.templates["clone"].with(map[string]string{csiName: fmt.Sprintf("bare-clone-%d", i)},
					bareSnapshot(i), bareDataset("clone", i)))
			}, "", nil, nil},
		{"DeleteVolume of a clone vs zfs destroy", "DeleteVolume of a clone",
			deleteVolume(clones), bareDestroy(func(i int) string { return bareDataset("clone", i) }), "",
			program("destroy-clone", func(i int) map[string]string { return map[string]string{"dataset": bareDataset("pclone", i)} },
				func(ctx context.Context, i int) error {
					return b.zfs(ctx, b.templates["clone"].with(map[string]string{csiName: fmt.Sprintf("bare-pclone-%d", i)},
						programSnapshot(i), bareDataset("pclone", i)))
				}), nil},
		{"DeleteSnapshot vs zfs destroy", "DeleteSnapshot",
			func(ctx context.Context, i int) error {
				_, err := d.controller.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapshots[i].GetSnapshotId()})
				return err
			}, bareDestroy(bareSnapshot), "",
			program("destroy-snapshot", func(i int) map[string]string { return map[string]string{"snapshot": programSnapshot(i)} }, nil), nil},
		{"DeleteVolume dataset vs zfs destroy", "DeleteVolume dataset",
			deleteVolume(datasets), bareDestroy(func(i int) string { return bareDataset("fs", i) }), "",
			program("destroy", func(i int) map[string]string { return map[string]string{"dataset": bareDataset("pfs", i)} },
				bareCreate("create-fs", "pfs")), nil},
	}
	var walls []string
	for _, it := range items {
		var drv, bare, bareProgram, prototyped, background samples
		itemStart := time.Now()
		for i := range n {
			sides := []side{
				{func() (time.Duration, error) {
					return timed(ctx, func(ctx context.Context) error { return it.driver(ctx, i) })
				}, &drv, true},
				{func() (time.Duration, error) {
					return timed(ctx, func(ctx context.Context) error { return it.bare(ctx, i) })
				}, &bare, false},
			}
			if it.bareProgram != nil {
				sides = append(sides, side{func() (time.Duration, error) {
					callCtx, cancel := context.WithTimeout(ctx, callLimit)
					defer cancel()
					return it.bareProgram(callCtx, i)
				}, &bareProgram, false})
			}
			if it.prototype != nil {
				sides = append(sides, side{func() (time.Duration, error) {
					callCtx, cancel := context.WithTimeout(ctx, callLimit)
					defer cancel()
					return it.prototype.run(callCtx, i)
				}, &prototyped, false})
			}
			err := interleaveSides(i, d, sides, &background)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", it.what, i, err)
			}
			if (i+1)%10 == 0 && i+1 < n {
				fmt.Printf("=== bench: %s: %d rounds, driver p50 %s, bare p50 %s\n", it.what, i+1, ms(drv.p50()), ms(bare.p50()))
			}
		}
		r := compare("1", it.what, drv, bare, 1.10)
		r.commands = b.counts[it.count]
		b.rows["1"] = append(b.rows["1"], r)
		if it.bareProgram != nil {
			call, _, _ := strings.Cut(it.what, " vs ")
			b.rows["1"] = append(b.rows["1"], compare("1", call+" vs the same zfs program run bare", drv, bareProgram, 1.10))
		}
		if it.prototype != nil {
			call, _, _ := strings.Cut(it.what, " vs ")
			b.rows["1"] = append(b.rows["1"], compare("1", call+" vs prototype: "+it.prototype.what, drv, prototyped, 1.10))
		}
		if len(background) > 0 {
			b.rows["1"] = append(b.rows["1"], backgroundRow("1", it.what, background, n))
		}
		if it.program != "" {
			programs, err := programDurations(logPath, it.program)
			if err != nil {
				return err
			}
			b.rows["1"] = append(b.rows["1"], compare("1", it.what+": its zfs program alone", programs, bare, 1.10))
		}
		wall := time.Since(itemStart)
		walls = append(walls, fmt.Sprintf("%s %.0fs", it.count, wall.Seconds()))
		b.checkpoint()
		fmt.Printf("=== bench: %s: driver p50 %s, bare p50 %s; %.0fs for %d rounds, of which measured %.0fs\n",
			it.what, ms(drv.p50()), ms(bare.p50()), wall.Seconds(), n, (drv.sum() + bare.sum()).Seconds())
	}
	b.notes = append(b.notes, "section 1 wall time per item: "+strings.Join(walls, ", "))
	// The deep volume keeps its snapshots (DeleteVolume would only hide it):
	// both sides go with zfs destroy -r.
	_, deepDataset, err := rules.ParseVolumeID(deep.GetVolumeId())
	if err != nil {
		return err
	}
	for _, name := range []string{deepDataset, bareDeep} {
		if err := b.zfs(ctx, []string{"destroy", "-r", name}); err != nil {
			return err
		}
	}
	return nil
}

// sequentialReserve is what section 1 holds reserved in the pool at its
// peak with n rounds: per round on each side a 1 GiB dataset, zvol and clone
// (a zvol's refreservation also covers its metadata: a tenth more bounds it),
// and each side's volume with the deep snapshots.
func sequentialReserve(n int) uint64 {
	const perRound = gib + gib*11/10 + gib
	return 2 * (uint64(n)*perRound + gib)
}

// roomFor refuses, before any work, n rounds the pool has no room for (they
// would end with "out of space" half way through the section).
func (b *bench) roomFor(ctx context.Context, n int) error {
	_, out, err := run(ctx, b.tools.zfs, "get", "-H", "-p", "-o", "value", "available", b.cfg.pool)
	if err != nil {
		return err
	}
	available, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return fmt.Errorf("available space of %s: %w", b.cfg.pool, err)
	}
	return checkRoom(n, available, b.cfg.pool)
}

func checkRoom(n int, available uint64, pool string) error {
	if need := sequentialReserve(n); need > available {
		return fmt.Errorf("-n %d: section 1 reserves up to %.0f GiB (a 1 GiB dataset, zvol and clone per round on each side), "+
			"and %s has %.0f GiB available: lower -n or raise BENCH_POOL_SIZE", n, float64(need)/gib, pool, float64(available)/gib)
	}
	return nil
}

// programDurations are the durations the daemon logged for its zfs programs
// whose arguments include a value starting with prefix.
func programDurations(logPath, prefix string) (samples, error) {
	lines, err := readLog(logPath, "zfs command")
	if err != nil {
		return nil, err
	}
	var took samples
	for _, line := range lines {
		if len(line.Argv) < 2 || line.Argv[1] != "program" {
			continue
		}
		for _, arg := range line.Argv {
			if strings.HasPrefix(arg, prefix) {
				took = append(took, time.Duration(line.Duration*float64(time.Millisecond)))
				break
			}
		}
	}
	if len(took) == 0 {
		return nil, fmt.Errorf("%s: no zfs program with an argument %s… logged", logPath, prefix)
	}
	return took, nil
}

// snapshotDepth is how many snapshots the volume of section 1's second
// CreateSnapshot row has before its first round: CreateSnapshot's cost must
// not grow with it.
const snapshotDepth = 100

// deepSnapshots makes that volume with snapshotDepth CSI snapshots through
// the driver, and a bare dataset of the same kind with as many snapshots.
func (b *bench) deepSnapshots(ctx context.Context, d *daemon) (*csi.Volume, string, error) {
	deep, err := createVolume(ctx, d, volumeRequest("seq-deep", mountCapability(""), false))
	if err != nil {
		return nil, "", fmt.Errorf("the volume with %d snapshots: %w", snapshotDepth, err)
	}
	for k := range snapshotDepth {
		if _, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("seq-deep-%d", k),
			SourceVolumeId: deep.GetVolumeId()}); err != nil {
			return nil, "", fmt.Errorf("snapshot %d of the deep volume: %w", k, err)
		}
	}
	bare := b.dataset("bare") + "/deep"
	if err := b.zfs(ctx, b.templates["create-fs"].with(map[string]string{b.props.CSIName: "bare-deep"}, bare)); err != nil {
		return nil, "", err
	}
	// One command each: zfs snapshot takes one snapshot per dataset.
	for k := range snapshotDepth {
		name := fmt.Sprintf("bare-deep-%d", k)
		if err := b.zfs(ctx, b.templates["snapshot"].with(map[string]string{b.props.SnapshotName: name}, bare+"@"+name)); err != nil {
			return nil, "", err
		}
	}
	return deep, bare, nil
}

func createVolume(ctx context.Context, d *daemon, req *csi.CreateVolumeRequest) (*csi.Volume, error) {
	response, err := d.controller.CreateVolume(ctx, req)
	return response.GetVolume(), err
}

// zfs runs one bare zfs command.
func (b *bench) zfs(ctx context.Context, args []string) error {
	_, _, err := run(ctx, append([]string{b.tools.zfs}, args...)...)
	return err
}
