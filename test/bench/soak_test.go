package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// shardLabel is the label the soak's load generator sets on the second shard's actions, as a pipeline does
// (docs/sharding.md); shard 1 takes every action without shard2.
const shardLabel = "sharding.actionledger.dev/key"

// shardSelectors are the managers' --watch-label-selector values for one and for two shards.
var shardSelectors = map[int][]string{
	1: {""},
	2: {shardLabel + " notin (shard2)", shardLabel + " in (shard2)"},
}

// SoakSample is one sample of a soak run: counts are cumulative, rates and CPU are over the window since the
// previous sample, sizes are at the sample.
type SoakSample struct {
	AtSeconds float64 `json:"atSeconds"`
	Created   int64   `json:"created"`
	Succeeded int64   `json:"succeeded"`
	// OfferedPerSec is creates in the window per second; SucceededPerSec the actions seen Succeeded.
	OfferedPerSec   float64 `json:"offeredPerSecond"`
	SucceededPerSec float64 `json:"succeededPerSecond"`
	// P50Ms and P99Ms are create → Succeeded (this process's watch) of the actions that succeeded in the window.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	// ManagerSucceeded is the managers' own count of actions that ended Succeeded
	// (actionledger_action_duration_seconds_count{phase="Succeeded"}, summed), ManagerSucceededPerSec its rate
	// in the window: what the managers wrote, which this process's watch sees later when the API server lags.
	ManagerSucceeded       float64 `json:"managerSucceeded"`
	ManagerSucceededPerSec float64 `json:"managerSucceededPerSecond"`
	// Pending is created − succeeded − ended otherwise: the backlog seen from outside.
	Pending int64 `json:"pending"`
	// QueueDepth is the managers' workqueue_depth{name="externalaction"}, summed.
	QueueDepth float64 `json:"queueDepth"`
	// Live and EtcdTombstones are the ExternalAction and ActionTombstone keys in etcd.
	Live           int64       `json:"liveActions"`
	EtcdTombstones int64       `json:"etcdTombstones"`
	Etcd           EtcdMetrics `json:"etcd"`
	PGRows         int64       `json:"pgRows,omitempty"`
	PGBytes        int64       `json:"pgTotalRelationBytes,omitempty"`
	// CPU is cores used over the window (CPU seconds / wall seconds); RSS in bytes at the sample.
	ManagerCPU   []float64 `json:"managerCPUCores"`
	APIServerCPU float64   `json:"apiserverCPUCores"`
	EtcdCPU      float64   `json:"etcdCPUCores"`
	BenchCPU     float64   `json:"benchCPUCores"`
	ManagerRSS   []float64 `json:"managerRSSBytes"`
	APIServerRSS float64   `json:"apiserverRSSBytes"`
	EtcdRSS      float64   `json:"etcdRSSBytes"`
	// DestPeakPerSec is the most requests the destination received in one whole second of the window.
	DestPeakPerSec int `json:"destinationPeakRequestsPerSecond"`
	// SucceededByShard is the succeeded count per shard (cumulative).
	SucceededByShard []int64 `json:"succeededByShard"`
}

// soakRun is one soak run's moving parts.
type soakRun struct {
	t        *testing.T
	cfg      soakConfig
	shards   int
	e        *envtestutil.Env
	ns       string
	etcd     *etcdClient
	pg       *pgStats
	managers []*proc
	dest     *destination.Server
	perSec   *secondCounter
	obs      *soakObserver
	pids     []int // managers..., apiserver, etcd, this process
	start    time.Time
	created  atomic.Int64
	defrags  atomic.Int64
	// mgrSucceeded is the managers' Succeeded count at the previous sample; mgrLast each manager's last scraped
	// count (kept when a scrape fails, so that a failed scrape does not read as a drop).
	mgrSucceeded float64
	mgrLast      []float64
	// apiAt are the API server's request counters (apiWrites) and the managers' Succeeded count at the first
	// steady sample and at the last create: the API calls per action over the steady window.
	apiAt [2]apiReading
}

