package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU is the CPU time a process has used, all its threads, those
// that ended too, in the kernel and out: clock_gettime on the process's CPU
// clock (clock_getcpuclockid(3): MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)),
// in nanoseconds, where /proc's figures count in ticks of 10 ms.
func processCPU(pid int) (time.Duration, error) {
	var ts unix.Timespec
	clock := int32(^pid)<<3 | 2
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// cpuSpent runs fn and returns what it took in wall time, and in CPU time of
// this process and of the process pid together (the daemon a call went to:
// its handler's work counts, not its idle wait).
func cpuSpent(pid int, fn func() (time.Duration, error)) (took, cpu time.Duration, err error) {
	selfBefore, err1 := processCPU(unix.Getpid())
	otherBefore, err2 := processCPU(pid)
	took, err = fn()
	selfAfter, err3 := processCPU(unix.Getpid())
	otherAfter, err4 := processCPU(pid)
	for _, e := range []error{err1, err2, err3, err4} {
		if err == nil {
			err = e
		}
	}
	return took, (selfAfter - selfBefore) + (otherAfter - otherBefore), err
}
