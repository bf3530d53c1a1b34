//go:build !linux

package expr

// lowerPriority does nothing outside Linux, where a nice value is the process's, not the thread's: the
// evaluations run at the normal priority.
func lowerPriority(int) {}