// apiReading is the API server's request counters and the managers' Succeeded count at one moment.
type apiReading struct {
	requests  map[string]float64
	succeeded float64
}

// TestBenchmarkSoak runs the soak part once per shard count of BENCH_SOAK_SHARDS. In make bench (BENCH_FULL)
// only when BENCH_PARTS names soak; otherwise (make test) the quick variant, which proves the harness (every column
// sampled, both shards working, the CSV and the PNG written, no key applied twice) and measures nothing.
func TestBenchmarkSoak(t *testing.T) {
	full := os.Getenv("BENCH_FULL") != ""
	parts := os.Getenv("BENCH_PARTS")
	named := slices.Contains(strings.Split(parts, ","), "soak")
	if full && !named {
		t.Skip("the soak runs in make bench only when BENCH_PARTS names it (about 50 minutes): BENCH_PARTS=soak make bench")
	}
	if parts != "" && !named {
		t.Skipf("BENCH_PARTS=%s does not include soak", parts)
	}
	cfg, err := soakConfigFromEnv(os.Getenv, full)
	if err != nil {
		t.Fatal(err)
	}
	out := soakOutDir(t, full)
	bin := managerBinary(t, t.TempDir())
	t.Logf("soak: %.1f actions/s for %s, %s; etcd compacted every %s by the API server, defragmented every %s; %s store, %s destination",
		cfg.Rate, cfg.Duration, cfg.Compressions(), cfg.Compaction, cfg.Defrag, cfg.Store, cfg.Dest)
	var results []SoakResult
	for _, n := range cfg.Shards {
		t.Run(fmt.Sprintf("shards-%d", n), func(t *testing.T) {
			r := runSoak(t, cfg, bin, n)
			results = append(results, r)
			if err := writeSoakFiles(out, r); err != nil {
				t.Fatal(err)
			}
			checkSoak(t, r)
		})
	}
	if len(results) == 0 {
		t.Fatal("no soak run ran")
	}
	table := soakTable(cfg, results)
	t.Log("\n" + table)
	if err := os.WriteFile(filepath.Join(out, "soak.md"), []byte(table), 0o600); err != nil { //nolint:gosec // BENCH_SOAK_OUT is the user's own choice
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}

// soakOutDir is BENCH_SOAK_OUT (default bin/bench/soak in make bench, a temporary directory in the quick
// variant, so that it does not overwrite the last full run).
func soakOutDir(t *testing.T, full bool) string {
	t.Helper()
	out := os.Getenv("BENCH_SOAK_OUT")
	switch {
	case out == "" && !full:
		out = t.TempDir()
	case out == "":
		out = filepath.Join("bin", "bench", "soak")
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(envtestutil.RepoRoot(), out)
	}
	out = filepath.Clean(out)
	if err := os.MkdirAll(out, 0o750); err != nil { //nolint:gosec // BENCH_SOAK_OUT is the user's own choice
		t.Fatal(err)
	}
	return out
}

// checkSoak fails the test when the harness measured nothing: no sample, no success, a shard that did no work,
// a column never read, or a key the destination applied twice.
func checkSoak(t *testing.T, r SoakResult) {
	t.Helper()
	if len(r.Samples) < 3 || r.Succeeded == 0 {
		t.Fatalf("the soak measured nothing: %d samples, %d succeeded", len(r.Samples), r.Succeeded)
	}
	for i, n := range r.SucceededByShard {
		if n == 0 {
			t.Errorf("shard %d of %d succeeded nothing", i+1, r.Shards)
		}
	}
	for i, n := range r.ManagerSucceeded {
		if n == 0 {
			t.Errorf("manager %d of %d recorded no success (actionledger_action_duration_seconds_count)", i+1, r.Shards)
		}
	}
	last := r.Samples[len(r.Samples)-1]
	if last.Etcd.DBTotal <= 0 || last.APIServerRSS <= 0 || slices.Contains(last.ManagerRSS, 0) {
		t.Errorf("a column was never read: %+v", last)
	}
	if r.Store == "postgres" && r.Steady.PGRowsMax == 0 {
		t.Error("the PostgreSQL tombstone table never had a row: no action was collected in the run")
	}
	if r.Duplicates != 0 {
		t.Errorf("the destination applied %d keys more than once", r.Duplicates)
	}
}

// runSoak is one soak run with n shard managers.
func runSoak(t *testing.T, cfg soakConfig, bin string, n int) SoakResult {
	s := &soakRun{t: t, cfg: cfg, shards: n}
	s.setUp(bin)
	s.start = time.Now()
	samples := s.sampleUntil(s.generate())
	drained := s.obs.waitSettled(s.created.Load(), 2*time.Minute)
	return s.finish(samples, drained)
}

// setUp starts the control plane (compacting every cfg.Compaction), the destination, the tombstone store and
// the managers, and proves them with one action.
func (s *soakRun) setUp(bin string) {
	t, cfg := s.t, s.cfg
	s.e = controlPlaneCompacting(t, cfg.Compaction.String())
	s.ns = s.e.Namespace(t)
	s.etcd = newEtcdClient(s.e.Env.ControlPlane.Etcd.URL.String())
	// The destination deduplicates on the key only when the Destination says so (safe): against the unsafe kind
	// a second send of a key is a second effect, which Summary counts as a duplicate.
	s.dest = destination.New(destination.Options{Dedup: cfg.Dest == destSafe})
	s.perSec = &secondCounter{counts: map[int64]int{}}
	ts := httptest.NewServer(s.perSec.wrap(s.dest))
	t.Cleanup(ts.Close)
	burst := int32(max(1, cfg.RateLimit/4)) //nolint:gosec // G115: soakConfigFromEnv bounds RateLimit to 1..1e6
	s.e.CreateDestination(t, s.ns, "provider", ts.URL, func(d *actionsv1alpha1.DestinationSpec) {
		d.Effect = actionsv1alpha1.EffectUnsafe
		d.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: cfg.Dest == destSafe}
		if cfg.Dest == destSafe {
			d.Idempotency.Claim = actionsv1alpha1.ClaimWhenUnsafe
		}
		d.RateLimit = &actionsv1alpha1.RateLimit{RequestsPerSecond: int32(cfg.RateLimit), Burst: &burst} //nolint:gosec // G115: bounded
		mif := int32(defaultMaxInFlight)
		d.Concurrency = &actionsv1alpha1.Concurrency{MaxInFlight: &mif}
		d.Retention = &actionsv1alpha1.Retention{TTLAfterFinished: &metav1.Duration{Duration: cfg.RunTTL()},
			TombstoneTTL: &metav1.Duration{Duration: cfg.RunTombstoneTTL}}
	})
	dir := t.TempDir()
	args, pg := storeArgs(t, bin, cfg.Store, dir)
	s.pg = pg
	args = append(args, managerInFlightArgs(t, bin, defaultMaxInFlight)...)
	for _, sel := range shardSelectors[s.shards] {
		a := slices.Clone(args)
		if sel != "" {
			a = append(a, "--watch-label-selector="+sel)
		}
		s.managers = append(s.managers, startManager(t, s.e, bin, dir, cfg.Reconciles, a...))
	}
	s.obs = observeSoak(t, s.e, s.ns, s.shards)
	for i := range s.shards {
		s.e.Create(t, s.action(fmt.Sprintf("warm-%d", i), i))
	}
	if !s.obs.waitSettled(0, 90*time.Second) {
		t.Fatal("the warm-up actions did not end within 90 s")
	}
	api, et := controlPlanePIDs(s.e)
	for _, m := range s.managers {
		s.pids = append(s.pids, m.cmd.Process.Pid)
	}
	s.pids = append(s.pids, api, et, os.Getpid())
	if _, err := s.etcd.compactDefrag(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// action is the soak's action named name on shard (0-based; the last shard takes the label shard2).
func (s *soakRun) action(name string, shard int) *actionsv1alpha1.ExternalAction {
	xa := envtestutil.Action(s.ns, name, "provider", "/charges", `{"amount":1250,"currency":"EUR"}`)
	if s.shards == 2 && shard == 1 {
		xa.Labels = map[string]string{shardLabel: "shard2"}
	}
	return xa
}

// generate creates actions at cfg.Rate for cfg.Duration on a fixed schedule (action i at start + i / rate,
// whatever the API server's answers: an arrival process does not wait for the system) and returns a channel
// closed when the last create returned. A create that fails is counted and logged once, and the run goes on.
func (s *soakRun) generate() <-chan struct{} {
	n := int(s.cfg.Rate * s.cfg.Duration.Seconds())
	s.obs.expect(n)
	done := make(chan struct{})
	// The generator stops with the test: a sampler that fails the test must not leave it creating against a
	// stopped control plane (this cleanup runs before the control plane's, registered earlier).
	ctx, cancel := context.WithCancel(context.Background())
	s.t.Cleanup(func() { cancel(); <-done })
	var failed atomic.Int64
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		defer wg.Wait()
		for i := range n {
			at := s.start.Add(time.Duration(float64(i) / s.cfg.Rate * float64(time.Second)))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(at)):
			}
			wg.Go(func() {
				s.obs.created(i, time.Now())
				if err := s.e.Client.Create(ctx, s.action(soakName(i), i%s.shards)); err != nil {
					if failed.Add(1) == 1 && ctx.Err() == nil {
						s.t.Logf("create %s: %v (failed creates are counted, the run goes on)", soakName(i), err)
					}
					s.obs.failedCreate(i)
					return
				}
				s.created.Add(1)
			})
		}
		wg.Wait()
		if f := failed.Load(); f > 0 && ctx.Err() == nil {
			s.t.Logf("%d creates failed", f)
		}
	}()
	return done
}

