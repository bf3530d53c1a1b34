package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/tombstone/postgres"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// The scale part (BENCH_PARTS=scale, `make bench` only): a compressed-time simulation of a steady stream of
// actions with ttlAfterFinished and tombstoneTTL scaled down to seconds, run until the object counts are
// steady, that measures what the stream costs the stores: live ExternalActions and tombstones, the bytes
// etcd stores for each, etcd's database size from its own metrics, and, for --tombstone-store=postgres, the
// table's size. docs/scale.md turns the per-object figures into sizes per actions-a-day.

// scaleConfig is the scale part's knobs.
type scaleConfig struct {
	// Rate is actions created per second (BENCH_SCALE_RATE, default 20).
	Rate float64
	// TTL is the Destination's retention.ttlAfterFinished (BENCH_SCALE_TTL seconds, default 20).
	TTL time.Duration
	// TombstoneTTL is the Destination's retention.tombstoneTTL (BENCH_SCALE_TOMBSTONE_TTL seconds, default 60).
	TombstoneTTL time.Duration
	// Duration is how long actions are created (BENCH_SCALE_DURATION seconds); it must leave a steady window
	// after Warm. Zero (the default) is DurationFor's: Warm + 90 s, 180 s for objects and 240 s for postgres
	// with the other defaults.
	Duration time.Duration
	// Sample is the sampling period (BENCH_SCALE_SAMPLE seconds, default 10).
	Sample time.Duration
	// Stores are the tombstone stores to run (BENCH_SCALE_STORES, default objects,postgres; postgres runs only
	// when the manager has --tombstone-store).
	Stores []string
}

// scaleConfigFromEnv reads the knobs; getenv is os.Getenv outside of tests. Errors name the bad knob.
func scaleConfigFromEnv(getenv func(string) string) (scaleConfig, error) {
	c := scaleConfig{Rate: 20, TTL: 20 * time.Second, TombstoneTTL: 60 * time.Second,
		Sample: 10 * time.Second, Stores: []string{"objects", "postgres"}}
	r := knobReader{getenv: getenv}
	c.Rate = r.num("BENCH_SCALE_RATE", c.Rate, false)
	c.TTL = r.secs("BENCH_SCALE_TTL", c.TTL, false)
	c.TombstoneTTL = r.secs("BENCH_SCALE_TOMBSTONE_TTL", c.TombstoneTTL, false)
	c.Duration = r.secs("BENCH_SCALE_DURATION", c.Duration, false)
	c.Sample = r.secs("BENCH_SCALE_SAMPLE", c.Sample, false)
	if r.err != nil {
		return c, r.err
	}
	if v := strings.TrimSpace(getenv("BENCH_SCALE_STORES")); v != "" {
		c.Stores = nil
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			if s != "objects" && s != "postgres" {
				return c, fmt.Errorf("BENCH_SCALE_STORES item %q: want objects or postgres", s)
			}
			if !slices.Contains(c.Stores, s) {
				c.Stores = append(c.Stores, s)
			}
		}
	}
	for _, store := range c.Stores {
		if c.Duration > 0 && c.Duration < c.Warm(store)+2*c.Sample {
			return c, fmt.Errorf("BENCH_SCALE_DURATION=%s leaves no steady window for the %s store: want at least %s (ttlAfterFinished + tombstoneTTL + the store's expiry period + 10s, plus two samples)",
				c.Duration, store, c.Warm(store)+2*c.Sample)
		}
	}
	return c, nil
}

// expiryPeriod is how often store deletes expired tombstones: the objects store requeues each tombstone for
// its own expiresAt (TombstoneReconciler), the PostgreSQL store deletes expired rows in batches every
// postgres.DefaultExpireInterval (1 minute; not a flag), so a row lives up to that much longer.
func expiryPeriod(store string) time.Duration {
	if store == "postgres" {
		return postgres.DefaultExpireInterval
	}
	return 0
}

// Warm is when the counts are steady, from the first create: the first tombstones go at about
// TTL + TombstoneTTL (+ the store's expiry period); 10 s more covers the time to finish, the whole-second
// rounding of expiresAt and the collection's own writes.
func (c scaleConfig) Warm(store string) time.Duration {
	return c.TTL + c.TombstoneTTL + expiryPeriod(store) + 10*time.Second
}

// DurationFor is Duration, or Warm + 90 s when Duration is zero: a steady window of nine samples at the
// default period, and more than one period of the PostgreSQL store's expiry (its row count is a saw tooth).
func (c scaleConfig) DurationFor(store string) time.Duration {
	if c.Duration > 0 {
		return c.Duration
	}
	return c.Warm(store) + 90*time.Second
}

