package bench

import (
	"os"
	"runtime/pprof"
	"testing"

	"github.com/actionledger/actionledger/test/noisy"
)

// The noisy part's diagnosis (BENCH_NOISY_TRACE=1): where team-b's create -> Succeeded goes, stage by stage, the
// CPU each process of the run used, the manager's histograms over each team-b run and, with BENCH_PROFILE_DIR,
// CPU profiles of the manager, the API server and this test process over each team-b run.

// sampleCPU reads the CPU time of the manager, this process, its children (the API server, etcd), the other
// processes and the machine.
func sampleCPU(manager int) noisy.CPUSample {
	self := os.Getpid()
	return noisy.SampleCPU(func(pid, ppid int, comm string) string {
		switch {
		case pid == manager:
			return "manager"
		case pid == self:
			return "test process"
		case ppid == self:
			return comm
		default:
			return "other"
		}
	})
}

func logCPU(t *testing.T, run string, a, b noisy.CPUSample) {
	t.Helper()
	t.Logf("trace %s: %s", run, noisy.CPULine(a, b, 10))
}

func logHists(t *testing.T, run string, a, b map[string]float64) {
	t.Helper()
	for _, l := range noisy.ManagerHists(a, b) {
		t.Logf("trace %s: %s", run, l)
	}
}

// selfProfile writes a CPU profile of this test process to path until stop is called.
func selfProfile(t *testing.T, path string) (stop func()) {
	t.Helper()
	f, err := os.Create(path) //nolint:gosec // BENCH_PROFILE_DIR is the user's own choice
	if err != nil {
		t.Logf("self profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Logf("self profile: %v", err)
		_ = f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}
