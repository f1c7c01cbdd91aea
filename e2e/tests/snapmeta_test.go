//go:build e2e

package tests

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const kib = 1 << 10

type extent struct{ Offset, Size int64 }

func (d *driverProcess) allocated(snapshotID string, maxResults int32) ([]extent, error) {
	stream, err := csi.NewSnapshotMetadataClient(d.conn).GetMetadataAllocated(ctx(d.t), &csi.GetMetadataAllocatedRequest{
		SnapshotId: snapshotID, MaxResults: maxResults})
	if err != nil {
		return nil, err
	}
	return receiveExtents(stream.Recv)
}

func (d *driverProcess) delta(base, target string) ([]extent, error) {
	stream, err := csi.NewSnapshotMetadataClient(d.conn).GetMetadataDelta(ctx(d.t), &csi.GetMetadataDeltaRequest{
		BaseSnapshotId: base, TargetSnapshotId: target})
	if err != nil {
		return nil, err
	}
	return receiveExtents(stream.Recv)
}

func receiveExtents[T interface{ GetBlockMetadata() []*csi.BlockMetadata }](recv func() (T, error)) ([]extent, error) {
	var extents []extent
	for {
		response, err := recv()
		if errors.Is(err, io.EOF) {
			return extents, nil
		}
		if err != nil {
			return nil, err
		}
		for _, block := range response.GetBlockMetadata() {
			extents = append(extents, extent{block.GetByteOffset(), block.GetSizeBytes()})
		}
	}
}

// writeAt writes random bytes at an offset of a device, bypassing the page
// cache.
func writeAt(t *testing.T, device string, offset, size int64) {
	t.Helper()
	mustRun(t, "dd", "if=/dev/urandom", "of="+device, "bs=64K", "seek="+strconv.FormatInt(offset/(64*kib), 10),
		"count="+strconv.FormatInt(size/(64*kib), 10), "oflag=direct", "conv=notrunc,fsync", "status=none")
}

// restoredDevice makes a volume from a snapshot and returns its device.
func (d *driverProcess) restoredDevice(name, snapshotID string, size int64) string {
	d.t.Helper()
	req := volumeRequest(name, size, blockCap(), nil)
	req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshotID}}}
	device := "/dev/zvol/" + datasetOf(d.t, d.createVolume(req).GetVolumeId())
	waitForDevices(d.t, []string{device})
	return device
}