// ExpectedLive is Little's law for the live objects: rate × the time an object lives, which is
// ttlAfterFinished less half a second on average (expiresAt is stored in whole seconds, cut down, and the
// object is collected at the stored time: docs/retention.md, "Clocks"); the time to finish and to collect
// (milliseconds here) is left out.
func (c scaleConfig) ExpectedLive() float64 {
	return c.Rate * (c.TTL.Seconds() - 0.5)
}

// ExpectedTombstones is rate × the time a tombstone lives: tombstoneTTL, plus half the store's expiry period
// on average (each collected action leaves one tombstone).
func (c scaleConfig) ExpectedTombstones(store string) float64 {
	return c.Rate * (c.TombstoneTTL + expiryPeriod(store)/2).Seconds()
}

// ScaleSample is one sample of a scale run.
type ScaleSample struct {
	AtSeconds float64 `json:"atSeconds"`
	Created   int64   `json:"created"`
	Live      int64   `json:"liveActions"`
	// Tombstones is the store's count: ActionTombstone keys in etcd, or the PostgreSQL table's rows.
	Tombstones int64 `json:"tombstones"`
	// EtcdTombstones is the ActionTombstone keys in etcd (0 with the postgres store once it runs).
	EtcdTombstones int64       `json:"etcdTombstones"`
	Etcd           EtcdMetrics `json:"etcd"`
	// PGRows and PGBytes are the PostgreSQL store's row count and pg_total_relation_size (postgres only).
	PGRows  int64 `json:"pgRows,omitempty"`
	PGBytes int64 `json:"pgTotalRelationBytes,omitempty"`
}

// ScaleResult is one store's scale run.
type ScaleResult struct {
	Store               string  `json:"tombstoneStore"`
	Rate                float64 `json:"ratePerSecond"`
	TTLSeconds          float64 `json:"ttlAfterFinishedSeconds"`
	TombstoneTTLSeconds float64 `json:"tombstoneTTLSeconds"`
	DurationSeconds     float64 `json:"durationSeconds"`
	Created             int64   `json:"created"`
	// AchievedRate is created / the creation time actually taken.
	AchievedRate float64 `json:"achievedRatePerSecond"`
	// SteadyLive and SteadyTombstones are the means of the samples after Warm; Expected* are Little's law.
	SteadyLive         float64 `json:"steadyLiveActions"`
	SteadyTombstones   float64 `json:"steadyTombstones"`
	ExpectedLive       float64 `json:"expectedLiveActions"`
	ExpectedTombstones float64 `json:"expectedTombstones"`
	// Stored is what etcd holds at the end of the creation (before any compaction), by prefix.
	StoredActions    Stored `json:"storedActions"`
	StoredTombstones Stored `json:"storedTombstones"`
	StoredAll        Stored `json:"storedAll"`
	// EtcdBaseline is etcd's status after a compaction and defragmentation before the first create; EtcdEnd
	// at the end of creation, before compaction; EtcdCompacted after compacting to the current revision and
	// defragmenting.
	EtcdBaseline  EtcdStatus `json:"etcdBaseline"`
	EtcdEnd       EtcdStatus `json:"etcdEnd"`
	EtcdCompacted EtcdStatus `json:"etcdCompactedDefragmented"`
	// HistoryBytesPerAction is (in use at the end − in use after compaction) / created: the old revisions each
	// action leaves in etcd until the next compaction.
	HistoryBytesPerAction float64 `json:"historyBytesPerAction"`
	// RevisionsPerAction is etcd revisions (writes of any key) between the baseline and the end, per action.
	RevisionsPerAction float64 `json:"etcdRevisionsPerAction"`
	// DBOverhead is (compacted db − baseline db) / (stored bytes now − stored bytes at baseline): bbolt's
	// pages and index per stored byte.
	DBOverhead float64 `json:"dbBytesPerStoredByte"`
	// PG* are the PostgreSQL store's table at the end (postgres only).
	PGRows        int64    `json:"pgRows,omitempty"`
	PGBytes       int64    `json:"pgTotalRelationBytes,omitempty"`
	PGBytesPerRow float64  `json:"pgBytesPerRow,omitempty"`
	PG            *PGSizes `json:"pg,omitempty"`
	ManagerRSS    float64  `json:"managerRSSBytes"`
	// Failed counts actions seen in a terminal phase other than Succeeded (should be 0).
	Failed  int           `json:"failed"`
	Samples []ScaleSample `json:"samples"`
	Load    string        `json:"loadavg"`
}

