package rules

import (
	"errors"
	"fmt"
	"sync"
)

// InFlight tracks the keys (volume names, dataset names, snapshot names) of
// operations under way. A second concurrent operation on any of the same keys
// is refused at once (ErrInFlight, answered ABORTED) and the CO retries (ARCHITECTURE.md decision 9); no
// caller ever waits on another.
type InFlight struct {
	mu   sync.Mutex
	keys map[string]struct{}
	// waiting holds, per busy key, the channels to signal when it is
	// released: a background worker that skipped a busy key learns the
	// moment it can try again, whatever the holder goes on to do.
	waiting map[string]map[chan<- struct{}]struct{}
}

// NewInFlight returns an empty tracker.
func NewInFlight() *InFlight {
	return &InFlight{keys: map[string]struct{}{}, waiting: map[string]map[chan<- struct{}]struct{}{}}
}

// ErrInFlight is the refusal of a key another call holds.
var ErrInFlight = errors.New("an operation is already in progress")

// inFlightError names the busy key; it is ErrInFlight.
type inFlightError struct{ key string }

func (e inFlightError) Error() string {
	return fmt.Sprintf("an operation on %q is already in progress", e.key)
}

func (e inFlightError) Is(target error) bool { return target == ErrInFlight }

// Acquire takes every key or none. It returns the release function, or an
// error naming the busy key (ErrInFlight).
func (f *InFlight) Acquire(keys ...string) (release func(), err error) {
	return f.AcquireOrWake(nil, keys...)
}

// AcquireOrWake is Acquire that, when a key is busy, also signals wake
// (without blocking: a full channel already holds a wake-up) once that key
// is released. A worker that skips what another call holds, and has no
// caller to retry for it, is thus not left waiting for its next tick.
func (f *InFlight) AcquireOrWake(wake chan<- struct{}, keys ...string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		if _, busy := f.keys[key]; busy {
			if wake != nil {
				if f.waiting[key] == nil {
					f.waiting[key] = map[chan<- struct{}]struct{}{}
				}
				f.waiting[key][wake] = struct{}{}
			}
			return nil, inFlightError{key}
		}
	}
	for _, key := range keys {
		f.keys[key] = struct{}{}
	}
	return func() { f.release(keys) }, nil
}

// release frees keys and wakes whoever waits on them.
func (f *InFlight) release(keys []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		delete(f.keys, key)
		for wake := range f.waiting[key] {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		delete(f.waiting, key)
	}
}
