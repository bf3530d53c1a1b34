//go:build !linux

package expr

import "time"

// lowerPriority does nothing outside Linux, where a nice value is the process's, not the thread's: the
// evaluations run at the normal priority.
func lowerPriority(int) {}

// threadCPU cannot read a thread's CPU time outside Linux: the wall time is charged instead.
func threadCPU() (time.Duration, bool) { return 0, false }