// steady returns the means of live and tombstone counts over the samples at or after warm.
func steady(samples []ScaleSample, warm time.Duration) (live, tombstones float64, n int) {
	for _, s := range samples {
		if s.AtSeconds < warm.Seconds() {
			continue
		}
		live += float64(s.Live)
		tombstones += float64(s.Tombstones)
		n++
	}
	if n == 0 {
		return 0, 0, 0
	}
	return live / float64(n), tombstones / float64(n), n
}

// perThousand is bytes per object × 1,000, in MiB.
func perThousand(bytesPerObject float64) float64 { return bytesPerObject * 1000 / (1 << 20) }

// TestBenchmarkScale runs the scale part, once per store in BENCH_SCALE_STORES (docs/scale.md). Only
// `make bench` runs it (BENCH_FULL), with BENCH_PARTS unset or naming scale.
func TestBenchmarkScale(t *testing.T) {
	if os.Getenv("BENCH_FULL") == "" {
		t.Skip("the scale part runs only in make bench (BENCH_FULL=1)")
	}
	if parts := os.Getenv("BENCH_PARTS"); parts != "" && !slices.Contains(strings.Split(parts, ","), "scale") {
		t.Skipf("BENCH_PARTS=%s does not include scale", parts)
	}
	cfg, err := scaleConfigFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	nTomb, err := cachedTombstones(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := managerBinary(t, dir)
	var results []ScaleResult
	for _, store := range cfg.Stores {
		if !storeAvailable(t, bin, store) {
			continue
		}
		t.Run(store, func(t *testing.T) { results = append(results, scaleRun(t, cfg, bin, t.TempDir(), store)) })
	}
	if len(results) == 0 {
		t.Fatal("no store ran")
	}
	res := scaleOut{Stores: results}
	if nTomb > 0 {
		t.Run("cached-tombstones", func(t *testing.T) {
			m := tombstoneMemory(t, bin, t.TempDir(), nTomb)
			res.CachedTombstones = &m
		})
	}
	t.Log("\n" + scaleTable(results))
	if m := res.CachedTombstones; m != nil {
		t.Logf("manager memory per cached ActionTombstone (%d cached): live heap %.0f B, heap in use %.0f B, RSS %.0f B (stored %d B each)",
			m.Cached, m.LivePerTombstone, m.InusePerTombstone, m.RSSPerTombstone, m.TemplateBytes)
	}
	out := os.Getenv("BENCH_SCALE_OUT")
	if out == "" {
		out = filepath.Join("bin", "bench", "scale.json")
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(envtestutil.RepoRoot(), out)
	}
	out = filepath.Clean(out)
	if err := os.MkdirAll(filepath.Dir(out), 0o750); err != nil { //nolint:gosec // BENCH_SCALE_OUT is the user's own choice
		t.Fatal(err)
	}
	data, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(out, data, 0o600); err != nil { //nolint:gosec // BENCH_SCALE_OUT is the user's own choice
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
	for _, r := range results {
		if r.Created == 0 || r.SteadyLive == 0 || (r.Store == "objects" && r.StoredTombstones.Keys == 0) ||
			(r.Store == "postgres" && r.PGRows == 0) {
			t.Fatalf("the scale run of %s measured nothing: %+v", r.Store, r)
		}
	}
	if m := res.CachedTombstones; m != nil && (m.With.RSS <= 0 || m.With.HeapInuse <= 0) {
		t.Fatalf("no memory measured with cached tombstones: %+v", m)
	}
}

// scaleEnv is a fresh control plane whose API server does not compact etcd by itself
// (--etcd-compaction-interval=0), so that the history a run leaves can be measured; the run compacts at its
// end. It has the finalizer policy, as newEnv.
func scaleEnv(t *testing.T) *envtestutil.Env {
	t.Helper()
	return controlPlaneCompacting(t, "0")
}

// controlPlaneCompacting is a fresh control plane whose API server compacts etcd every interval
// (--etcd-compaction-interval, a Go duration; "0" never), with the finalizer policy, as newEnv.
func controlPlaneCompacting(t *testing.T, interval string) *envtestutil.Env {
	t.Helper()
	// As envtestutil.Start: errors only (controller-runtime warns, with a stack, when no logger is set).
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(envtestutil.RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: envtestutil.AssetsDir(),
	}
	env.ControlPlane.GetAPIServer().Configure().Set("etcd-compaction-interval", interval)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	e := &envtestutil.Env{Env: env, Config: cfg, Client: c}
	e.InstallFinalizerPolicy(t, e.Namespace(t))
	return e
}

// scaleRun creates actions at cfg.Rate for cfg.Duration against a fast destination whose retention is
// cfg.TTL / cfg.TombstoneTTL, samples the stores every cfg.Sample, and measures etcd at the end.
func scaleRun(t *testing.T, cfg scaleConfig, bin, dir, store string) ScaleResult {
	ctx := context.Background()
	e := scaleEnv(t)
	ns := e.Namespace(t)
	etcd := newEtcdClient(e.Env.ControlPlane.Etcd.URL.String())
	_, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	e.CreateDestination(t, ns, "fast", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Retention = &actionsv1alpha1.Retention{TTLAfterFinished: &metav1.Duration{Duration: cfg.TTL},
			TombstoneTTL: &metav1.Duration{Duration: cfg.TombstoneTTL}}
	})
	load := loadavg()
	args, pg := storeArgs(t, bin, store, dir)
	p := startManager(t, e, bin, dir, 16, args...)
	defer p.stop()
	e.Create(t, envtestutil.Action(ns, "warm", "fast", "/x", `{"i":1}`))
	e.WaitPhase(t, ns, "warm", actionsv1alpha1.PhaseSucceeded, 60*time.Second)

	group := actionsv1alpha1.GroupVersion.Group
	actionsPrefix := fmt.Sprintf("/registry/%s/externalactions/%s/", group, ns)
	tombPrefix := fmt.Sprintf("/registry/%s/actiontombstones/%s/", group, ns)
	base, err := etcd.compactDefrag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	storedBase, err := etcd.stored(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}

	var created atomic.Int64
	var samples []ScaleSample
	start := time.Now()
	sample := func() {
		s := ScaleSample{AtSeconds: time.Since(start).Seconds(), Created: created.Load()}
		var err error
		if s.Live, err = etcd.count(ctx, actionsPrefix); err != nil {
			t.Error(err)
		}
		if s.EtcdTombstones, err = etcd.count(ctx, tombPrefix); err != nil {
			t.Error(err)
		}
		s.Tombstones = s.EtcdTombstones
		if s.Etcd, err = etcd.metrics(ctx); err != nil {
			t.Error(err)
		}
		if pg != nil {
			s.PGRows, s.PGBytes = pg.read(t)
			s.Tombstones = s.PGRows
		}
		samples = append(samples, s)
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(cfg.Sample)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				sample()
				s := samples[len(samples)-1]
				t.Logf("t=%4.0fs created %6d live %5d tombstones %6d etcd db %.1f MiB (in use %.1f MiB)%s", s.AtSeconds, s.Created, s.Live,
					s.Tombstones, s.Etcd.DBTotal/(1<<20), s.Etcd.DBInUse/(1<<20), pgNote(s))
			}
		}
	}()

	var wg sync.WaitGroup
	var failed atomic.Bool
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
	duration := cfg.DurationFor(store)
	n := int(cfg.Rate * duration.Seconds())
	for i := 0; i < n && !failed.Load(); i++ {
		if i > 0 {
			<-tick.C
		}
		wg.Go(func() {
			if err := e.Client.Create(ctx, envtestutil.Action(ns, fmt.Sprintf("s-%d", i), "fast", "/x", `{"i":1}`)); err != nil {
				failed.Store(true)
				t.Errorf("create: %v", err)
				return
			}
			created.Add(1)
		})
	}
	tick.Stop()
	wg.Wait()
	took := time.Since(start)
	close(stopSampling)
	<-sampled
	if failed.Load() {
		t.FailNow()
	}
	sample()

	r := ScaleResult{Store: store, Rate: cfg.Rate, TTLSeconds: cfg.TTL.Seconds(), TombstoneTTLSeconds: cfg.TombstoneTTL.Seconds(),
		DurationSeconds: duration.Seconds(), Created: created.Load(), AchievedRate: float64(created.Load()) / took.Seconds(),
		Samples: samples, ExpectedTombstones: cfg.ExpectedTombstones(store), ManagerRSS: p.rss()}
	r.SteadyLive, r.SteadyTombstones, _ = steady(samples, cfg.Warm(store))
	r.ExpectedLive = cfg.ExpectedLive()
	if r.StoredActions, err = etcd.stored(ctx, actionsPrefix); err != nil {
		t.Fatal(err)
	}
	if r.StoredTombstones, err = etcd.stored(ctx, tombPrefix); err != nil {
		t.Fatal(err)
	}
	if r.StoredAll, err = etcd.stored(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	if pg != nil {
		sz, err := pg.sizes()
		if err != nil {
			t.Fatal(err)
		}
		r.PG = &sz
		r.PGRows, r.PGBytes = sz.Rows, sz.Total
		if sz.Rows > 0 {
			r.PGBytesPerRow = float64(sz.Total) / float64(sz.Rows)
		}
	}
	r.Failed = countFailed(t, e, ns)
	r.EtcdBaseline = base
	if r.EtcdEnd, err = etcd.status(ctx); err != nil {
		t.Fatal(err)
	}
	if r.EtcdCompacted, err = etcd.compactDefrag(ctx); err != nil {
		t.Fatal(err)
	}
	r.RevisionsPerAction = float64(r.EtcdEnd.Revision-base.Revision) / float64(r.Created)
	r.HistoryBytesPerAction = float64(r.EtcdEnd.DBSizeInUse-r.EtcdCompacted.DBSizeInUse) / float64(r.Created)
	if d := r.StoredAll.Bytes() - storedBase.Bytes(); d > 0 {
		r.DBOverhead = float64(r.EtcdCompacted.DBSize-base.DBSize) / float64(d)
	}
	r.Load = load + " -> " + loadavg()
	t.Logf("%s: %d created at %.1f/s; steady live %.0f (expected %.0f), tombstones %.0f (expected %.0f); per live action %.0f B, per tombstone %.0f B in etcd; history %.0f B per action; db %d -> %d B (in use %d), compacted+defragmented %d B; failed %d",
		store, r.Created, r.AchievedRate, r.SteadyLive, r.ExpectedLive, r.SteadyTombstones, r.ExpectedTombstones,
		r.StoredActions.PerKey(), r.StoredTombstones.PerKey(), r.HistoryBytesPerAction, base.DBSize, r.EtcdEnd.DBSize,
		r.EtcdEnd.DBSizeInUse, r.EtcdCompacted.DBSize, r.Failed)
	return r
}

