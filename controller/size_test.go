package controller

import (
	"context"
	"math"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/zfs"
)

func TestVolumeSizesNearTheInt64LimitAreOutOfRange(t *testing.T) {
	const block = 16 << 10
	tests := []struct {
		name                string
		required, limit     int64
		granularity, source uint64 // source: fallback and minimum, as a volume made from one
		want                uint64
		wantCode            codes.Code
	}{
		{"MaxInt64 bytes is out of range (rounded to 16 KiB it was 2^63, negative to the CO)",
			math.MaxInt64, 0, block, 0, 0, codes.OutOfRange},
		{"MaxInt64 bytes of a dataset is out of range too", math.MaxInt64, 0, 1, 0, 0, codes.OutOfRange},
		{"MaxInt64 less a block plus 2 is out of range", math.MaxInt64 - block + 2, 0, block, 0, 0, codes.OutOfRange},
		{"one byte more than the most a volume has is out of range", int64(MaxVolumeSize) + 1, 0, 1, 0, 0, codes.OutOfRange},
		{"the most a volume has is served", int64(MaxVolumeSize), 0, block, 0, MaxVolumeSize, codes.OK},
		{"a size just under it rounds up to it", int64(MaxVolumeSize) - block + 1, 0, block, 0, MaxVolumeSize, codes.OK},
		{"a limit of MaxInt64 bounds nothing", 0, math.MaxInt64, block, 0, DefaultVolumeSize, codes.OK},
		{"a block size above 1 MiB cannot round past the most", int64(MaxVolumeSize), 0, 16 << 20, 0, 0, codes.OutOfRange},
		{"a source larger than the most a volume has cannot be copied", 0, 0, block, 1 << 63, 0, codes.OutOfRange},
		{"a zvol without a block size is rounded to nothing rather than divided by zero", 5<<20 + 1, 0, 0, 0, 5<<20 + 1, codes.OK},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			fallback := DefaultVolumeSize
			if test.source > 0 {
				fallback = test.source
			}
			got, err := volumeSize(&csi.CapacityRange{RequiredBytes: test.required, LimitBytes: test.limit}, test.granularity, fallback, test.source)
			if status.Code(err) != test.wantCode || got != test.want {
				t.Fatalf("volumeSize = %d, %v; want %d, %s", got, err, test.want, test.wantCode)
			}
			if got > math.MaxInt64 {
				t.Errorf("%d is negative as an int64", got)
			}
		})
	}
}

func TestNoSizeAnsweredIsNegative(t *testing.T) {
	h := newHarness(t)
	huge := int64(math.MaxInt64)
	thin := createRequest("thin", huge, blockCapability())
	thin.Parameters = map[string]string{ParamThin: "true"}
	t.Run("a thin zvol of MaxInt64 bytes is out of range and nothing is made", func(t *testing.T) {
		response, err := h.server.CreateVolume(context.Background(), thin)
		if code(err) != codes.OutOfRange {
			t.Fatalf("got %v (capacity %d), want OUT_OF_RANGE", err, response.GetVolume().GetCapacityBytes())
		}
		if h.fake.TotalCalls() != 0 {
			t.Errorf("ran %v", h.fake.Calls())
		}
	})
	t.Run("expanding to MaxInt64 bytes is out of range and changes nothing", func(t *testing.T) {
		volume := h.create(createRequest("v", 1<<30, blockCapability()))
		h.fake.ResetCalls()
		response, err := h.server.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
			VolumeId: volume.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: huge - 16<<10 + 2}})
		if code(err) != codes.OutOfRange {
			t.Fatalf("got %v (capacity %d), want OUT_OF_RANGE", err, response.GetCapacityBytes())
		}
		if row := h.dataset(datasetOf(t, volume.GetVolumeId())); row.VolSize != 1<<30 {
			t.Errorf("volsize is %d", row.VolSize)
		}
	})
	t.Run("a thin zvol of the most a volume has is made and answered positive", func(t *testing.T) {
		thin.Name, thin.CapacityRange.RequiredBytes = "largest", int64(MaxVolumeSize)
		volume := h.create(thin)
		if volume.GetCapacityBytes() != int64(MaxVolumeSize) {
			t.Errorf("capacity %d, want %d", volume.GetCapacityBytes(), MaxVolumeSize)
		}
	})
	t.Run("a volume ZFS holds beyond int64 reads as the most int64 says", func(t *testing.T) {
		volume := h.server.csiVolume(zfs.Dataset{Name: "tank/csi/made-before", Type: zfs.Volume, VolSize: 1 << 63})
		if volume.GetCapacityBytes() != math.MaxInt64 {
			t.Errorf("capacity %d, want MaxInt64", volume.GetCapacityBytes())
		}
	})
}
