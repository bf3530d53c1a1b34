package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The soak part (BENCH_PARTS=soak, issue 26): a fixed arrival rate held for a long window on one control plane
// with the settings a 10M-actions-a-day install uses (the PostgreSQL tombstone store, ttlAfterFinished and
// tombstoneTTL compressed, the API server compacting etcd every --etcd-compaction-interval and a periodic
// defragmentation), once per shard count (one manager, then two shard managers at the same rate), sampled
// every BENCH_SOAK_SAMPLE. Each run writes its series as CSV and a PNG (rate, p99 and etcd size over time);
// docs/scale.md shows them. `make test` runs a quick variant that proves the harness only.

// soakConfig is the soak part's knobs (docs/scale.md, "The soak").
type soakConfig struct {
	// Rate is the arrival rate, actions created per second (BENCH_SOAK_RATE; 116 = 10M a day; quick: 4).
	Rate float64
	// Duration is how long actions arrive (BENCH_SOAK_DURATION seconds; default 1320, which leaves a steady
	// window of two compaction intervals after Warm; quick: 28).
	Duration time.Duration
	// Sample is the sampling period (BENCH_SOAK_SAMPLE seconds; default 10; quick: 2).
	Sample time.Duration
	// TTL is the real ttlAfterFinished the run stands for (BENCH_SOAK_TTL seconds; default 3600); the
	// Destination gets TTL / Compression.
	TTL time.Duration
	// Compression is how many seconds of ttlAfterFinished one second of the run stands for
	// (BENCH_SOAK_COMPRESSION; default 60: 1 h of TTL = 60 s; quick: 720, 1 h = 5 s).
	Compression float64
	// TombstoneTTL is the real tombstoneTTL, the replay horizon (BENCH_SOAK_TOMBSTONE_TTL seconds; default
	// 30 d); the Destination gets RunTombstoneTTL, which BENCH_SOAK_RUN_TOMBSTONE_TTL sets (seconds; default
	// 180; quick: 8): a 30-day horizon cannot be compressed by the same factor into a run.
	TombstoneTTL    time.Duration
	RunTombstoneTTL time.Duration
	// Compaction is the API server's --etcd-compaction-interval (BENCH_SOAK_COMPACTION seconds; default 300,
	// the API server's own default; quick: 3).
	Compaction time.Duration
	// Defrag is the period of the etcd defragmentation the soak runs itself, as an operator's job does in a
	// cluster (BENCH_SOAK_DEFRAG seconds; default 600; quick: 10; 0 turns it off).
	Defrag time.Duration
	// Shards are the shard counts to run, one control plane each (BENCH_SOAK_SHARDS; default 1,2; at most 2).
	Shards []int
	// Store is the tombstone store (BENCH_SOAK_STORE: postgres, the default, or objects).
	Store string
	// Dest is the bench Destination's kind (BENCH_SOAK_DEST: unsafe, the default, or safe; see BENCH_DESTS).
	Dest string
	// RateLimit is the Destination's rateLimit.requestsPerSecond (BENCH_SOAK_RATE_LIMIT; default 1.25 × Rate,
	// rounded up): the provider's one limit, which two shards divide between them.
	RateLimit int
	// Reconciles is each manager's --max-concurrent-reconciles (BENCH_SOAK_RECONCILES; default 16).
	Reconciles int
}

