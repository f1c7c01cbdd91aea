package zfstest

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// The test's controls of the Fake: counting its calls, injecting failures and
// stalls, pool health, written bytes, and reading its state back.

// Calls reports how many commands each method ran since the last ResetCalls.
func (f *Fake) Calls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.calls))
	for k, v := range f.calls {
		out[k] = v
	}
	return out
}

// TotalCalls is the sum of Calls.
func (f *Fake) TotalCalls() int {
	total := 0
	for _, n := range f.Calls() {
		total += n
	}
	return total
}

// ResetCalls zeroes the command counters.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = map[string]int{}
}

// FailNext makes the next call of method (e.g. "Create") return err.
func (f *Fake) FailNext(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures[method] = append(f.failures[method], err)
}

// InterruptInherit makes the next Inherit stop after its first n
// properties, as a signal to zfs program keeps what the program did before
// it: the rest stay, and the call fails.
func (f *Fake) InterruptInherit(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutAfter = n
}

// ErrKilled is every command's answer once the daemon CrashAfter kills is gone.
var ErrKilled = errors.New("killed: the daemon that ran this command is gone")

// CrashAfter lets n more commands run, then kills the daemon that runs them:
// the next command does nothing, and it and every later one fail with
// ErrKilled until Revive. Only what ZFS holds outlives the kill, as with
// SIGKILL between two zfs commands (a kill inside a command is the same
// as one before or after it: each is one transaction group).
func (f *Fake) CrashAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashIn, f.crashed = n, false
}

// Crashed says whether CrashAfter's kill came.
func (f *Fake) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// Revive lets commands run again: the daemon started again.
func (f *Fake) Revive() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashIn, f.crashed = -1, false
}

// SetPoolHealth sets the health zpool reports for a pool. SUSPENDED also
// does what ZFS ≥ 2.2 does to a command that starts while the pool's I/O is
// suspended: it fails with "pool I/O is currently suspended" (a command
// already waiting in the kernel stays stuck instead: Stall models that).
func (f *Fake) SetPoolHealth(pool, health string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pools[pool].health = health
}

// SetPoolErrors sets the error counters PoolStatus reports, as failing
// disks and a scrub would.
func (f *Fake) SetPoolErrors(pool string, errors zfs.PoolStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pools[pool].errors = errors
}

// SetBusy makes Destroy of name fail with ErrBusy, as a mounted dataset would.
func (f *Fake) SetBusy(name string, busy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy[name] = busy
}

// Stall makes each later call of method (only "Copy" heeds it) wait until
// release is called, as a long zfs send does. A call whose context ends
// while it waits fails with the context's error having changed nothing, as
// a killed zfs receive leaves nothing.
func (f *Fake) Stall(method string) (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gate := make(chan struct{})
	f.stalls[method] = gate
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.stalls[method] == gate {
				delete(f.stalls, method)
			}
			close(gate)
		})
	}
}

// stall waits out a Stall of method; progress runs first, as the part of
// the work done before the wait.
func (f *Fake) stall(ctx context.Context, method string, progress func()) error {
	f.mu.Lock()
	gate := f.stalls[method]
	f.mu.Unlock()
	if gate == nil {
		return nil
	}
	progress()
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls[method]++
		return ctx.Err()
	}
}

// Write pretends that bytes of data were written to a filesystem or volume.
func (f *Fake) Write(name string, bytes uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.datasets[name]
	if !ok || d.typ == zfs.Snapshot {
		return f.fail("write", name, zfs.ErrNotFound)
	}
	if q := d.sizeProp("refquota"); q > 0 && d.referenced+bytes > q {
		return f.fail("write", name, zfs.ErrNoSpace)
	}
	d.referenced += bytes
	d.written += bytes
	f.txg++
	d.changed = f.txg
	return nil
}

// Property reads a native or user property as it applies to a dataset (set
// there or inherited), "" when unset.
func (f *Fake) Property(name, key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.datasets[name]; ok {
		return f.inherited(d, key)
	}
	return ""
}

// Exists reports whether a dataset or snapshot exists.
func (f *Fake) Exists(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.datasets[name]
	return ok
}

// Names lists every dataset and snapshot, sorted.
func (f *Fake) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.datasets))
	for name := range f.datasets {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