func soakName(i int) string { return "c-" + strconv.Itoa(i) }

// sampleUntil samples every cfg.Sample, runs the periodic defragmentation, and returns the samples once done
// is closed (with one last sample then).
func (s *soakRun) sampleUntil(done <-chan struct{}) []SoakSample {
	var samples []SoakSample
	tick := time.NewTicker(s.cfg.Sample)
	defer tick.Stop()
	var defrag <-chan time.Time
	if s.cfg.Defrag > 0 {
		dt := time.NewTicker(s.cfg.Defrag)
		defer dt.Stop()
		defrag = dt.C
	}
	s.mgrLast = make([]float64, len(s.managers))
	s.mgrSucceeded = s.managersSucceeded() // the warm-up actions are not the window's
	prev := s.readCPU()
	prevAt := time.Now()
	take := func() {
		cpu, now := s.readCPU(), time.Now()
		smp := s.sample(prev, cpu, now.Sub(prevAt))
		prev, prevAt = cpu, now
		samples = append(samples, smp)
		if s.apiAt[0].requests == nil && steadySample(smp, s.cfg) {
			s.apiAt[0] = apiReading{apiWrites(s.t, s.e), s.managersSucceeded()}
		}
		s.t.Logf("t=%4.0fs offered %5.1f/s succeeded %5.1f/s (managers %5.1f/s) p50 %6.0f ms p99 %6.0f ms pending %5d queue %4.0f live %6d etcd db %6.1f MiB (in use %6.1f) pg %6d rows %5.1f MiB apiserver %.2f cores manager %v",
			smp.AtSeconds, smp.OfferedPerSec, smp.SucceededPerSec, smp.ManagerSucceededPerSec, smp.P50Ms, smp.P99Ms, smp.Pending, smp.QueueDepth, smp.Live,
			smp.Etcd.DBTotal/(1<<20), smp.Etcd.DBInUse/(1<<20), smp.PGRows, float64(smp.PGBytes)/(1<<20), smp.APIServerCPU, fmtCores(smp.ManagerCPU))
	}
	for {
		select {
		case <-done:
			if time.Since(prevAt) >= s.cfg.Sample/2 {
				take() // the last part of the window, unless it is too short to be a rate
			}
			s.apiAt[1] = apiReading{apiWrites(s.t, s.e), s.managersSucceeded()}
			return samples
		case <-tick.C:
			take()
		case <-defrag:
			if err := s.etcd.post(context.Background(), "/v3/maintenance/defragment", map[string]any{}, nil); err != nil {
				s.t.Logf("defragment: %v", err)
			} else {
				s.defrags.Add(1)
			}
		}
	}
}

