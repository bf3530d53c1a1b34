package expr

import (
	"time"

	"golang.org/x/sys/unix"
)

// lowerPriority sets the calling OS thread's nice value to nice (Linux keeps a nice value per thread; raising it
// needs no privilege). It fails only where the kernel refuses, and then the thread keeps its priority: the
// evaluations still run, at the normal priority.
func lowerPriority(nice int) {
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
}

// threadCPU is the CPU time the calling OS thread has used (CLOCK_THREAD_CPUTIME_ID), or ok false where the clock
// cannot be read.
func threadCPU() (d time.Duration, ok bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
