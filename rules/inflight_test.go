package rules

import (
	"errors"
	"testing"
)

func TestInFlightRefusesAHeldKeyAndFreesItOnRelease(t *testing.T) {
	f := NewInFlight()
	release, err := f.Acquire("a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Acquire("c", "b"); !errors.Is(err, ErrInFlight) {
		t.Fatalf("second holder of b: %v, want ErrInFlight", err)
	}
	if again, err := f.Acquire("c"); err != nil {
		t.Fatalf("a refused Acquire took c: %v", err)
	} else {
		again()
	}
	release()
	if _, err := f.Acquire("a", "b"); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func TestInFlightWakesWhoSkippedAKeyOnlyWhenItIsReleased(t *testing.T) {
	f := NewInFlight()
	release, err := f.Acquire("volume")
	if err != nil {
		t.Fatal(err)
	}
	wake := make(chan struct{}, 1)
	for range 3 { // a worker that skips the key every pass is woken once
		if _, err := f.AcquireOrWake(wake, "volume"); !errors.Is(err, ErrInFlight) {
			t.Fatalf("AcquireOrWake of a held key: %v", err)
		}
	}
	other, err := f.Acquire("other")
	if err != nil {
		t.Fatal(err)
	}
	other()
	if len(wake) != 0 {
		t.Fatal("woken before the key it waits on was released")
	}
	release()
	if len(wake) != 1 {
		t.Fatal("not woken when the key was released")
	}
	<-wake
	again, err := f.AcquireOrWake(wake, "volume")
	if err != nil {
		t.Fatalf("AcquireOrWake of a free key: %v", err)
	}
	again()
	if len(wake) != 0 {
		t.Fatal("woken again by a release after the wake-up was spent")
	}
}

func TestInFlightNeverBlocksReleaseOnAFullWakeChannel(t *testing.T) {
	f := NewInFlight()
	release, _ := f.Acquire("volume")
	wake := make(chan struct{}) // unbuffered, nobody reading
	if _, err := f.AcquireOrWake(wake, "volume"); err == nil {
		t.Fatal("held key acquired")
	}
	release() // returns: a wake-up nobody can take is dropped
	if _, err := f.Acquire("volume"); err != nil {
		t.Fatal(err)
	}
}