func pgNote(s ScaleSample) string {
	if s.PGRows == 0 && s.PGBytes == 0 {
		return ""
	}
	return fmt.Sprintf(", postgres %d rows %.1f MiB (ActionTombstones in etcd: %d)", s.PGRows, float64(s.PGBytes)/(1<<20), s.EtcdTombstones)
}

// countFailed counts the namespace's live actions in a terminal phase other than Succeeded.
func countFailed(t *testing.T, e *envtestutil.Env, ns string) int {
	t.Helper()
	l := &actionsv1alpha1.ExternalActionList{}
	if err := e.Client.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, xa := range l.Items {
		if xa.Status.Phase.Terminal() && xa.Status.Phase != actionsv1alpha1.PhaseSucceeded {
			n++
		}
	}
	return n
}

// scaleTable is the per-store summary, per 1,000 objects.
func scaleTable(rs []ScaleResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| store | rate/s | ttlAfterFinished | tombstoneTTL | created | live (expected) | tombstones (expected) | etcd B / live action | etcd B / tombstone | MiB / 1,000 live | MiB / 1,000 tombstones | etcd revisions / action | history B / action | etcd db end (in use) | compacted+defrag | db B / stored B | postgres rows | postgres B / row (after VACUUM FULL) | postgres MiB / 1,000 rows |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		pgRows, pgRow, pgK := "", "", ""
		if r.Store == "postgres" {
			pgRows, pgRow, pgK = strconv.FormatInt(r.PGRows, 10), fmt.Sprintf("%.0f", r.PGBytesPerRow), fmt.Sprintf("%.2f", perThousand(r.PGBytesPerRow))
			if r.PG != nil && r.PG.Rows > 0 {
				pgRow += fmt.Sprintf(" (%.0f)", float64(r.PG.TotalAfterVacuumFull)/float64(r.PG.Rows))
			}
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.0fs | %.0fs | %d | %.0f (%.0f) | %.0f (%.0f) | %.0f | %.0f | %.2f | %.2f | %.1f | %.0f | %.1f MiB (%.1f) | %.1f MiB | %.2f | %s | %s | %s |\n",
			r.Store, r.AchievedRate, r.TTLSeconds, r.TombstoneTTLSeconds, r.Created, r.SteadyLive, r.ExpectedLive,
			r.SteadyTombstones, r.ExpectedTombstones, r.StoredActions.PerKey(), r.StoredTombstones.PerKey(),
			perThousand(r.StoredActions.PerKey()), perThousand(r.StoredTombstones.PerKey()), r.RevisionsPerAction, r.HistoryBytesPerAction,
			float64(r.EtcdEnd.DBSize)/(1<<20), float64(r.EtcdEnd.DBSizeInUse)/(1<<20), float64(r.EtcdCompacted.DBSize)/(1<<20),
			r.DBOverhead, pgRows, pgRow, pgK)
	}
	return b.String()
}
