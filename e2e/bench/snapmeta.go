package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// metadataVolume is section 8's zvol, and the share of it that changes.
const (
	metadataVolume  = 1 << 30
	metadataChanged = metadataVolume / 10
)

// snapshotMetadata is section 8, on a daemon of its own (parent
// <pool>/bench/meta): GetMetadataDelta of a 1 GiB zvol with 10 % changed
// between two snapshots, against reading the whole device (what a backup
// without changed-block tracking does), with the daemon's peak RSS and the
// reader's.
func (b *bench) snapshotMetadata(ctx context.Context) error {
	if _, _, err := run(ctx, b.tools.zfs, "create", b.dataset("meta")); err != nil {
		return err
	}
	d, err := startDaemon(ctx, b.daemonConfig("meta"))
	if err != nil {
		return err
	}
	defer d.stop()
	req := volumeRequest("meta", blockCapability(), true)
	req.CapacityRange = &csi.CapacityRange{RequiredBytes: metadataVolume}
	volume, err := createVolume(ctx, d, req)
	if err != nil {
		return err
	}
	_, dataset, _ := strings.Cut(volume.GetVolumeId(), ":")
	device := "/dev/zvol/" + dataset
	if err := waitForDevice(ctx, device); err != nil {
		return err
	}
	// Every block written, then 100 MiB changed in 1 MiB pieces a tenth apart.
	if err := ddWrite(ctx, device, 0, metadataVolume>>20); err != nil {
		return err
	}
	base, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "meta-base", SourceVolumeId: volume.GetVolumeId()})
	if err != nil {
		return err
	}
	for offset := uint64(0); offset < metadataVolume; offset += 10 << 20 {
		if err := ddWrite(ctx, device, offset>>20, 1); err != nil {
			return err
		}
	}
	target, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "meta-target", SourceVolumeId: volume.GetVolumeId()})
	if err != nil {
		return err
	}
	client := csi.NewSnapshotMetadataClient(d.conn)
	var drv, bare samples
	var driverPeaks, readerPeaks []uint64
	var changed uint64
	for i := range 3 {
		err := interleave(i, d,
			func() (time.Duration, error) {
				return timed(ctx, func(ctx context.Context) error {
					changed = 0
					stream, err := client.GetMetadataDelta(ctx, &csi.GetMetadataDeltaRequest{BaseSnapshotId: base.GetSnapshot().GetSnapshotId(),
						TargetSnapshotId: target.GetSnapshot().GetSnapshotId()})
					if err != nil {
						return err
					}
					for {
						response, err := stream.Recv()
						if errors.Is(err, io.EOF) {
							break
						}
						if err != nil {
							return err
						}
						for _, block := range response.GetBlockMetadata() {
							changed += uint64(block.GetSizeBytes())
						}
					}
					_, peak, err := d.memory()
					driverPeaks = append(driverPeaks, peak)
					return err
				})
			},
			func() (time.Duration, error) {
				var peak uint64
				took, err := timed(ctx, func(ctx context.Context) error {
					cmd := exec.CommandContext(ctx, "dd", "if="+device, "of=/dev/null", "bs=1M", "iflag=direct", "status=none")
					err := cmd.Run()
					if usage, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
						peak = uint64(usage.Maxrss) << 10
					}
					return err
				})
				readerPeaks = append(readerPeaks, peak)
				return took, err
			}, &drv, &bare)
		if err != nil {
			return fmt.Errorf("snapshot metadata, round %d: %w", i, err)
		}
	}
	if changed < metadataChanged || changed > metadataChanged+metadataChanged/10 {
		return fmt.Errorf("GetMetadataDelta reported %d changed bytes, want about %d", changed, metadataChanged)
	}
	r := compare("8", "GetMetadataDelta 1 GiB zvol, 10% changed vs dd of the whole device", drv, bare, 1.0)
	b.rows["8"] = append(b.rows["8"], r,
		memoryRow("8", "daemon peak RSS after GetMetadataDelta", driverPeaks, 64<<20),
		memoryRow("8", "dd reading the device: peak RSS", readerPeaks, 0))
	fmt.Printf("=== bench: GetMetadataDelta p50 %s (%d bytes changed), dd of the device p50 %s\n", ms(drv.p50()), changed, ms(bare.p50()))
	return nil
}

// ddWrite writes count MiB of random data at MiB offset of a device.
func ddWrite(ctx context.Context, device string, offsetMiB uint64, countMiB uint64) error {
	_, _, err := run(ctx, "dd", "if=/dev/urandom", "of="+device, "bs=1M", fmt.Sprintf("seek=%d", offsetMiB),
		fmt.Sprintf("count=%d", countMiB), "oflag=direct", "conv=notrunc,fsync", "status=none")
	return err
}

// waitForDevice waits for udev's link to a zvol.
func waitForDevice(ctx context.Context, device string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(device); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not appear within a minute", device)
}
