package main

import (
	"strings"
	"testing"
)

// A 512 GiB pool disk (BENCH_POOL_SIZE's default) had 491 GiB available when
// section 1 began; -n 100 ran out of space at its 42nd clone.
func TestSectionOneRefusesRoundsThePoolHasNoRoomFor(t *testing.T) {
	const available = 491 << 30
	for _, tc := range []struct {
		n    int
		fits bool
	}{{50, true}, {4, true}, {70, true}, {100, false}, {90, false}} {
		err := checkRoom(tc.n, available, "tank")
		if tc.fits && err != nil {
			t.Errorf("-n %d refused on %d GiB: %v", tc.n, available>>30, err)
		}
		if !tc.fits && (err == nil || !strings.Contains(err.Error(), "-n ") || !strings.Contains(err.Error(), "BENCH_POOL_SIZE")) {
			t.Errorf("-n %d on %d GiB: got %v, want a refusal naming -n and BENCH_POOL_SIZE", tc.n, available>>30, err)
		}
	}
}
