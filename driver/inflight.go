package driver

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// InFlight tracks the keys (volume names, dataset names, snapshot names) of
// operations under way. A second concurrent operation on any of the same keys
// is refused at once with ABORTED and the CO retries (ARCHITECTURE.md decision 9); no
// caller ever waits on another.
type InFlight struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// NewInFlight returns an empty tracker.
func NewInFlight() *InFlight { return &InFlight{keys: map[string]struct{}{}} }

// Acquire takes every key or none. It returns the release function, or an
// ABORTED status naming the busy key.
func (f *InFlight) Acquire(keys ...string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range keys {
		if _, busy := f.keys[key]; busy {
			return nil, status.Errorf(codes.Aborted, "an operation on %q is already in progress", key)
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