func fmtCores(cs []float64) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%.2f", c))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// managerSucceededMetric counts, per manager, the actions that reached a terminal phase, by phase.
const managerSucceededMetric = "actionledger_action_duration_seconds_count"

// managersSucceeded scrapes every manager now and returns their Succeeded counts summed (a manager whose scrape
// fails counts with its last known value).
func (s *soakRun) managersSucceeded() float64 {
	var total float64
	for i, m := range s.managers {
		if met, err := m.scrape(); err == nil {
			s.mgrLast[i] = sum(met, managerSucceededMetric, `phase="Succeeded"`)
		}
		total += s.mgrLast[i]
	}
	return total
}

// readCPU is the CPU seconds of each pid of s.pids.
func (s *soakRun) readCPU() []float64 {
	out := make([]float64, len(s.pids))
	for i, p := range s.pids {
		out[i] = cpuSeconds(p)
	}
	return out
}

// sample reads every column once.
func (s *soakRun) sample(cpu0, cpu1 []float64, window time.Duration) SoakSample {
	t, ctx := s.t, context.Background()
	w := window.Seconds()
	smp := SoakSample{AtSeconds: time.Since(s.start).Seconds(), Created: s.created.Load()}
	win := s.obs.window()
	smp.Succeeded, smp.SucceededByShard, smp.Pending = win.succeeded, win.byShard, win.pending
	smp.OfferedPerSec, smp.SucceededPerSec = float64(win.createdIn)/w, float64(len(win.latMs))/w
	if p := percentiles(win.latMs); p != nil {
		smp.P50Ms, smp.P99Ms = p["p50"], p["p99"]
	}
	nm := len(s.managers)
	cores := func(i int) float64 { return (cpu1[i] - cpu0[i]) / w }
	for i, m := range s.managers {
		smp.ManagerCPU = append(smp.ManagerCPU, cores(i))
		smp.ManagerRSS = append(smp.ManagerRSS, m.rss())
		if met, err := m.scrape(); err == nil {
			smp.QueueDepth += sum(met, "workqueue_depth", `name="externalaction"`)
			s.mgrLast[i] = sum(met, managerSucceededMetric, `phase="Succeeded"`)
		}
		smp.ManagerSucceeded += s.mgrLast[i]
	}
	smp.ManagerSucceededPerSec, s.mgrSucceeded = (smp.ManagerSucceeded-s.mgrSucceeded)/w, smp.ManagerSucceeded
	smp.APIServerCPU, smp.EtcdCPU, smp.BenchCPU = cores(nm), cores(nm+1), cores(nm+2)
	smp.APIServerRSS, smp.EtcdRSS = rssOf(s.pids[nm]), rssOf(s.pids[nm+1])
	smp.DestPeakPerSec = s.perSec.peakSince(time.Now().Add(-window))
	group := actionsv1alpha1.GroupVersion.Group
	var err error
	if smp.Live, err = s.etcd.count(ctx, fmt.Sprintf("/registry/%s/externalactions/%s/", group, s.ns)); err != nil {
		t.Error(err)
	}
	if smp.EtcdTombstones, err = s.etcd.count(ctx, fmt.Sprintf("/registry/%s/actiontombstones/%s/", group, s.ns)); err != nil {
		t.Error(err)
	}
	if smp.Etcd, err = s.etcd.metrics(ctx); err != nil {
		t.Error(err)
	}
	if s.pg != nil {
		smp.PGRows, smp.PGBytes = s.pg.read(t)
	}
	return smp
}

