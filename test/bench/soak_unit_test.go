package bench

import (
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSoakConfigFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	c, err := soakConfigFromEnv(env(), true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rate != 116 || c.Duration != 1320*time.Second || c.RunTTL() != time.Minute || c.Compaction != 5*time.Minute || c.RateLimit != 145 || c.Store != "postgres" ||
		len(c.Shards) != 2 {
		t.Errorf("full defaults: %+v (run TTL %s)", c, c.RunTTL())
	}
	if got := c.Compressions(); got != "ttlAfterFinished 1h runs as 60s (60×); tombstoneTTL 30d runs as 180s (14400×)" {
		t.Errorf("Compressions() = %q", got)
	}
	q, err := soakConfigFromEnv(env(), false)
	if err != nil {
		t.Fatal(err)
	}
	if q.RunTTL() != 5*time.Second || q.Duration < q.Warm()+3*q.Sample {
		t.Errorf("quick defaults leave no steady window: %+v, warm %s", q, q.Warm())
	}
	c, err = soakConfigFromEnv(env("BENCH_SOAK_RATE", "50", "BENCH_SOAK_SHARDS", "2,2", "BENCH_SOAK_DEFRAG", "0", "BENCH_SOAK_DEST", "safe"), true)
	if err != nil {
		t.Fatal(err)
	}
	if c.RateLimit != 63 || len(c.Shards) != 1 || c.Defrag != 0 || c.Dest != destSafe {
		t.Errorf("knobs not applied: %+v", c)
	}
	for _, bad := range [][]string{
		{"BENCH_SOAK_RATE", "0"}, {"BENCH_SOAK_RATE", "fast"}, {"BENCH_SOAK_SHARDS", "3"}, {"BENCH_SOAK_STORE", "mysql"},
		{"BENCH_SOAK_DEST", "maybe"}, {"BENCH_SOAK_DURATION", "60"}, {"BENCH_SOAK_COMPRESSION", "7200"}, {"BENCH_SOAK_DEFRAG", "-1"},
		{"BENCH_SOAK_RATE_LIMIT", "0.5"}, {"BENCH_SOAK_RECONCILES", "3000000"}, {"BENCH_SOAK_SAMPLE", "0.001"},
	} {
		if _, err := soakConfigFromEnv(env(bad...), true); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: error %v, want one naming the knob", bad[0], bad[1], err)
		}
	}
}

// soakSamples is a run at rate/s whose etcd file and p99 follow db and p99 sample by sample.
func soakSamples(rate float64, succeeded []float64, p99, db []float64) []SoakSample {
	out := make([]SoakSample, 0, len(db))
	for i := range db {
		out = append(out, SoakSample{AtSeconds: float64(10 * (i + 1)), OfferedPerSec: rate, SucceededPerSec: succeeded[i], P99Ms: p99[i],
			Etcd: EtcdMetrics{DBTotal: db[i] * (1 << 20)}, ManagerCPU: []float64{0.2}, ManagerRSS: []float64{1 << 26}})
	}
	return out
}

func TestSummarizeSoak(t *testing.T) {
	cfg := soakConfig{Rate: 100, Duration: 100 * time.Second, Sample: 10 * time.Second, TTL: time.Hour, Compression: 360,
		Compaction: 10 * time.Second, TombstoneTTL: 30 * 24 * time.Hour}
	// Warm = 10 s + 2 × 10 s + 10 s = 40 s: the samples whose 10 s lie after it, 50..100 s, are the window (6).
	flat := []float64{1, 1, 1, 50, 60, 55, 60, 58, 61, 59}
	p99 := []float64{900, 800, 700, 300, 310, 290, 305, 300, 320, 310}
	ok := []float64{100, 100, 100, 100, 99, 100, 98, 100, 100, 99}
	r := SoakResult{Samples: soakSamples(100, ok, p99, flat), StoredPerLiveAction: 2000, DBPerStored: 1.5}
	summarize(&r, cfg)
	if r.Steady.Samples != 6 || r.Steady.FromSeconds != 50 || !r.Steady.Sustained || !r.Steady.Flat || !r.Steady.FlatJudged {
		t.Errorf("a flat, sustained run: %+v", r.Steady)
	}
	if r.Steady.EtcdDBMaxMiB != 61 || r.Steady.P99Ms != 307.5 {
		t.Errorf("etcd max %.0f (want 61), p99 median %.1f (want 307.5)", r.Steady.EtcdDBMaxMiB, r.Steady.P99Ms)
	}
	if want := 61 + 360000*2000*1.5/(1<<20); r.Derived.LiveActions != 360000 || r.Derived.EtcdDBMiB != want {
		t.Errorf("derived %+v, want 360000 live and %.1f MiB", r.Derived, want)
	}

	growing := []float64{1, 1, 1, 50, 60, 70, 80, 90, 100, 110}
	r = SoakResult{Samples: soakSamples(100, ok, p99, growing)}
	summarize(&r, cfg)
	if r.Steady.Flat {
		t.Errorf("an etcd file growing 10 MiB a sample is not flat: %+v", r.Steady)
	}
	short := cfg
	short.Compaction = 25 * time.Second // Warm 70 s: a window of 80..100 s, 30 s, less than two intervals
	r = SoakResult{Samples: soakSamples(100, ok, p99, flat)}
	summarize(&r, short)
	if r.Steady.FlatJudged || r.Steady.Samples != 3 {
		t.Errorf("a window shorter than two compaction intervals is not judged: %+v", r.Steady)
	}
	slow := []float64{100, 100, 100, 90, 90, 90, 90, 90, 90, 90}
	r = SoakResult{Samples: soakSamples(100, slow, p99, flat)}
	r.Samples[len(r.Samples)-1].Pending = 2000
	summarize(&r, cfg)
	if r.Steady.Sustained {
		t.Errorf("90 of 100/s with a backlog of 20 s is not sustained: %+v", r.Steady)
	}
}

func TestSoakFiles(t *testing.T) {
	dir := t.TempDir()
	r := SoakResult{Shards: 2, Rate: 4, Store: "postgres", Samples: soakSamples(4, []float64{4, 4, 4}, []float64{100, 120, 110}, []float64{3, 4, 4})}
	for i := range r.Samples {
		r.Samples[i].SucceededByShard = []int64{int64(i), int64(i + 1)}
	}
	if err := writeSoakFiles(dir, r); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "soak-2shards.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || len(rows[0]) != len(soakCSVHeader) || rows[3][len(soakCSVHeader)-1] != "3" || rows[1][0] != "10.0" {
		t.Errorf("CSV rows %q", rows)
	}
	img, err := os.Open(filepath.Join(dir, "soak-2shards.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = img.Close() }()
	cfg, err := png.DecodeConfig(img)
	if err != nil || cfg.Width < 600 || cfg.Height < 600 {
		t.Errorf("PNG %+v, %v", cfg, err)
	}
}