// Known writes and a discard between two snapshots of a zvol: the
// allocated and changed ranges are exactly those, and copying only the
// changed ranges of the second onto a copy of the first makes the second,
// byte for byte.
func TestSnapshotMetadataMatchesWhatWasWrittenAndFreed(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	const size = 32 << 20
	volume := d.createVolume(volumeRequest("cbt", size, blockCap(), map[string]string{"volblocksize": "16384"}))
	device := "/dev/zvol/" + datasetOf(t, volume.GetVolumeId())
	waitForDevices(t, []string{device})

	writeAt(t, device, 0, 128*kib)
	writeAt(t, device, 1<<20, 64*kib)
	writeAt(t, device, 10<<20, 256*kib)
	first := d.createSnapshot("cbt-1", volume.GetVolumeId()).GetSnapshotId()
	writeAt(t, device, 2<<20, 128*kib)
	writeAt(t, device, 1<<20, 64*kib)
	mustRun(t, "blkdiscard", "-o", strconv.Itoa(10<<20), "-l", strconv.Itoa(256*kib), device)
	second := d.createSnapshot("cbt-2", volume.GetVolumeId()).GetSnapshotId()

	for _, check := range []struct {
		what string
		got  func() ([]extent, error)
		want []extent
	}{
		{"allocated in the first", func() ([]extent, error) { return d.allocated(first, 0) }, []extent{{0, 128 * kib}, {1 << 20, 64 * kib}, {10 << 20, 256 * kib}}},
		{"allocated in the first, one extent a response", func() ([]extent, error) { return d.allocated(first, 1) }, []extent{{0, 128 * kib}, {1 << 20, 64 * kib}, {10 << 20, 256 * kib}}},
		{"allocated in the second", func() ([]extent, error) { return d.allocated(second, 0) }, []extent{{0, 128 * kib}, {1 << 20, 64 * kib}, {2 << 20, 128 * kib}}},
	} {
		got, err := check.got()
		if err != nil {
			t.Fatalf("%s: %v", check.what, err)
		}
		if !reflect.DeepEqual(got, check.want) {
			t.Errorf("%s: got %v, want %v", check.what, got, check.want)
		}
	}

	// The stream frees more than changed: with OpenZFS's default
	// send_holes_without_birth_time=1 every never-written hole of the
	// indirect blocks it visits, and, since the discard freed the zvol's last
	// data, everything from 10 MiB "to the end of the object". The delta
	// reports a free only where the first snapshot held data: exact with
	// the tunable at either value.
	want := []extent{{1 << 20, 64 * kib}, {2 << 20, 128 * kib}, {10 << 20, 256 * kib}}
	tunable := mustRun(t, "cat", holeTunable)
	t.Cleanup(func() { mustRun(t, "sh", "-c", "echo "+tunable+" > "+holeTunable) })
	var changed []extent
	for _, value := range []string{"0", "1"} {
		mustRun(t, "sh", "-c", "echo "+value+" > "+holeTunable)
		got, err := d.delta(first, second)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("with %s=%s, changed from the first to the second: got %v, want %v", holeTunable, value, got, want)
		}
		changed = got
	}
	mustRun(t, "sh", "-c", "echo "+tunable+" > "+holeTunable)
	patched := d.restoredDevice("patched", first, size)
	source := d.restoredDevice("source", second, size)
	for _, e := range changed {
		mustRun(t, "dd", "if="+source, "of="+patched, "bs=16K", "skip="+strconv.FormatInt(e.Offset/(16*kib), 10),
			"seek="+strconv.FormatInt(e.Offset/(16*kib), 10), "count="+strconv.FormatInt(e.Size/(16*kib), 10),
			"iflag=direct", "oflag=direct", "conv=notrunc,fsync", "status=none")
	}
	if a, b := checksum(t, patched, size>>20), checksum(t, source, size>>20); a != b {
		t.Errorf("the first snapshot patched with the changed ranges (%s) is not the second (%s)", a, b)
	}
	t.Logf("changed ranges %v applied to a copy of the first snapshot reproduce the second", changed)
}

const holeTunable = "/sys/module/zfs/parameters/send_holes_without_birth_time"

func TestSnapshotMetadataRefusesWhatItCannotAnswer(t *testing.T) {
	parent := testParent(t)
	d := startDriver(t, parent)
	zvol := d.createVolume(volumeRequest("zvol", 16<<20, blockCap(), nil))
	fs := d.createVolume(volumeRequest("fs", 16<<20, mountCap(""), nil))
	older := d.createSnapshot("older", zvol.GetVolumeId()).GetSnapshotId()
	newer := d.createSnapshot("newer", zvol.GetVolumeId()).GetSnapshotId()
	fsSnapshot := d.createSnapshot("fs-snap", fs.GetVolumeId()).GetSnapshotId()
	for _, test := range []struct {
		what string
		err  error
		want codes.Code
	}{
		{"a filesystem volume's snapshot", func() error { _, err := d.allocated(fsSnapshot, 0); return err }(), codes.FailedPrecondition},
		{"a base later than the target", func() error { _, err := d.delta(newer, older); return err }(), codes.InvalidArgument},
		{"another node's snapshot", func() error {
			_, err := d.allocated("other-node:"+datasetOf(t, zvol.GetVolumeId())+"@x", 0)
			return err
		}(), codes.NotFound},
		{"a snapshot that is not there", func() error {
			_, err := d.allocated(fmt.Sprintf("%s:%s@gone", nodeID, datasetOf(t, zvol.GetVolumeId())), 0)
			return err
		}(), codes.NotFound},
	} {
		if status.Code(test.err) != test.want {
			t.Errorf("%s: got %v, want %s", test.what, test.err, test.want)
		}
	}
}