// finish reads the end-of-run figures (bytes per stored object, the tombstone table after VACUUM FULL, the
// destination's duplicates, the shard shares) and summarizes the samples.
func (s *soakRun) finish(samples []SoakSample, drained bool) SoakResult {
	t, ctx := s.t, context.Background()
	r := SoakResult{Shards: s.shards, Rate: s.cfg.Rate, DurationSeconds: s.cfg.Duration.Seconds(), Store: s.cfg.Store,
		Destination: s.cfg.Dest, Created: s.created.Load(), CreateFailed: s.obs.createFailures(), Drained: drained,
		Samples: samples, Defrags: s.defrags.Load(), Compressions: s.cfg.Compressions()}
	group := actionsv1alpha1.GroupVersion.Group
	st, err := s.etcd.stored(ctx, fmt.Sprintf("/registry/%s/externalactions/%s/", group, s.ns))
	if err != nil {
		t.Fatal(err)
	}
	r.StoredPerLiveAction = st.PerKey()
	all, err := s.etcd.stored(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.etcd.compactDefrag(ctx); err == nil && all.Bytes() > 0 {
		r.DBPerStored = float64(c.DBSize) / float64(all.Bytes())
	}
	end := s.obs.window()
	r.Succeeded, r.SucceededByShard = end.succeeded, end.byShard
	if s.pg != nil {
		sz, err := s.pg.sizes()
		if err != nil {
			t.Fatal(err)
		}
		r.PG = &sz
	}
	ds := s.dest.Summary()
	r.Duplicates, r.Replayed, r.DestinationRequests = ds.Duplicates, ds.Replayed, ds.Requests
	r.Failed = countFailed(t, s.e, s.ns)
	for i, m := range s.managers {
		if met, err := m.scrape(); err == nil {
			if v, ok := first(met, "actionledger_shard_destination_share"); ok {
				r.DestinationShare = append(r.DestinationShare, v)
			}
			s.mgrLast[i] = sum(met, managerSucceededMetric, `phase="Succeeded"`)
		}
	}
	r.ManagerSucceeded = s.mgrLast
	if a, b := s.apiAt[0], s.apiAt[1]; a.requests != nil && b.succeeded > a.succeeded {
		w := perAction(a.requests, b.requests, int(b.succeeded-a.succeeded))
		r.APIPerAction = &w
	}
	summarize(&r, s.cfg)
	return r
}

// first is the value of metric's first series, and whether there is one: for gauges with one series per
// destination (the soak has one destination).
func first(m map[string]float64, metric string) (float64, bool) {
	for k, v := range m {
		if name, _, _ := strings.Cut(k, "{"); name == metric {
			return v, true
		}
	}
	return 0, false
}

// rssOf reads VmRSS of pid from /proc, in bytes (0 when unreadable).
func rssOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)) //nolint:gosec // a pid's file under /proc
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024
		}
	}
	return 0
}

// secondCounter counts the requests of a handler per wall-clock second.
type secondCounter struct {
	mu     sync.Mutex
	counts map[int64]int
}

func (c *secondCounter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sec := time.Now().Unix()
		c.mu.Lock()
		c.counts[sec]++
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// peakSince is the largest count of a whole second from since to the last complete second, and forgets them.
func (c *secondCounter) peakSince(since time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now().Unix()
	peak := 0
	for sec, n := range c.counts {
		if sec >= now {
			continue // the current second is not complete
		}
		if sec >= since.Unix() {
			peak = max(peak, n)
		}
		delete(c.counts, sec)
	}
	return peak
}
