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

// metadataVolume is section 8's zvol; a tenth of it changes: 1 MiB in
// every 10 MiB.
const metadataVolume = 1 << 30

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
	rewritten := uint64(0)
	for offset := uint64(0); offset < metadataVolume; offset += 10 << 20 {
		if err := ddWrite(ctx, device, offset>>20, 1); err != nil {
			return err
		}
		rewritten += 1 << 20
	}
	target, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "meta-target", SourceVolumeId: volume.GetVolumeId()})
	if err != nil {
		return err
	}
	client := csi.NewSnapshotMetadataClient(d.conn)
	written, err := measureDelta(ctx, d, client, device, base.GetSnapshot().GetSnapshotId(), target.GetSnapshot().GetSnapshotId(), rewritten)
	if err != nil {
		return err
	}
	// Then 100 MiB discarded in 1 MiB pieces between the written ones: the
	// stream frees them, so the delta also reads what the base held (a
	// second send, of the whole base).
	discarded := uint64(0)
	for offset := uint64(5 << 20); offset < metadataVolume; offset += 10 << 20 {
		if _, _, err := run(ctx, "blkdiscard", "-o", fmt.Sprint(offset), "-l", fmt.Sprint(1<<20), device); err != nil {
			return err
		}
		discarded += 1 << 20
	}
	third, err := d.controller.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "meta-discarded", SourceVolumeId: volume.GetVolumeId()})
	if err != nil {
		return err
	}
	freed, err := measureDelta(ctx, d, client, device, target.GetSnapshot().GetSnapshotId(), third.GetSnapshot().GetSnapshotId(), discarded)
	if err != nil {
		return err
	}
	b.rows["8"] = append(b.rows["8"],
		compare("8", "GetMetadataDelta 1 GiB zvol, 10% written vs dd of the whole device", written.drv, written.bare, 1.0),
		compare("8", "GetMetadataDelta 1 GiB zvol, 10% discarded (reads the base too) vs dd of the whole device", freed.drv, freed.bare, 1.0),
		memoryRow("8", "daemon peak RSS after GetMetadataDelta", append(written.driverPeaks, freed.driverPeaks...), 64<<20),
		memoryRow("8", "dd reading the device: peak RSS", append(written.readerPeaks, freed.readerPeaks...), 0))
	fmt.Printf("=== bench: GetMetadataDelta p50 %s (%d bytes written), %s (%d bytes discarded); dd of the device p50 %s\n",
		ms(written.drv.p50()), written.changed, ms(freed.drv.p50()), freed.changed, ms(written.bare.p50()))
	return nil
}

// deltaCosts are three rounds of GetMetadataDelta and of dd reading the
// whole device, interleaved.
type deltaCosts struct {
	drv, bare                samples
	driverPeaks, readerPeaks []uint64
	changed                  uint64 // bytes the last delta reported
}

// measureDelta measures GetMetadataDelta from base to target against dd of
// the device, and checks that the delta is exactly the changed bytes.
func measureDelta(ctx context.Context, d *daemon, client csi.SnapshotMetadataClient, device, base, target string, changed uint64) (deltaCosts, error) {
	var c deltaCosts
	for i := range 3 {
		err := interleave(i, d,
			func() (time.Duration, error) {
				return timed(ctx, func(ctx context.Context) error {
					c.changed = 0
					stream, err := client.GetMetadataDelta(ctx, &csi.GetMetadataDeltaRequest{BaseSnapshotId: base, TargetSnapshotId: target})
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
							c.changed += uint64(block.GetSizeBytes())
						}
					}
					_, peak, err := d.memory()
					c.driverPeaks = append(c.driverPeaks, peak)
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
				c.readerPeaks = append(c.readerPeaks, peak)
				return took, err
			}, &c.drv, &c.bare)
		if err != nil {
			return c, fmt.Errorf("snapshot metadata, round %d: %w", i, err)
		}
	}
	if c.changed != changed {
		return c, fmt.Errorf("GetMetadataDelta reported %d changed bytes, want exactly %d", c.changed, changed)
	}
	return c, nil
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
