package expr

import "golang.org/x/sys/unix"

// lowerPriority sets the calling OS thread's nice value to nice (Linux keeps a nice value per thread; raising it
// needs no privilege). It fails only where the kernel refuses, and then the thread keeps its priority: the
// evaluations still run, at the normal priority.
func lowerPriority(nice int) {
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
}
