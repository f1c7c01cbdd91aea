package zfstest

import (
	"context"
	"testing"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// The Fake's arithmetic for sizes without a figure must give the figures.
func TestFakeReservationArithmeticMatchesTheFigures(t *testing.T) {
	for _, figure := range ThickReservations {
		if got := libzfsReservation(figure.VolSize, figure.VolBlockSize); got != figure.RefReservation {
			t.Errorf("volsize %d, volblocksize %d: the Fake's arithmetic gives %d, ZFS reserves %d",
				figure.VolSize, figure.VolBlockSize, got, figure.RefReservation)
		}
	}
}

// GetCapacity and CreateVolume count on zfs.ThickReservation being what ZFS
// reserves; the figures are ZFS's (checked in the guest).
func TestProductionThickReservationIsWhatZFSReserves(t *testing.T) {
	for _, figure := range ThickReservations {
		if got := zfs.ThickReservation(figure.VolSize, figure.VolBlockSize); got != figure.RefReservation {
			t.Errorf("volsize %d, volblocksize %d: zfs.ThickReservation says %d, ZFS reserves %d",
				figure.VolSize, figure.VolBlockSize, got, figure.RefReservation)
		}
	}
}

func TestANewZvolGetsTheDefaultBlockSizeOfTheVersionPlayed(t *testing.T) {
	for _, tc := range []struct {
		name         string
		before22     bool
		volBlockSize uint64
	}{
		{"OpenZFS 2.2 and later give 16 KiB", false, 16 << 10},
		{"OpenZFS 2.1 gives 8 KiB", true, 8 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake(map[string]uint64{"tank": 100 << 30})
			if tc.before22 {
				f.PlayBefore22()
			}
			ctx := context.Background()
			if err := f.Create(ctx, "tank/v", zfs.CreateOptions{VolSize: 1 << 30}); err != nil {
				t.Fatal(err)
			}
			row, err := zfs.Get(ctx, f, "tank/v", nil)
			if err != nil {
				t.Fatal(err)
			}
			want := thickReservation(1<<30, tc.volBlockSize)
			if row.VolBlockSize != tc.volBlockSize || row.RefReservation != want {
				t.Errorf("volblocksize %d, refreservation %d; want %d and %d", row.VolBlockSize, row.RefReservation, tc.volBlockSize, want)
			}
		})
	}
}