// soakConfigFromEnv reads the knobs; getenv is os.Getenv outside of tests, full selects make bench's defaults
// over the quick variant's. Errors name the bad knob.
func soakConfigFromEnv(getenv func(string) string, full bool) (soakConfig, error) {
	c := soakConfig{Rate: 4, Duration: 28 * time.Second, Sample: 2 * time.Second, TTL: time.Hour, Compression: 720,
		TombstoneTTL: 30 * 24 * time.Hour, RunTombstoneTTL: 8 * time.Second, Compaction: 3 * time.Second,
		Defrag: 10 * time.Second, Shards: []int{1, 2}, Store: "postgres", Dest: destUnsafe, Reconciles: 16}
	if full {
		c.Rate, c.Duration, c.Sample, c.Compression = 116, 1320*time.Second, 10*time.Second, 60
		c.RunTombstoneTTL, c.Compaction, c.Defrag = 180*time.Second, 300*time.Second, 600*time.Second
	}
	r := knobReader{getenv: getenv}
	c.Rate = r.num("BENCH_SOAK_RATE", c.Rate, false)
	c.Duration = r.secs("BENCH_SOAK_DURATION", c.Duration, false)
	c.Sample = r.secs("BENCH_SOAK_SAMPLE", c.Sample, false)
	c.TTL = r.secs("BENCH_SOAK_TTL", c.TTL, false)
	c.Compression = r.num("BENCH_SOAK_COMPRESSION", c.Compression, false)
	c.TombstoneTTL = r.secs("BENCH_SOAK_TOMBSTONE_TTL", c.TombstoneTTL, false)
	c.RunTombstoneTTL = r.secs("BENCH_SOAK_RUN_TOMBSTONE_TTL", c.RunTombstoneTTL, false)
	c.Compaction = r.secs("BENCH_SOAK_COMPACTION", c.Compaction, false)
	c.Defrag = r.secs("BENCH_SOAK_DEFRAG", c.Defrag, true)
	c.RateLimit = r.whole("BENCH_SOAK_RATE_LIMIT", int(math.Ceil(1.25*c.Rate)))
	c.Reconciles = r.whole("BENCH_SOAK_RECONCILES", c.Reconciles)
	if r.err != nil {
		return c, r.err
	}
	if v := strings.TrimSpace(getenv("BENCH_SOAK_SHARDS")); v != "" {
		c.Shards = nil
		for s := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 || n > 2 {
				return c, fmt.Errorf("BENCH_SOAK_SHARDS item %q: want 1 or 2", s)
			}
			if !slices.Contains(c.Shards, n) {
				c.Shards = append(c.Shards, n)
			}
		}
	}
	if v := strings.TrimSpace(getenv("BENCH_SOAK_STORE")); v != "" {
		if v != "postgres" && v != "objects" {
			return c, fmt.Errorf("BENCH_SOAK_STORE=%q: want postgres or objects", v)
		}
		c.Store = v
	}
	if v := strings.TrimSpace(getenv("BENCH_SOAK_DEST")); v != "" {
		if v != destUnsafe && v != destSafe {
			return c, fmt.Errorf("BENCH_SOAK_DEST=%q: want %s or %s", v, destUnsafe, destSafe)
		}
		c.Dest = v
	}
	if c.Sample < time.Second {
		return c, fmt.Errorf("BENCH_SOAK_SAMPLE=%s: want at least 1s", c.Sample)
	}
	if c.RunTTL() < time.Second {
		return c, fmt.Errorf("BENCH_SOAK_TTL / BENCH_SOAK_COMPRESSION = %s: want at least 1s (the API keeps whole seconds)", c.RunTTL())
	}
	if c.Duration < c.Warm()+3*c.Sample {
		return c, fmt.Errorf("BENCH_SOAK_DURATION=%s leaves no steady window: want at least %s (the warm-up %s, ttlAfterFinished + two compaction intervals + 10s, plus three samples)",
			c.Duration, c.Warm()+3*c.Sample, c.Warm())
	}
	return c, nil
}

// knobReader parses numeric knobs and keeps the first error (the soak's and the scale part's knobs).
type knobReader struct {
	getenv func(string) string
	err    error
}

// num is the knob k as a number > 0 (>= 0 with zeroOK), or def when unset.
func (r *knobReader) num(k string, def float64, zeroOK bool) float64 {
	v := strings.TrimSpace(r.getenv(k))
	if v == "" || r.err != nil {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || (f == 0 && !zeroOK) || math.IsInf(f, 0) || math.IsNaN(f) {
		want := "a number > 0"
		if zeroOK {
			want = "a number >= 0"
		}
		r.err = fmt.Errorf("%s=%q: want %s", k, v, want)
		return def
	}
	return f
}

// whole is the knob k as a whole number from 1 to 1,000,000, or def when unset.
func (r *knobReader) whole(k string, def int) int {
	f := r.num(k, float64(def), false)
	if r.err == nil && (f != math.Trunc(f) || f > 1e6) {
		r.err = fmt.Errorf("%s=%q: want a whole number from 1 to 1000000", k, strings.TrimSpace(r.getenv(k)))
	}
	return int(f)
}

// secs is the knob k in seconds, or def when unset.
func (r *knobReader) secs(k string, def time.Duration, zeroOK bool) time.Duration {
	return time.Duration(r.num(k, def.Seconds(), zeroOK) * float64(time.Second))
}

// RunTTL is the ttlAfterFinished the run's Destination gets: TTL / Compression, in whole seconds (the API
// server keeps durations, the manager stores expiresAt in whole seconds).
func (c soakConfig) RunTTL() time.Duration {
	return (time.Duration(float64(c.TTL) / c.Compression)).Truncate(time.Second)
}

// Warm is when etcd can be steady, from the first create: the first actions are collected at RunTTL, and the
// history etcd holds reaches its steady saw tooth after two compaction intervals more (the API server compacts,
// at each interval, to the revision it saw at the previous one: etcd holds one to two intervals of history);
// 10 s covers the time to finish and the collection's own writes.
func (c soakConfig) Warm() time.Duration {
	return c.RunTTL() + 2*c.Compaction + 10*time.Second
}

// Compressions states the run's time compression in words, for the table and the log.
func (c soakConfig) Compressions() string {
	return fmt.Sprintf("ttlAfterFinished %s runs as %s (%.0f×); tombstoneTTL %s runs as %s (%.0f×)",
		fmtDuration(c.TTL), fmtDuration(c.RunTTL()), c.TTL.Seconds()/c.RunTTL().Seconds(), fmtDuration(c.TombstoneTTL), fmtDuration(c.RunTombstoneTTL),
		c.TombstoneTTL.Seconds()/c.RunTombstoneTTL.Seconds())
}

// fmtDuration prints d in the largest whole unit of d, h or s ("30d", "1h", "90s"); otherwise as Go does.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
