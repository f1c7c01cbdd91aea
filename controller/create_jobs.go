package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zfs-csi/zfs-csi/zfs"
)

// Transfers that outlive the call that started them: a local copy
// (create_copy.go) and a pull from another node (create_pull.go) run as
// jobs here, which later calls for the same name wait for.

// copyDeadline bounds one sourceMode=copy send|receive. A copy is not bound
// by the call that asked for it (the sidecar gives CreateVolume a minute; a
// 20 GiB copy takes longer), only by this.
const copyDeadline = 24 * time.Hour

// copyJobs are the sourceMode=copy transfers under way, by volume name.
//
// A copy runs apart from the CreateVolume that started it. When that call's
// deadline is near, it answers ABORTED with the copy's progress (which the
// CO shows and then retries: external-provisioner treats ABORTED as "still in
// progress") and hands its locks to the copy. A retry of the same name waits
// for the copy under way instead of starting another, and finds the volume
// made when it ends. A daemon that dies mid-copy loses nothing: zfs discards
// a receive cut short, and the retry starts the copy again.
type copyJobs struct {
	mu   sync.Mutex
	jobs map[string]*copyJob
	// failed are pulls that ended in an error no call was waiting for
	// (create_pull.go): the next call for the name gets it, once.
	failed map[string]error
	base   context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type copyJob struct {
	source, dataset string
	started         time.Time
	received        atomic.Uint64
	// asked is when a call last waited for the job (Unix nanoseconds): a
	// pull nobody asks for any more is abandoned (create_pull.go).
	asked atomic.Int64
	done  chan struct{}
	err   error // set before done closes

	mu       sync.Mutex
	finished bool
	release  func() // the starting call's locks, once it has returned
}

// running is the copy under way for a volume name, or nil.
func (c *copyJobs) running(name string) *copyJob {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.jobs[name]
}

// start runs work as the copy for a volume name.
func (c *copyJobs) start(name, source, dataset string, work func(ctx context.Context, received *atomic.Uint64) error) *copyJob {
	job := &copyJob{source: source, dataset: dataset, started: time.Now(), done: make(chan struct{})}
	job.asked.Store(job.started.UnixNano())
	c.mu.Lock()
	if c.jobs == nil {
		c.jobs = map[string]*copyJob{}
	}
	if c.cancel == nil {
		c.base, c.cancel = context.WithCancel(context.Background())
	}
	c.jobs[name] = job
	base := c.base
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(base, copyDeadline)
		defer cancel()
		err := work(ctx, &job.received)
		c.mu.Lock()
		delete(c.jobs, name)
		c.mu.Unlock()
		job.mu.Lock()
		job.err, job.finished = err, true
		release := job.release
		job.mu.Unlock()
		if release != nil {
			release()
		}
		close(job.done)
	}()
	return job
}

// fail keeps a pull's error for the next call of its name.
func (c *copyJobs) fail(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = map[string]error{}
	}
	c.failed[name] = err
}

// takeFailure is the error fail kept for name, forgotten once taken.
func (c *copyJobs) takeFailure(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.failed[name]
	delete(c.failed, name)
	return err
}

// stop ends every copy under way and waits for them: zfs discards a
// receive cut short, and the retry after a restart copies again.
func (c *copyJobs) stop() {
	c.mu.Lock()
	if c.cancel == nil {
		c.base, c.cancel = context.WithCancel(context.Background())
	}
	c.cancel()
	c.mu.Unlock()
	c.wg.Wait()
}

// await waits for the copy until ctx is about to end, and then answers
// ABORTED with its progress. When it returns before the copy ends, release
// (the caller's locks, if not nil) passes to the copy, which calls it when
// it ends; handedOver says so.
func (j *copyJob) await(ctx context.Context, release func()) (handedOver bool, err error) {
	j.asked.Store(time.Now().UnixNano())
	wait := ctx
	if deadline, ok := ctx.Deadline(); ok {
		// Answer while the caller still listens: the margin is a tenth of
		// what is left, at most a second.
		margin := min(time.Until(deadline)/10, time.Second)
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, deadline.Add(-margin))
		defer cancel()
	}
	select {
	case <-j.done:
		return false, j.err
	case <-wait.Done():
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return false, j.err
	}
	if release != nil {
		j.release = release
	}
	// A caller gone (canceled) gets its context's error. One whose deadline
	// passed while this answer was on its way (a busy host) still gets the
	// progress: ABORTED is what this call means, whoever reads it.
	if errors.Is(ctx.Err(), context.Canceled) {
		return release != nil, ctx.Err()
	}
	return release != nil, status.Errorf(codes.Aborted, "%s", j.progress())
}

func (j *copyJob) progress() string {
	return fmt.Sprintf("copying %s into %s: %s of its stream received in %s; the copy goes on, a retry of this call waits for it",
		j.source, j.dataset, zfs.FormatSize(j.received.Load()), time.Since(j.started).Round(time.Second))
}

// heldLocks are a CreateVolume's in-flight keys, released when the call
// returns unless a copy took them over.
type heldLocks struct{ release func() }

// take hands the locks to someone else: the caller no longer releases them.
func (l *heldLocks) take() func() {
	release := l.release
	l.release = nil
	return release
}

func (l *heldLocks) done() {
	if l.release != nil {
		l.release()
	}
}
