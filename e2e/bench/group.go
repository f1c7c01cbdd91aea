package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// groupVolumes is how many volumes section 7's group snapshots take.
const groupVolumes = 16

// groupSnapshots is section 7, on a daemon of its own (parent
// <pool>/bench/group; the bare side works in <pool>/bench/bare-group): a
// group snapshot of 16 volumes against 16 sequential `zfs snapshot`s, and
// against one `zfs snapshot v1@s … v16@s` (the CLI's own atomic
// multi-snapshot, without the driver's guard and marks). First with the
// volumes idle (unmounted, as the driver leaves them), then in use: staged
// by the driver, the bare datasets mounted likewise. The targets apply to
// volumes in use, which is what a group snapshot is for (the crash-consistent
// state of running workloads); ZFS snapshots an unmounted dataset inside a
// channel program several times slower than a mounted one (measured in the
// guest under TCG: the same program took 1.6 s for 16 unmounted datasets,
// 0.3 s for 16 mounted ones).
func (b *bench) groupSnapshots(ctx context.Context) error {
	for _, name := range []string{"group", "bare-group"} {
		if _, _, err := run(ctx, b.tools.zfs, "create", b.dataset(name)); err != nil {
			return err
		}
	}
	d, err := startDaemon(ctx, b.daemonConfig("group"))
	if err != nil {
		return err
	}
	defer d.stop()
	var ids, bare []string
	var volumes []*csi.Volume
	for i := range groupVolumes {
		volume, err := createVolume(ctx, d, volumeRequest(fmt.Sprintf("group-%d", i), mountCapability(""), true))
		if err != nil {
			return err
		}
		ids, volumes = append(ids, volume.GetVolumeId()), append(volumes, volume)
		// As the driver makes them (mountpoint=legacy: not mounted), which
		// matters: ZFS snapshots an unmounted dataset at about half the pace
		// of a mounted one (measured in the guest: one zfs snapshot of 16
		// took 0.7 s against 0.27 s).
		name := b.dataset("bare-group") + fmt.Sprintf("/v-%d", i)
		create := []string{"create", "-o", "mountpoint=legacy", name}
		if template, ok := b.templates["create-fs"]; ok {
			create = template.with(map[string]string{b.props.CSIName: fmt.Sprintf("bare-%d", i)}, name)
		}
		if err := b.zfs(ctx, create); err != nil {
			return err
		}
		bare = append(bare, name)
	}
	// Idle volumes first (informational: see the note), then the same
	// volumes in use, staged as a CO stages them for the workloads whose
	// crash-consistent snapshot a group snapshot is for.
	if refused, err := b.groupRounds(ctx, d, ids, bare, "idle (unmounted)", 0, 0); refused || err != nil {
		return err
	}
	var unstage []func()
	defer func() {
		for _, undo := range unstage {
			undo()
		}
	}()
	for i, volume := range volumes {
		staging := filepath.Join(b.cfg.work, "group", fmt.Sprintf("stage-%d", i))
		if _, err := d.node.NodeStageVolume(ctx, stageRequest(volume, staging, mountCapability(""))); err != nil {
			return err
		}
		unstage = append(unstage, func() {
			d.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volume.GetVolumeId(), StagingTargetPath: staging})
		})
		dir := filepath.Join(b.cfg.work, "group", fmt.Sprintf("bare-%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if _, _, err := run(ctx, "mount", "-t", "zfs", bare[i], dir); err != nil {
			return err
		}
		unstage = append(unstage, func() { run(context.Background(), "umount", dir) })
	}
	_, err = b.groupRounds(ctx, d, ids, bare, "in use (staged)", 0.20, 1.10)
	return err
}

// groupRounds times rounds of a group snapshot of the volumes ids against 16
// sequential zfs snapshot of the bare datasets and one zfs snapshot of all of
// them, and adds the two rows (limits 0: no target). refused: this ZFS has no
// group snapshots (a note says so).
func (b *bench) groupRounds(ctx context.Context, d *daemon, ids, bare []string, state string, vsSequentialLimit, vsAtomicLimit float64) (refused bool, err error) {
	rounds := max(b.cfg.n/5, 3)
	var drv, sequential, atomic, program samples
	prefix := strings.Fields(state)[0]
	template, withProgram := b.programs["group-snapshot"]
	for i := range rounds {
		sides := []side{{
			func() (took time.Duration, err error) {
				return timed(ctx, func(ctx context.Context) error {
					_, err := d.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{
						Name: fmt.Sprintf("group-%s-%d", prefix, i), SourceVolumeIds: ids})
					return err
				})
			}, &drv, true}, {
			func() (time.Duration, error) {
				took, err := timed(ctx, func(ctx context.Context) error {
					for _, name := range bare {
						if err := b.zfs(ctx, []string{"snapshot", fmt.Sprintf("%s@seq-%s-%d", name, prefix, i)}); err != nil {
							return err
						}
					}
					return nil
				})
				sequential = append(sequential, took)
				if err != nil {
					return 0, err
				}
				return timed(ctx, func(ctx context.Context) error {
					args := []string{"snapshot"}
					for _, name := range bare {
						args = append(args, fmt.Sprintf("%s@all-%s-%d", name, prefix, i))
					}
					return b.zfs(ctx, args)
				})
			}, &atomic, false}}
		if withProgram {
			sides = append(sides, side{func() (time.Duration, error) {
				bareProgram, err := template.groupProgram(fmt.Sprintf("prog-%s-%d", prefix, i), fmt.Sprintf("bare-group-%s-%d", prefix, i),
					b.dataset("bare-group"), bare)
				took := time.Duration(0)
				if err == nil {
					took, err = b.runProgram(ctx, bareProgram)
				}
				if err != nil {
					// The comparison without this side still stands.
					b.notes = append(b.notes, fmt.Sprintf("section 7: the group program run bare, %s: %v", state, err))
					withProgram = false
				}
				return took, nil
			}, &program, false})
		}
		err = interleaveSides(i, d, sides, nil)
		if status.Code(err) == codes.FailedPrecondition {
			b.notes = append(b.notes, "section 7: group snapshots are refused on this ZFS: "+err.Error())
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("group snapshot, round %d: %w", i, err)
		}
	}
	what := fmt.Sprintf("CreateVolumeGroupSnapshot %d volumes %s", groupVolumes, state)
	vsSequential := compare("7", what+" vs "+fmt.Sprint(groupVolumes)+" zfs snapshot", drv, sequential, vsSequentialLimit)
	vsSequential.commands = b.counts["CreateVolumeGroupSnapshot of 3 volumes"]
	vsAtomic := compare("7", what+" vs one zfs snapshot of all", drv, atomic, vsAtomicLimit)
	vsAtomic.commands = vsSequential.commands
	b.rows["7"] = append(b.rows["7"], vsSequential, vsAtomic)
	if withProgram {
		b.rows["7"] = append(b.rows["7"], compare("7", what+" vs the same zfs program run bare", drv, program, vsAtomicLimit))
	}
	fmt.Printf("=== bench: %s: driver p50 %s, %d sequential snapshots p50 %s, one multi-snapshot p50 %s (%d rounds)\n",
		what, ms(drv.p50()), groupVolumes, ms(sequential.p50()), ms(atomic.p50()), rounds)
	return false, nil
}
