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
}

// NewInFlight returns an empty tracker.
func NewInFlight() *InFlight { return &InFlight{keys: map[string]struct{}{}} }

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
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		if _, busy := f.keys[key]; busy {
			return nil, inFlightError{key}
		}
	}
	for _, key := range keys {
		f.keys[key] = struct{}{}
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, key := range keys {
			delete(f.keys, key)
		}
	}, nil
}
