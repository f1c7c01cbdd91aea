package main

import (
	"context"
	"fmt"
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
// multi-snapshot, without the driver's guard and marks).
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
	for i := range groupVolumes {
		volume, err := createVolume(ctx, d, volumeRequest(fmt.Sprintf("group-%d", i), mountCapability(""), true))
		if err != nil {
			return err
		}
		ids = append(ids, volume.GetVolumeId())
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
	rounds := max(b.cfg.n/5, 3)
	var drv, sequential, atomic samples
	for i := range rounds {
		err := interleave(i, d,
			func() (took time.Duration, err error) {
				return timed(ctx, func(ctx context.Context) error {
					_, err := d.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{
						Name: fmt.Sprintf("group-%d", i), SourceVolumeIds: ids})
					return err
				})
			},
			func() (time.Duration, error) {
				took, err := timed(ctx, func(ctx context.Context) error {
					for _, name := range bare {
						if err := b.zfs(ctx, []string{"snapshot", fmt.Sprintf("%s@seq-%d", name, i)}); err != nil {
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
						args = append(args, fmt.Sprintf("%s@all-%d", name, i))
					}
					return b.zfs(ctx, args)
				})
			}, &drv, &atomic)
		if status.Code(err) == codes.FailedPrecondition {
			b.notes = append(b.notes, "section 7: group snapshots are refused on this ZFS: "+err.Error())
			return nil
		}
		if err != nil {
			return fmt.Errorf("group snapshot, round %d: %w", i, err)
		}
	}
	what := fmt.Sprintf("CreateVolumeGroupSnapshot %d volumes", groupVolumes)
	vsSequential := compare("7", what+" vs "+fmt.Sprint(groupVolumes)+" zfs snapshot", drv, sequential, 0.20)
	vsSequential.commands = b.counts["CreateVolumeGroupSnapshot of 3 volumes"]
	vsAtomic := compare("7", what+" vs one zfs snapshot of all", drv, atomic, 1.10)
	vsAtomic.commands = vsSequential.commands
	b.rows["7"] = append(b.rows["7"], vsSequential, vsAtomic)
	fmt.Printf("=== bench: %s: driver p50 %s, %d sequential snapshots p50 %s, one multi-snapshot p50 %s (%d rounds)\n",
		what, ms(drv.p50()), groupVolumes, ms(sequential.p50()), ms(atomic.p50()), rounds)
	return nil
}
