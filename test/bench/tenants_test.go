package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// TestBenchmarkTenants measures what the contended share costs tenants that are all busy at once (BENCH_PARTS part
// "tenants"; only `make bench`, BENCH_FULL): BENCH_TENANTS namespaces (2) each create BENCH_TENANTS_ACTIONS
// actions (1,000) at once, BENCH_CREATORS creators in all, against a destination of their own that answers at
// once, with one manager of BENCH_RECONCILES workers (16). Each run is made twice, alternately, BENCH_REPEAT times
// (2): with the manager's default --contended-reconciles (half the workers per namespace while another has
// requests) and with --contended-reconciles=BENCH_TENANTS_CONTENDED (2), the smaller share that paced the noisy
// neighbour's bursts in the bench (docs/benchmarks.md). It logs the
// actions a second of all namespaces together (created at once -> the last Succeeded seen), never asserts them; it
// fails only when an action does not end Succeeded.
//
// Then what the dominant share costs a busy tenant beside a quiet one: one namespace creates
// BENCH_TENANTS_ACTIONS actions at once while another creates one action a second until they are done, with the
// manager's default --dominant-reconciles (an eighth of the workers) and with it turned off (equal to the
// contended share), alternately, BENCH_REPEAT times; logged: the busy namespace's actions a second.
func TestBenchmarkTenants(t *testing.T) {
	if os.Getenv("BENCH_FULL") == "" {
		t.Skip("the tenants part runs only in make bench (BENCH_FULL=1)")
	}
	if parts := os.Getenv("BENCH_PARTS"); parts != "" && !slices.Contains(strings.Split(parts, ","), "tenants") {
		t.Skipf("BENCH_PARTS=%s does not include tenants", parts)
	}
	tenants := max(intEnv("BENCH_TENANTS", 2), 1)
	n := intEnv("BENCH_TENANTS_ACTIONS", 1000)
	creators := max(intEnv("BENCH_CREATORS", 16)/tenants, 1)
	reconciles := intEnv("BENCH_RECONCILES", 16)
	repeat := intEnv("BENCH_REPEAT", 2)
	contended := intEnv("BENCH_TENANTS_CONTENDED", 2)
	e := newEnv(t)
	dir := t.TempDir()
	bin := managerBinary(t, dir)
	configs := []struct {
		label string
		args  []string
	}{
		{fmt.Sprintf("contended share: the default (%d)", max(reconciles/2, 1)), nil},
		{fmt.Sprintf("contended share: %d", contended), []string{fmt.Sprintf("--contended-reconciles=%d", contended)}},
	}
	rates := map[string][]float64{}
	for r := range repeat {
		for _, c := range configs {
			rate := tenantsRun(t, e, bin, dir, tenants, n, creators, reconciles, c.args)
			rates[c.label] = append(rates[c.label], rate)
			t.Logf("tenants: run %d, %s: %d namespaces x %d actions, %d creators each, %d workers: %.1f actions/s", r+1,
				c.label, tenants, n, creators, reconciles, rate)
		}
	}
	configs = []struct {
		label string
		args  []string
	}{
		{fmt.Sprintf("one busy, one a second, dominant share: the default (%d)", max(reconciles/8, 1)), nil},
		{"one busy, one a second, dominant share: off", []string{fmt.Sprintf("--dominant-reconciles=%d", max(reconciles/2, 1))}},
	}
	for r := range repeat {
		for _, c := range configs {
			rate := trickleRun(t, e, bin, dir, n, creators, reconciles, c.args)
			rates[c.label] = append(rates[c.label], rate)
			t.Logf("tenants: run %d, %s: %d actions at once, %d creators, %d workers: the busy one %.1f actions/s", r+1,
				c.label, n, creators, reconciles, rate)
		}
	}
	for label, rs := range rates {
		t.Logf("tenants: %s: median %.1f actions/s (each run: %v)", label, median(rs), rs)
	}
}

// trickleRun starts a manager with extra flags; one new namespace creates n actions at once while another creates
// one action a second until the first's are all Succeeded. It returns the busy namespace's actions a second, from
// its first create to its last Succeeded seen.
func trickleRun(t *testing.T, e *envtestutil.Env, bin, dir string, n, creators, reconciles int, extra []string) float64 {
	t.Helper()
	ctx := context.Background()
	p := startManager(t, e, bin, dir, reconciles, extra...)
	defer p.stop()
	busy, quiet := e.Namespace(t), e.Namespace(t)
	var ws [2]*watcher
	for i, ns := range []string{busy, quiet} {
		_, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
		createBenchDestination(t, e, ns, "fast", url, defaultDest())
		ws[i] = watchSucceeded(t, e, ns)
		e.Create(t, envtestutil.Action(ns, "warm", "fast", "/x", `{"i":1}`))
		waitCount(t, ws[i], 1, time.Minute)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			if err := e.Client.Create(ctx, envtestutil.Action(quiet, fmt.Sprintf("q-%d", i), "fast", "/x", `{"i":1}`)); err != nil {
				t.Errorf("create: %v", err)
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	start := time.Now()
	for c := range creators {
		wg.Go(func() {
			for j := c; j < n; j += creators {
				if err := e.Client.Create(ctx, envtestutil.Action(busy, fmt.Sprintf("a-%d", j), "fast", "/x", `{"i":1}`)); err != nil {
					t.Errorf("create: %v", err)
					return
				}
			}
		})
	}
	var last time.Time
	for _, at := range ws[0].waitAll(t, n+1, time.Duration(n)*100*time.Millisecond+2*time.Minute) {
		if at.After(last) {
			last = at
		}
	}
	close(done)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return float64(n) / last.Sub(start).Seconds()
}

// tenantsRun starts a manager with extra flags, creates n actions in each of tenants new namespaces at once and
// returns the actions a second of all of them together, from the first create to the last Succeeded seen.
func tenantsRun(t *testing.T, e *envtestutil.Env, bin, dir string, tenants, n, creators, reconciles int, extra []string) float64 {
	t.Helper()
	ctx := context.Background()
	p := startManager(t, e, bin, dir, reconciles, extra...)
	defer p.stop()
	nss := make([]string, tenants)
	ws := make([]*watcher, tenants)
	for i := range tenants {
		nss[i] = e.Namespace(t)
		_, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
		createBenchDestination(t, e, nss[i], "fast", url, defaultDest())
		ws[i] = watchSucceeded(t, e, nss[i])
		// Warm-up: one action end to end per namespace before the clock starts.
		e.Create(t, envtestutil.Action(nss[i], "warm", "fast", "/x", `{"i":1}`))
		waitCount(t, ws[i], 1, time.Minute)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range tenants {
		for c := range creators {
			wg.Go(func() {
				for j := c; j < n; j += creators {
					if err := e.Client.Create(ctx, envtestutil.Action(nss[i], fmt.Sprintf("a-%d", j), "fast", "/x", `{"i":1}`)); err != nil {
						t.Errorf("create: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var last time.Time
	for i := range tenants {
		for _, at := range ws[i].waitAll(t, n+1, time.Duration(n)*100*time.Millisecond+2*time.Minute) {
			if at.After(last) {
				last = at
			}
		}
	}
	return float64(tenants*n) / last.Sub(start).Seconds()
}
