package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The noisy part's diagnosis (BENCH_NOISY_TRACE=1): where team-b's create -> Succeeded goes, stage by stage, the
// CPU each process of the run used, the manager's histograms over each team-b run and, with BENCH_PROFILE_DIR,
// CPU profiles of the manager, the API server and this test process over each team-b run.

// cpuSample is the CPU time (user+system, seconds) of each process of interest, and the machine's.
type cpuSample struct {
	at    time.Time
	procs map[string]float64
	busy  float64 // the machine's non-idle CPU seconds (all cores)
}

// sampleCPU reads the CPU time of the manager, this process, its children (the API server, etcd) and the machine.
func sampleCPU(manager int) cpuSample {
	s := cpuSample{at: time.Now(), procs: map[string]float64{}}
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		st := string(b)
		i := strings.LastIndex(st, ")")
		comm := st[strings.Index(st, "(")+1 : i]
		f := strings.Fields(st[i+2:])
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseFloat(f[11], 64)
		stt, _ := strconv.ParseFloat(f[12], 64)
		cpu := (ut + stt) / 100
		switch {
		case pid == manager:
			s.procs["manager"] += cpu
		case pid == self:
			s.procs["test process"] += cpu
		case ppid == self:
			s.procs[comm] += cpu
		default:
			s.procs["other"] += cpu
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		var tot, idle float64
		for i, x := range f[1:] {
			v, _ := strconv.ParseFloat(x, 64)
			tot += v
			if i == 3 || i == 4 {
				idle += v
			}
		}
		s.busy = (tot - idle) / 100
	}
	return s
}

func logCPU(t *testing.T, run string, a, b cpuSample) {
	t.Helper()
	wall := b.at.Sub(a.at).Seconds()
	keys := make([]string, 0, len(b.procs))
	for k := range b.procs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, (b.procs[k]-a.procs[k])/wall))
	}
	t.Logf("trace %s: CPU cores used over %.1fs: machine %.2f of 2; %s", run, wall, (b.busy-a.busy)/wall, strings.Join(parts, ", "))
}

// histDelta logs the mean and quantiles of histogram metric (series matching want) between two scrapes.
func histDelta(t *testing.T, run string, a, b map[string]float64, metric string, want ...string) {
	t.Helper()
	buckets := map[float64]float64{}
	for k, v := range b {
		name, labels, _ := strings.Cut(k, "{")
		if name != metric+"_bucket" {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(labels, w)
		}
		if !ok {
			continue
		}
		_, le, _ := strings.Cut(labels, `le="`)
		le, _, _ = strings.Cut(le, `"`)
		x, err := strconv.ParseFloat(le, 64)
		if err != nil {
			x = math.Inf(1)
		}
		buckets[x] += v - a[k]
	}
	cnt := sum(b, metric+"_count", want...) - sum(a, metric+"_count", want...)
	s := sum(b, metric+"_sum", want...) - sum(a, metric+"_sum", want...)
	if cnt <= 0 {
		t.Logf("trace %s: %s %v: none", run, metric, want)
		return
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	slices.Sort(les)
	q := func(p float64) string {
		for _, le := range les {
			if buckets[le] >= p*cnt {
				return fmt.Sprintf("<=%g", le)
			}
		}
		return "?"
	}
	t.Logf("trace %s: %s %v: n=%.0f mean %.1f ms, p50 %s p90 %s p99 %s s", run, metric, want, cnt, s/cnt*1000, q(0.5), q(0.9), q(0.99))
}

func logHists(t *testing.T, run string, a, b map[string]float64) {
	t.Helper()
	histDelta(t, run, a, b, "workqueue_queue_duration_seconds", `name="externalaction"`)
	histDelta(t, run, a, b, "workqueue_work_duration_seconds", `name="externalaction"`)
	for _, verb := range []string{"GET", "PUT", "PATCH", "POST"} {
		histDelta(t, run, a, b, "rest_client_request_duration_seconds", `verb="`+verb+`"`)
	}
	histDelta(t, run, a, b, "rest_client_rate_limiter_duration_seconds")
	histDelta(t, run, a, b, "actionledger_attempt_duration_seconds")
	t.Logf("trace %s: reconciles %.0f, reconcile errors %.0f, requeues %.0f", run,
		sum(b, "controller_runtime_reconcile_total", `controller="externalaction"`)-sum(a, "controller_runtime_reconcile_total", `controller="externalaction"`),
		sum(b, "controller_runtime_reconcile_errors_total", `controller="externalaction"`)-sum(a, "controller_runtime_reconcile_errors_total", `controller="externalaction"`),
		sum(b, "workqueue_retries_total", `name="externalaction"`)-sum(a, "workqueue_retries_total", `name="externalaction"`))
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
