package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// nodeCalls is section 4: NodeStageVolume + NodePublishVolume of one
// dataset and of one ext4 zvol, against the mount commands a person would
// run for the same mounts (mount -t zfs or mount -t ext4, then mount
// --bind). Both sides mount the same volume at the same paths; each round
// unmounts again, untimed. The ext4 zvol is formatted by a first, untimed
// stage.
func (b *bench) nodeCalls(ctx context.Context) error {
	d, err := startDaemon(ctx, b.daemonConfig("seq"))
	if err != nil {
		return err
	}
	defer d.stop()
	kinds := []struct {
		what       string
		name       string
		capability *csi.VolumeCapability
		fsType     string
	}{
		{"NodeStage+NodePublish dataset vs mount -t zfs + mount --bind", "node-fs", mountCapability(""), "zfs"},
		{"NodeStage+NodePublish ext4 zvol vs mount -t ext4 + mount --bind", "node-ext4", mountCapability("ext4"), "ext4"},
	}
	for _, kind := range kinds {
		volume, err := createVolume(ctx, d, volumeRequest(kind.name, kind.capability, false))
		if err != nil {
			return err
		}
		dataset := strings.TrimPrefix(volume.GetVolumeId(), nodeID+":")
		source := dataset
		if kind.fsType != "zfs" {
			source = "/dev/zvol/" + dataset
		}
		staging := filepath.Join(b.cfg.work, "node", kind.name, "staging")
		target := filepath.Join(b.cfg.work, "node", kind.name, "target")
		if err := os.MkdirAll(staging, 0o755); err != nil {
			return err
		}
		stagePublish := func(ctx context.Context) error {
			if _, err := d.node.NodeStageVolume(ctx, stageRequest(volume, staging, kind.capability)); err != nil {
				return err
			}
			_, err := d.node.NodePublishVolume(ctx, publishRequest(volume, staging, target, kind.capability))
			return err
		}
		unpublishUnstage := func(ctx context.Context) error {
			if _, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volume.GetVolumeId(), TargetPath: target}); err != nil {
				return err
			}
			_, err := d.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volume.GetVolumeId(), StagingTargetPath: staging})
			return err
		}
		// The first stage formats the zvol (and makes the target directory).
		if _, err := timed(ctx, stagePublish); err != nil {
			return fmt.Errorf("%s: first stage: %w", kind.name, err)
		}
		if _, err := timed(ctx, unpublishUnstage); err != nil {
			return err
		}
		var drv, bare samples
		for i := range b.cfg.nodeN {
			err := interleave(i, d,
				func() (time.Duration, error) {
					took, err := timed(ctx, stagePublish)
					if err == nil {
						_, err = timed(ctx, unpublishUnstage)
					}
					return took, err
				},
				func() (time.Duration, error) {
					// NodeUnpublishVolume removes the target directory.
					if err := os.MkdirAll(target, 0o755); err != nil {
						return 0, err
					}
					took, err := timed(ctx, func(ctx context.Context) error {
						if _, _, err := run(ctx, b.tools.mount, "-t", kind.fsType, source, staging); err != nil {
							return err
						}
						_, _, err := run(ctx, b.tools.mount, "--bind", staging, target)
						return err
					})
					if err == nil {
						_, _, err = run(ctx, b.tools.umount, target)
					}
					if err == nil {
						_, _, err = run(ctx, b.tools.umount, staging)
					}
					return took, err
				}, &drv, &bare)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", kind.what, i, err)
			}
		}
		r := compare("4", kind.what, drv, bare, 1.10)
		stageCount, publishCount := b.counts["NodeStageVolume "+countKind(kind.fsType)], b.counts["NodePublishVolume "+countKind(kind.fsType)]
		r.commands = fmt.Sprintf("stage %s; publish %s", stageCount, publishCount)
		b.rows["4"] = append(b.rows["4"], r)
		fmt.Printf("=== bench: %s: driver p50 %s, bare p50 %s\n", kind.what, ms(drv.p50()), ms(bare.p50()))
	}
	return nil
}

func countKind(fsType string) string {
	if fsType == "zfs" {
		return "dataset"
	}
	return fsType + " zvol"
}
