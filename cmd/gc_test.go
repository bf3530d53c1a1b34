package main

import (
	"runtime/debug"
	"testing"

	"github.com/go-logr/logr"
)

// TestTuneGCSetsTheTargetUnlessTheEnvironmentDoes: without GOGC in the environment the manager collects at
// gcPercent (200); a GOGC the environment sets is kept.
func TestTuneGCSetsTheTargetUnlessTheEnvironmentDoes(t *testing.T) {
	before := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(before); debug.SetMemoryLimit(limit) })
	t.Setenv("GOMEMLIMIT", "1GiB") // the soft limit is the environment's here: not read from this machine's cgroup

	t.Setenv("GOGC", "")
	tuneGC(logr.Discard())
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC unset: the collector's target is %d, want %d", got, gcPercent)
	}

	t.Setenv("GOGC", "50")
	tuneGC(logr.Discard())
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=50 in the environment: tuneGC changed the target to %d, want it left alone", got)
	}
}
