package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestScaleConfigFromEnv(t *testing.T) {
	c, err := scaleConfigFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Rate != 20 || c.TTL != 20*time.Second || c.TombstoneTTL != time.Minute || c.Duration != 0 ||
		c.Sample != 10*time.Second || strings.Join(c.Stores, ",") != "objects,postgres" {
		t.Errorf("defaults = %+v", c)
	}
	if c.Warm("objects") != 90*time.Second || c.DurationFor("objects") != 3*time.Minute {
		t.Errorf("objects: Warm %s, DurationFor %s; want ttl + tombstoneTTL + 10s = 90s, and 90s more", c.Warm("objects"), c.DurationFor("objects"))
	}
	// The PostgreSQL store deletes expired rows once a minute: rows live 30 s longer on average.
	if c.Warm("postgres") != 150*time.Second || c.DurationFor("postgres") != 4*time.Minute {
		t.Errorf("postgres: Warm %s, DurationFor %s; want 150s and 240s", c.Warm("postgres"), c.DurationFor("postgres"))
	}
	if got := c.ExpectedTombstones("objects"); got != 1200 {
		t.Errorf("ExpectedTombstones(objects) = %v, want 20/s x 60s = 1200", got)
	}
	if got := c.ExpectedTombstones("postgres"); got != 1800 {
		t.Errorf("ExpectedTombstones(postgres) = %v, want 20/s x (60s + 30s) = 1800", got)
	}
	if got := c.ExpectedLive(); got != 390 {
		t.Errorf("ExpectedLive() = %v, want 20/s x (20s - 0.5s) = 390", got)
	}

	c, err = scaleConfigFromEnv(env(map[string]string{"BENCH_SCALE_RATE": "5.5", "BENCH_SCALE_TTL": "2",
		"BENCH_SCALE_TOMBSTONE_TTL": "3", "BENCH_SCALE_DURATION": "80", "BENCH_SCALE_SAMPLE": "1.5",
		"BENCH_SCALE_STORES": " postgres , objects,postgres"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Rate != 5.5 || c.TTL != 2*time.Second || c.TombstoneTTL != 3*time.Second || c.DurationFor("postgres") != 80*time.Second ||
		c.Sample != 1500*time.Millisecond || strings.Join(c.Stores, ",") != "postgres,objects" {
		t.Errorf("parsed = %+v", c)
	}

	for k, v := range map[string]string{"BENCH_SCALE_RATE": "0", "BENCH_SCALE_TTL": "-1", "BENCH_SCALE_TOMBSTONE_TTL": "x",
		"BENCH_SCALE_DURATION": "NaN", "BENCH_SCALE_STORES": "objects,etcd"} {
		if _, err := scaleConfigFromEnv(env(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: err = %v, want an error naming the knob", k, v, err)
		}
	}
	// 20 + 60 + 10 s of warm-up and two samples do not fit in 100 s; for postgres 60 s more.
	if _, err := scaleConfigFromEnv(env(map[string]string{"BENCH_SCALE_DURATION": "100"})); err == nil {
		t.Error("a duration without a steady window was accepted")
	}
	if _, err := scaleConfigFromEnv(env(map[string]string{"BENCH_SCALE_DURATION": "160", "BENCH_SCALE_STORES": "objects"})); err != nil {
		t.Errorf("160 s for the objects store: %v", err)
	}
	if _, err := scaleConfigFromEnv(env(map[string]string{"BENCH_SCALE_DURATION": "160"})); err == nil || !strings.Contains(err.Error(), "postgres") {
		t.Errorf("160 s for the postgres store: err = %v, want one naming postgres", err)
	}
}

func TestSteady(t *testing.T) {
	s := []ScaleSample{{AtSeconds: 10, Live: 1000, Tombstones: 1}, {AtSeconds: 90, Live: 400, Tombstones: 1100},
		{AtSeconds: 100, Live: 420, Tombstones: 1300}}
	live, ts, n := steady(s, 90*time.Second)
	if n != 2 || live != 410 || ts != 1200 {
		t.Errorf("steady = %v, %v, %d; want the mean of the samples at or after 90s: 410, 1200, 2", live, ts, n)
	}
	if live, ts, n := steady(s, time.Hour); n != 0 || live != 0 || ts != 0 {
		t.Errorf("no steady sample: %v, %v, %d", live, ts, n)
	}
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"/registry/a/": "/registry/a0", "a\xff": "b", "\xff\xff": "\x00"} {
		if got := prefixEnd(in); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseEtcdMetrics(t *testing.T) {
	text := `# HELP etcd_mvcc_db_total_size_in_bytes Total size of the underlying database physically allocated in bytes.
# TYPE etcd_mvcc_db_total_size_in_bytes gauge
etcd_mvcc_db_total_size_in_bytes 2.097152e+07
etcd_mvcc_db_total_size_in_use_in_bytes 1.2e+07
etcd_mvcc_db_total_size_in_bytes_other 1
`
	m, err := parseEtcdMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.DBTotal != 20971520 || m.DBInUse != 12e6 {
		t.Errorf("parsed %+v", m)
	}
	if _, err := parseEtcdMetrics(strings.NewReader("etcd_mvcc_db_total_size_in_bytes 1\n")); err == nil {
		t.Error("a missing in-use gauge was not an error")
	}
}

func TestStoredAndPerThousand(t *testing.T) {
	s := Stored{Keys: 4, KeyBytes: 400, ValueBytes: 5600}
	if s.Bytes() != 6000 || s.PerKey() != 1500 {
		t.Errorf("Bytes %d PerKey %v", s.Bytes(), s.PerKey())
	}
	if (Stored{}).PerKey() != 0 {
		t.Error("PerKey of nothing")
	}
	if got := perThousand(1 << 20 / 1000.0); got != 1 {
		t.Errorf("perThousand = %v", got)
	}
}

func TestCachedTombstones(t *testing.T) {
	for v, want := range map[string]int{"": 20000, "0": 0, " 500 ": 500} {
		if n, err := cachedTombstones(env(map[string]string{"BENCH_SCALE_CACHED_TOMBSTONES": v})); err != nil || n != want {
			t.Errorf("%q: %d, %v; want %d", v, n, err, want)
		}
	}
	for _, v := range []string{"-1", "many"} {
		if _, err := cachedTombstones(env(map[string]string{"BENCH_SCALE_CACHED_TOMBSTONES": v})); err == nil {
			t.Errorf("%q was accepted", v)
		}
	}
}

// straddle's rate is both runs' objects over both runs' time (a slow run weighs by its time, not as one of two
// rates), its CPU per object weighted by objects; without a run before, the run after alone.
func TestStraddleCombinesTheBareRunsAroundTheManager(t *testing.T) {
	before := []rawRun{{n: 1000, secs: 10, cpu: CPU{APIServer: 10}}, {n: 1000, secs: 5, cpu: CPU{APIServer: 6}}}
	after := []rawRun{{n: 1000, secs: 30, cpu: CPU{APIServer: 14}}, {n: 1000, secs: 5, cpu: CPU{APIServer: 8}}}
	got := straddle(before, after)
	if len(got) != 2 || got[0].perS != 50 || got[0].cpu.APIServer != 12 || len(got[0].each) != 2 ||
		got[0].each[0] != 100 || got[0].each[1] != 33.3 || got[1].perS != 200 || got[1].cpu.APIServer != 7 {
		t.Errorf("straddle = %+v; want 2000 objects over 40 s (50/s, each 100 and 33.3), API server 12 ms; then 200/s, 7 ms", got)
	}
	if only := straddle(nil, after[:1]); math.Abs(only[0].perS-1000.0/30) > 1e-9 || len(only[0].each) != 1 {
		t.Errorf("without a run before: %+v, want the run after's 33.3/s", only)
	}
}
