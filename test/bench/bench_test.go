// Package bench measures actionledger against the API server's own limit: throughput and latency from
// creation to Succeeded, the raw-write rate of a bare client doing the same writes, API writes per action
// (from the API server's apiserver_request_total), and the manager's memory per cached action.
//
// The throughput parts (headline, sizes, destlatency) run once per kind of bench Destination in BENCH_DESTS
// (unsafe: the destination does not say it deduplicates on the key; safe: it does, and asks for no claim
// before a send that is safe to repeat, when the CRD has spec.idempotency.claim), interleaved in repeats. The
// bytes part (BENCH_PARTS=bytes, BENCH_BYTES_ACTIONS) measures, with no manager, what each field group of the
// status costs the bare client's writes, from the raw baseline's minimal status to the manager's own (issue 24).
//
// The manager runs as its own OS process (./cmd built once), against envtest's API server, so its memory is
// its own. Every case gets a fresh control plane, so no case sees another's objects.
//
// `make bench` runs the full variant (BENCH_FULL=1); `make test` runs a quick variant that only proves the
// harness works. Speed is reported, never asserted. See docs/benchmarks.md for the knobs.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
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

// Run is one measured throughput or fixed-rate run.
type Run struct {
	Actions    int     `json:"actions"`
	Creators   int     `json:"creators,omitempty"`
	Reconciles int     `json:"maxConcurrentReconciles"`
	RatePerSec float64 `json:"offeredRatePerSecond,omitempty"`
	// DestLatencyMs is how long the destination took to answer each request (BENCH_DEST_LATENCY_MS).
	DestLatencyMs int `json:"destinationLatencyMs"`
	// MaxInFlight is the Destination's spec.concurrency.maxInFlight as the API server kept it (0: not set,
	// the CRD has no such field).
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// Destination is the bench Destination's kind (BENCH_DESTS: unsafe or safe); IdempotencyClaim its
	// spec.idempotency.claim as the API server kept it ("": not set, the CRD has no such field).
	Destination      string  `json:"destination"`
	IdempotencyClaim string  `json:"idempotencyClaim,omitempty"`
	Seconds          float64 `json:"seconds"`
	// ActionsPerSecond is actions / (last Succeeded seen - first create).
	ActionsPerSecond float64 `json:"actionsPerSecond"`
	// RawPerSecond is the bare client's rate for create + status claim + status outcome, same control plane.
	RawPerSecond float64 `json:"rawObjectsPerSecond,omitempty"`
	RatioToRaw   float64 `json:"ratioToRaw,omitempty"`
	// Raw2PerSecond is the bare client's rate for create + status outcome (the claimless path's two writes),
	// same control plane, measured for the safe kind only; RatioToRaw2 is actions/s over it (issue 35).
	Raw2PerSecond float64 `json:"rawClaimlessObjectsPerSecond,omitempty"`
	RatioToRaw2   float64 `json:"ratioToRawClaimless,omitempty"`
	// RawBeforeAfter and Raw2BeforeAfter are the bare clients' rates in their runs before and after the
	// manager's (one value when only the run after was made); RawPerSecond and Raw2PerSecond are both runs'
	// objects over both runs' time.
	RawBeforeAfter  []float64          `json:"rawObjectsPerSecondBeforeAfter,omitempty"`
	Raw2BeforeAfter []float64          `json:"rawClaimlessObjectsPerSecondBeforeAfter,omitempty"`
	LatencyMs       map[string]float64 `json:"latencyMs"`
	Writes          Writes             `json:"writesPerAction"`
	// ReconcilesPerAction is the manager's ExternalAction reconciles per action (controller_runtime_reconcile_total,
	// controller "externalaction"), from the warm-up's end to the last Succeeded.
	ReconcilesPerAction float64 `json:"reconcilesPerAction"`
	// CPUms is CPU milliseconds per action of each process, from the warm-up's end to the last Succeeded.
	CPUms CPU `json:"cpuMsPerAction"`
	// RawCPUms is the same for the raw baseline, per object; Raw2CPUms for the 2-write bare client.
	RawCPUms  CPU    `json:"rawCpuMsPerObject"`
	Raw2CPUms *CPU   `json:"rawClaimlessCpuMsPerObject,omitempty"`
	Load      string `json:"loadavg"`
	// Dispatcher holds the run's dispatcher samples and the no-gap figures on them (destlatency part only).
	Dispatcher *DispatcherSamples `json:"dispatcher,omitempty"`
}

// MemoryResult is the manager's memory with n finished actions in its cache.
type MemoryResult struct {
	Cached int    `json:"cachedActions"`
	Slim   bool   `json:"slimStatusExperiment,omitempty"`
	Memory Memory `json:"memory"`
	// ObjectJSONBytes is the size of one cached action as JSON (managedFields stripped, as the cache does).
	ObjectJSONBytes int `json:"objectJSONBytes"`
	// Per-action growth over the empty manager, in bytes.
	LivePerAction  float64 `json:"gcLiveHeapBytesPerAction"`
	InusePerAction float64 `json:"heapInuseBytesPerAction"`
	RSSPerAction   float64 `json:"rssBytesPerAction"`
	StartSeconds   float64 `json:"secondsToSync"`
	Load           string  `json:"loadavg"`
}

// Report is the JSON written to BENCH_OUT.
type Report struct {
	Date      string `json:"date"`
	Full      bool   `json:"full"`
	CPUs      int    `json:"cpus"`
	MemTotal  string `json:"memTotal"`
	GoVersion string `json:"goVersion"`
	LoadStart string `json:"loadavgStart"`
	LoadEnd   string `json:"loadavgEnd"`
	// Destinations are the kinds of bench Destination of the throughput parts (BENCH_DESTS), in order.
	Destinations []string `json:"destinations,omitempty"`
	// Headline is the first kind of BENCH_DESTS (unsafe by default); HeadlineByDest has every kind's.
	Headline       *Headline            `json:"headline,omitempty"`
	HeadlineByDest map[string]*Headline `json:"headlineByDestination,omitempty"`
	Sizes          []Row                `json:"sizes,omitempty"`
	Reconcile      []Row                `json:"reconciles,omitempty"`
	Memory         []MemoryResult       `json:"memory,omitempty"`
	Baseline       *Memory              `json:"emptyManagerMemory,omitempty"`
	// DestLatency is the table by destination latency (BENCH_PARTS destlatency), one row per latency and kind.
	DestLatency []LatencyRow `json:"byDestinationLatency,omitempty"`
	// StatusBytes is the table by status shape (BENCH_PARTS bytes).
	StatusBytes []BytesRow `json:"byStatusShape,omitempty"`
}

// Headline holds the medians the targets are judged on.
type Headline struct {
	Destination   string  `json:"destination"`
	Runs          []Run   `json:"runs"`
	ActionsPerSec float64 `json:"medianActionsPerSecond"`
	RawPerSec     float64 `json:"medianRawObjectsPerSecond"`
	RatioToRaw    float64 `json:"medianRatioToRaw"`
	// Raw2PerSec and RatioToRaw2 are against the 2-write bare client (create + outcome), safe kind only.
	Raw2PerSec      float64 `json:"medianRawClaimlessObjectsPerSecond,omitempty"`
	RatioToRaw2     float64 `json:"medianRatioToRawClaimless,omitempty"`
	ControllerWrite float64 `json:"medianControllerWritesPerAction"`
	AtTenth         []Run   `json:"atTenthOfMaxRuns"`
	P99AtTenthMs    float64 `json:"medianP99MsAtTenthOfMax"`
}

// Row is the median of the runs of one (actions, reconciles, destination kind) point.
type Row struct {
	Destination      string             `json:"destination"`
	IdempotencyClaim string             `json:"idempotencyClaim,omitempty"`
	Actions          int                `json:"actions"`
	Reconciles       int                `json:"maxConcurrentReconciles"`
	Runs             int                `json:"runs"`
	ActionsPerSec    float64            `json:"actionsPerSecond"`
	RawPerSec        float64            `json:"rawObjectsPerSecond"`
	Ratio            float64            `json:"ratioToRaw"`
	LatencyMs        map[string]float64 `json:"latencyMs"`
	Writes           Writes             `json:"writesPerAction"`
}

func intEnv(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func intsEnv(k string, def []int) []int {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	var out []int
	for s := range strings.SplitSeq(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(l, "MemTotal:") {
			return strings.Join(strings.Fields(l)[1:], " ")
		}
	}
	return ""
}

// newEnv starts a fresh control plane for one case.
func newEnv(t *testing.T) *envtestutil.Env {
	t.Helper()
	e, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Env.Stop() })
	if os.Getenv("BENCH_FINALIZER_POLICY") != "0" {
		// What config/default ships: the finalizer is added at admission, not by a write of the manager. (The raw
		// baseline's objects get it too; rawRate strips it and deletes them, so no manager finalizes them.)
		e.InstallFinalizerPolicy(t, e.Namespace(t))
	}
	return e
}

// runKey identifies the runs of one point: actions, reconciles, destination latency ms and destination kind.
type runKey struct {
	n, c, latMs int
	dest        string
}

// TestBenchmark runs the parts selected by BENCH_PARTS (headline, sizes, reconciles, latency, destlatency,
// memory, bytes; default: all in full mode, all at toy sizes in quick mode). The throughput parts (headline,
// sizes, destlatency) run once per destination kind of BENCH_DESTS, interleaved.
func TestBenchmark(t *testing.T) {
	full := os.Getenv("BENCH_FULL") != ""
	parts := map[string]bool{}
	for p := range strings.SplitSeq(os.Getenv("BENCH_PARTS"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts[p] = true
		}
	}
	want := func(p string) bool { return len(parts) == 0 || parts[p] }
	managerParts := []string{"headline", "latency", "sizes", "reconciles", "destlatency", "memory"}
	if !slices.ContainsFunc(append([]string{"bytes"}, managerParts...), want) {
		// Only parts of other tests (gateway, scale) are selected: do not overwrite the last report with an empty one.
		t.Skipf("BENCH_PARTS=%s selects no part of TestBenchmark", os.Getenv("BENCH_PARTS"))
	}
	n := intEnv("BENCH_ACTIONS", map[bool]int{true: 2000, false: 100}[full])
	creators := intEnv("BENCH_CREATORS", 16)
	reconciles := intEnv("BENCH_RECONCILES", 16)
	repeat := intEnv("BENCH_REPEAT", map[bool]int{true: 3, false: 1}[full])
	sizes := intsEnv("BENCH_SIZES", []int{500, 2000, 10000})
	concs := intsEnv("BENCH_RECONCILES_LIST", []int{1, 4, 16})
	mems := intsEnv("BENCH_MEMORY", map[bool][]int{true: {10000, 50000}, false: {100}}[full])
	window := time.Duration(intEnv("BENCH_MEMORY_WINDOW", map[bool]int{true: 30, false: 1}[full])) * time.Second
	if !full {
		sizes, concs = nil, nil
	}
	lats, err := parseLatencies(os.Getenv("BENCH_DEST_LATENCY_MS"), map[bool][]int{true: {0}, false: quickLatencies}[full])
	if err != nil {
		t.Fatal(err)
	}
	kinds, err := parseDests(os.Getenv("BENCH_DESTS"), map[bool][]string{true: {destUnsafe, destSafe}, false: {destUnsafe}}[full])
	if err != nil {
		t.Fatal(err)
	}
	first := kinds[0] // the kind of the fixed-rate, reconciles and memory runs, and of the report's headline

	dir := t.TempDir()
	var bin string
	if slices.ContainsFunc(managerParts, want) {
		bin = managerBinary(t, dir)
	}
	rep := Report{Date: time.Now().UTC().Format(time.RFC3339), Full: full, CPUs: runtime.NumCPU(), MemTotal: memTotal(),
		GoVersion: runtime.Version(), LoadStart: loadavg(), Destinations: kinds}
	runs := map[runKey][]Run{}
	var tenth []Run
	// quickLat holds the quick variant's latency rows by kind, run on the headline's control plane.
	quickLat := map[string]map[int][]Run{}
	measure := func(name string, n, c, latMs int, kind string) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			d := defaultDest()
			d.Latency, d.Kind = time.Duration(latMs)*time.Millisecond, kind
			// The destlatency part's runs (its latency 0 row is the headline's runs) take dispatcher samples.
			d.Sample = want("destlatency")
			// The bare clients run before and after the manager (straddle), so that a ratio compares runs that met
			// the same load on average.
			before := rawRuns(t, e, n, creators, kind)
			r := throughputAt(t, e, bin, dir, n, creators, c, 0, d)
			raw := straddle(before, rawRuns(t, e, n, creators, kind))
			r.RawPerSecond, r.RawCPUms, r.RawBeforeAfter = raw[0].perS, raw[0].cpu, raw[0].each
			r.RatioToRaw = r.ActionsPerSecond / r.RawPerSecond
			claimless := ""
			if kind == destSafe {
				// The claimless path's own limit: a bare client making its two writes (issue 35).
				cpu := raw[1].cpu
				r.Raw2PerSecond, r.Raw2CPUms, r.Raw2BeforeAfter = raw[1].perS, &cpu, raw[1].each
				r.RatioToRaw2 = r.ActionsPerSecond / r.Raw2PerSecond
				claimless = fmt.Sprintf("; 2-write raw %.1f/s %v, ratio %.2f (raw per object: %v)", r.Raw2PerSecond, r.Raw2BeforeAfter,
					r.RatioToRaw2, cpu)
			}
			t.Logf("destination %s, %d actions, %d reconciles, destination latency %d ms: %.1f actions/s, raw %.1f/s %v, ratio %.2f%s, p99 %.0f ms, writes %v, reconciles per action %.2f, CPU ms/action %v (raw per object: %v), the ratio the CPU predicts %.2f, manager ÷ API server CPU %.3f, load %s",
				destLabel(kind, r.IdempotencyClaim), n, c, latMs, r.ActionsPerSecond, r.RawPerSecond, r.RawBeforeAfter, r.RatioToRaw, claimless, r.LatencyMs["p99"], r.Writes, r.ReconcilesPerAction, r.CPUms, r.RawCPUms,
				cpuRatio(r), r.CPUms.Manager/max(r.CPUms.APIServer, 1e-9), r.Load)
			if r.Dispatcher != nil {
				t.Logf("destination %s, destination latency %d ms: %v", kind, latMs, r.Dispatcher)
			}
			runs[runKey{n, c, latMs, kind}] = append(runs[runKey{n, c, latMs, kind}], r)
			if !full && want("destlatency") && len(quickLat[kind]) == 0 {
				// Quick mode: prove the delayed destination and the table on the same control plane, with a
				// few actions (against this run's raw rate).
				quickLat[kind] = quickLatencyRuns(t, e, bin, dir, lats, creators, c, d, r)
			}
			if !full && want("latency") && kind == first {
				// Quick mode: prove the fixed-rate path on the same control plane instead of a fresh one.
				q := throughput(t, e, bin, dir, 20, 1, c, r.ActionsPerSecond/10)
				t.Logf("20 actions at %.1f/s: p99 %.1f ms", q.RatePerSec, q.LatencyMs["p99"])
				tenth = append(tenth, q)
			}
			if !full && want("memory") && len(mems) > 0 && kind == first {
				// Quick mode: prove the memory path on the same control plane too (its numbers mean nothing).
				rep.Baseline, rep.Memory = memoryRun(t, e, bin, dir, mems, window)
			}
		})
	}

	if want("headline") || want("latency") || (!full && want("destlatency")) {
		// Kinds interleaved (unsafe-1, safe-1, unsafe-2, ...), so that load drift hits them alike.
		for i := 1; i <= repeat; i++ {
			for _, k := range kinds {
				measure(fmt.Sprintf("headline-%s-%d", k, i), n, reconciles, 0, k)
			}
		}
		rep.HeadlineByDest = map[string]*Headline{}
		for _, k := range kinds {
			rep.HeadlineByDest[k] = headlineOf(k, runs[runKey{n, reconciles, 0, k}])
		}
		h := rep.HeadlineByDest[first]
		h.AtTenth = tenth
		if full && want("latency") && h.ActionsPerSec > 0 {
			rate := h.ActionsPerSec / 10
			// About 30 s of offered load per run (at least 100 actions).
			ln := min(max(int(rate*30), 100), 2000)
			var p99s []float64
			for i := 1; i <= repeat; i++ {
				t.Run(fmt.Sprintf("tenth-%d", i), func(t *testing.T) {
					e := newEnv(t)
					d := defaultDest()
					d.Kind = first
					r := throughputAt(t, e, bin, dir, ln, 1, reconciles, rate, d)
					t.Logf("destination %s, %d actions at %.1f/s: p50 %.1f ms p95 %.1f ms p99 %.1f ms, load %s", first, ln, rate, r.LatencyMs["p50"], r.LatencyMs["p95"], r.LatencyMs["p99"], r.Load)
					h.AtTenth = append(h.AtTenth, r)
					p99s = append(p99s, r.LatencyMs["p99"])
				})
			}
			h.P99AtTenthMs = median(p99s)
		} else if len(tenth) > 0 {
			h.P99AtTenthMs = tenth[0].LatencyMs["p99"]
		}
		rep.Headline = h
	}
	if want("sizes") {
		for _, s := range sizes {
			for _, k := range kinds {
				if len(runs[runKey{s, reconciles, 0, k}]) == 0 {
					measure(fmt.Sprintf("size-%d-%s", s, k), s, reconciles, 0, k)
				}
				rep.Sizes = append(rep.Sizes, row(runs[runKey{s, reconciles, 0, k}]))
			}
		}
	}
	if want("reconciles") {
		for _, c := range concs {
			if len(runs[runKey{n, c, 0, first}]) == 0 {
				measure(fmt.Sprintf("reconciles-%d", c), n, c, 0, first)
			}
			rep.Reconcile = append(rep.Reconcile, row(runs[runKey{n, c, 0, first}]))
		}
	}
	if want("destlatency") {
		// One row per latency and kind, at BENCH_ACTIONS and BENCH_RECONCILES; latency 0 reuses the headline runs.
		for _, l := range lats {
			if !full || len(runs[runKey{n, reconciles, l, first}]) > 0 {
				continue
			}
			for i := 1; i <= repeat; i++ {
				for _, k := range kinds {
					measure(fmt.Sprintf("destlatency-%dms-%s-%d", l, k, i), n, reconciles, l, k)
				}
			}
		}
		for _, l := range lats {
			for _, k := range kinds {
				rs := runs[runKey{n, reconciles, l, k}]
				if len(rs) == 0 && !full {
					rs = quickLat[k][l]
				}
				rep.DestLatency = append(rep.DestLatency, latencyRow(l, defaultDest().MaxInFlight, k, rs))
			}
		}
	}
	if full && want("memory") && len(mems) > 0 {
		t.Run("memory", func(t *testing.T) { rep.Baseline, rep.Memory = memoryRun(t, newEnv(t), bin, dir, mems, window) })
	}
	if want("bytes") {
		bn := intEnv("BENCH_BYTES_ACTIONS", map[bool]int{true: 2000, false: 20}[full])
		t.Run("bytes", func(t *testing.T) { rep.StatusBytes = statusBytesPart(t, bn, creators, repeat) })
	}
	rep.LoadEnd = loadavg()
	report(t, rep)
}

// quickLatencyRuns are the quick variant's latency rows: for each latency of lats but 0, a few actions against
// the Destination d with that latency, on the control plane of the headline run r (and against its raw rate).
func quickLatencyRuns(t *testing.T, e *envtestutil.Env, bin, dir string, lats []int, creators, reconciles int, d benchDest, r Run) map[int][]Run {
	t.Helper()
	out := map[int][]Run{}
	for _, l := range lats {
		if l == 0 {
			continue
		}
		d.Latency = time.Duration(l) * time.Millisecond
		q := throughputAt(t, e, bin, dir, quickLatencyActions, creators, reconciles, 0, d)
		q.RawPerSecond, q.RawCPUms = r.RawPerSecond, r.RawCPUms
		q.Raw2PerSecond, q.Raw2CPUms = r.Raw2PerSecond, r.Raw2CPUms
		t.Logf("destination %s, %d actions, destination latency %d ms: %.1f actions/s, p99 %.1f ms", d.Kind, q.Actions, l, q.ActionsPerSecond, q.LatencyMs["p99"])
		out[l] = append(out[l], q)
	}
	return out
}

// headlineOf is the headline of one destination kind: the medians of its runs (fixed-rate runs are added by
// the caller).
func headlineOf(kind string, rs []Run) *Headline {
	h := &Headline{Destination: kind, Runs: rs}
	k := len(rs)
	tput, raw, ratio, cw := make([]float64, 0, k), make([]float64, 0, k), make([]float64, 0, k), make([]float64, 0, k)
	for _, r := range rs {
		tput, raw, ratio, cw = append(tput, r.ActionsPerSecond), append(raw, r.RawPerSecond), append(ratio, r.RatioToRaw), append(cw, r.Writes.Controller)
	}
	h.ActionsPerSec, h.RawPerSec, h.RatioToRaw, h.ControllerWrite = median(tput), median(raw), median(ratio), median(cw)
	h.Raw2PerSec, h.RatioToRaw2 = medianOf(rs, func(r Run) float64 { return r.Raw2PerSecond }), medianOf(rs, func(r Run) float64 { return r.RatioToRaw2 })
	return h
}

// medianOf is the median of f over the runs where f is positive (0: none).
func medianOf(rs []Run, f func(Run) float64) float64 {
	var xs []float64
	for _, r := range rs {
		if v := f(r); v > 0 {
			xs = append(xs, v)
		}
	}
	return median(xs)
}

func row(rs []Run) Row {
	if len(rs) == 0 {
		return Row{}
	}
	var tput, raw, ratio, p50, p95, p99 []float64
	for _, r := range rs {
		tput, raw, ratio = append(tput, r.ActionsPerSecond), append(raw, r.RawPerSecond), append(ratio, r.RatioToRaw)
		p50, p95, p99 = append(p50, r.LatencyMs["p50"]), append(p95, r.LatencyMs["p95"]), append(p99, r.LatencyMs["p99"])
	}
	return Row{Destination: rs[0].Destination, IdempotencyClaim: rs[0].IdempotencyClaim, Actions: rs[0].Actions, Reconciles: rs[0].Reconciles, Runs: len(rs), ActionsPerSec: median(tput), RawPerSec: median(raw),
		Ratio: median(ratio), LatencyMs: map[string]float64{"p50": median(p50), "p95": median(p95), "p99": median(p99)}, Writes: rs[0].Writes}
}

// throughput is throughputAt with the default bench Destination (no latency, BENCH_MAX_IN_FLIGHT).
func throughput(t *testing.T, e *envtestutil.Env, bin, dir string, n, creators, reconciles int, rate float64) Run {
	t.Helper()
	return throughputAt(t, e, bin, dir, n, creators, reconciles, rate, defaultDest())
}

// throughputAt runs the manager process with reconciles workers and creates n actions against the bench
// destination d: as fast as creators workers can (rate 0) or at a fixed rate per second. Latency is from just
// before the create call to the moment this process's watch sees Succeeded.
func throughputAt(t *testing.T, e *envtestutil.Env, bin, dir string, n, creators, reconciles int, rate float64, d benchDest) Run {
	t.Helper()
	ctx := context.Background()
	ns := e.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true, CommitDelay: d.Latency})
	kept := createBenchDestination(t, e, ns, "fast", url, d)
	load := loadavg()
	pprofArgs, pprofURL := managerPprofArgs(t, bin)
	p := startManager(t, e, bin, dir, reconciles, append(managerInFlightArgs(t, bin, d.MaxInFlight), pprofArgs...)...)
	defer p.stop()
	w := watchSucceeded(t, e, ns)
	// Warm-up: one action end to end proves the manager's caches are synced before the clock starts.
	e.Create(t, envtestutil.Action(ns, "warm", "fast", "/x", `{"i":1}`))
	waitCount(t, w, 1, 60*time.Second+d.Latency)
	writes0 := settledWrites(t, e)
	meter := newCPUMeter(e, p.cmd.Process.Pid)
	cpu0 := meter.read()
	rec0 := reconcileCount(p)

	prof := startProfile(t, e, n, pprofURL)
	created := make([]time.Time, n)
	var failed atomic.Bool
	var createdN atomic.Int64 // creates that returned
	create := func(i int) {
		created[i] = time.Now()
		if err := e.Client.Create(ctx, envtestutil.Action(ns, fmt.Sprintf("a-%d", i), "fast", "/x", `{"i":1}`)); err != nil {
			failed.Store(true)
			t.Errorf("create: %v", err)
			return
		}
		createdN.Add(1)
	}
	start := time.Now()
	var sampler *dispatchSampler
	if d.Sample {
		// Waiting: created − Succeeded, the warm-up action aside (Succeeded before the clock started).
		sampler = sampleDispatcher(p, "Destination/"+ns+"/fast", start, func() int { return max(int(createdN.Load())-(w.succeeded()-1), 0) })
	}
	var wg sync.WaitGroup
	if rate > 0 {
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		for i := range n {
			if i > 0 {
				<-tick.C
			}
			wg.Go(func() { create(i) })
		}
		tick.Stop()
	} else {
		var next atomic.Int64
		for range creators {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < n && !failed.Load(); i = int(next.Add(1)) - 1 {
					create(i)
				}
			})
		}
	}
	wg.Wait()
	if failed.Load() {
		t.FailNow()
	}
	// Room for the destination's latency at the reconcile workers' concurrency (the bound on main).
	done := w.waitAll(t, n+1, time.Duration(n)*100*time.Millisecond+120*time.Second+time.Duration(n)*d.Latency/time.Duration(max(reconciles, 1)))
	var samples *DispatcherSamples
	if sampler != nil {
		limit := kept.MaxInFlight
		if limit <= 0 {
			limit = d.MaxInFlight // not applied: what the bench asked for
		}
		samples = sampler.stop(limit)
	}
	var last time.Time
	lat := make([]float64, 0, n)
	for i := range n {
		d := done[fmt.Sprintf("a-%d", i)]
		if d.After(last) {
			last = d
		}
		lat = append(lat, float64(d.Sub(created[i]).Microseconds())/1000)
	}
	cpu1 := meter.read()
	rec1 := reconcileCount(p)
	prof.finish(t, e)
	if prof != nil {
		t.Logf("the benchmark's watch made %d watch requests", w.watches.Load())
	}
	writes := settledWrites(t, e)
	elapsed := last.Sub(start).Seconds()
	return Run{Actions: n, Creators: creators, Reconciles: reconciles, RatePerSec: rate, Seconds: elapsed,
		DestLatencyMs: int(d.Latency.Milliseconds()), MaxInFlight: kept.MaxInFlight, Destination: d.Kind, IdempotencyClaim: kept.Claim,
		ActionsPerSecond: float64(n) / elapsed, LatencyMs: percentiles(lat), Writes: perAction(writes0, writes, n),
		CPUms: perActionCPU(cpu0, cpu1, n), ReconcilesPerAction: (rec1 - rec0) / float64(n), Load: load + " -> " + loadavg(), Dispatcher: samples}
}

// reconcileCount is the manager's controller_runtime_reconcile_total of the externalaction controller (0 when
// the scrape fails).
func reconcileCount(p *proc) float64 {
	m, err := p.scrape()
	if err != nil {
		return 0
	}
	return sum(m, "controller_runtime_reconcile_total", `controller="externalaction"`)
}

func waitCount(t *testing.T, w *watcher, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		c := len(w.done)
		w.mu.Unlock()
		if c >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm-up action did not succeed in %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settledWrites reads the API server's write counters once they stop moving (events are sent asynchronously,
// and a late write is still a write made for these actions).
func settledWrites(t *testing.T, e *envtestutil.Env) map[string]float64 {
	t.Helper()
	prev := apiWrites(t, e)
	for range 20 {
		time.Sleep(500 * time.Millisecond)
		cur := apiWrites(t, e)
		same := len(cur) == len(prev)
		for k, v := range cur {
			if prev[k] != v {
				same = false
			}
		}
		if same {
			return cur
		}
		prev = cur
	}
	return prev
}

// memoryRun measures the manager process empty (after one real action), then with each count of finished
// actions in its cache. The actions are written in their finished state (create with the finalizer, then the
// status of the real action as a template), before the manager starts, so it only caches them.
func memoryRun(t *testing.T, e *envtestutil.Env, bin, dir string, counts []int, window time.Duration) (*Memory, []MemoryResult) {
	t.Helper()
	waitGC := os.Getenv("BENCH_FULL") != ""
	ns := e.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	e.CreateDestination(t, ns, "fast", url, nil)

	p := startManager(t, e, bin, dir, 16)
	tmpl := envtestutil.Action(ns, "template", "fast", "/x", `{"i":1}`)
	e.Create(t, tmpl)
	done := e.WaitPhase(t, ns, "template", actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	base := p.memory(t, window, waitGC)
	p.stop()
	t.Logf("empty manager (1 action): %s", fmtMem(base))

	status := done.Status
	far := metav1.NewTime(time.Now().Add(30 * 24 * time.Hour))
	status.ExpiresAt = &far // not collected during the measurement
	slim := os.Getenv("BENCH_MEMORY_SLIM") != ""
	if slim {
		// What a cache transform dropping the history, the response and the conditions of finished
		// actions would save (an experiment: the controller does not do this).
		status.AttemptHistory, status.Response, status.Conditions = nil, nil, nil
	}
	objBytes := 0
	if b, err := json.Marshal(done); err == nil {
		objBytes = len(b)
		done.ManagedFields = nil
		done.Status = status
		if b, err = json.Marshal(done); err == nil {
			objBytes = len(b)
			t.Logf("each cached action (managedFields stripped): %s", b)
		}
	}

	out := make([]MemoryResult, 0, len(counts))
	have := 1 // the template
	for _, target := range counts {
		t0 := time.Now()
		bulkFinished(t, e, ns, have, target, status)
		t.Logf("wrote %d finished actions in %s", target-have, time.Since(t0).Round(time.Second))
		have = target
		load := loadavg()
		start := time.Now()
		p := startManager(t, e, bin, dir, 16)
		waitSynced(t, p, target, 10*time.Minute)
		synced := time.Since(start).Seconds()
		m := p.memory(t, window, waitGC)
		p.stop()
		r := MemoryResult{Cached: target, Slim: slim, Memory: m, ObjectJSONBytes: objBytes, StartSeconds: synced, Load: load + " -> " + loadavg(),
			LivePerAction:  (m.LiveHeap - base.LiveHeap) / float64(target),
			InusePerAction: (m.HeapInuse - base.HeapInuse) / float64(target),
			RSSPerAction:   (m.RSS - base.RSS) / float64(target)}
		t.Logf("%d cached: %s; per action: live %.0f B, inuse %.0f B, RSS %.0f B (object JSON %d B); synced in %.1fs",
			target, fmtMem(m), r.LivePerAction, r.InusePerAction, r.RSSPerAction, objBytes, synced)
		out = append(out, r)
	}
	return &base, out
}

func fmtMem(m Memory) string {
	const mib = 1 << 20
	return fmt.Sprintf("RSS %.1f MiB, heap inuse %.1f MiB, heap alloc %.1f MiB, live after GC %.0f MiB (%d GCs)",
		m.RSS/mib, m.HeapInuse/mib, m.HeapAlloc/mib, m.LiveHeap/mib, m.GCs)
}

// bulkFinished creates actions fin-<from>..fin-<to-1> with the finalizer and writes status on each.
func bulkFinished(t *testing.T, e *envtestutil.Env, ns string, from, to int, status actionsv1alpha1.ExternalActionStatus) {
	t.Helper()
	ctx := context.Background()
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var failed atomic.Bool
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < to && !failed.Load(); i = int(next.Add(1)) - 1 {
				xa := envtestutil.Action(ns, fmt.Sprintf("fin-%d", i), "fast", "/x", `{"i":1}`)
				xa.Finalizers = []string{actionsv1alpha1.Finalizer}
				if err := e.Client.Create(ctx, xa); err != nil {
					failed.Store(true)
					t.Errorf("create: %v", err)
					return
				}
				xa.Status = *status.DeepCopy()
				xa.Status.IdempotencyKey = ns + "/" + xa.Name
				if err := e.Client.Status().Update(ctx, xa); err != nil {
					failed.Store(true)
					t.Errorf("status: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		t.FailNow()
	}
}

// waitSynced waits until the manager has reconciled at least n actions and its queue is empty.
func waitSynced(t *testing.T, p *proc, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m, err := p.scrape()
		if err == nil && sum(m, "controller_runtime_reconcile_total", `controller="externalaction"`) >= float64(n) &&
			sum(m, "workqueue_depth", `name="externalaction"`) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manager did not reconcile %d cached actions in %s (last error %v)", n, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func report(t *testing.T, rep Report) {
	t.Helper()
	tables := map[string]string{} // file suffix -> markdown table
	if len(rep.DestLatency) > 0 {
		tables["-dest-latency"] = latencyTable(rep.DestLatency)
	}
	if len(rep.StatusBytes) > 0 {
		tables["-status-bytes"] = bytesTable(rep.StatusBytes)
	}
	t.Log(reportText(rep, tables))

	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = filepath.Join(envtestutil.RepoRoot(), "bin", "bench", "result.json")
		if os.Getenv("BENCH_FULL") == "" {
			out = filepath.Join(t.TempDir(), "result.json") // the quick variant does not overwrite the last full run
		}
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(envtestutil.RepoRoot(), out) // go test runs in the package directory
	}
	out = filepath.Clean(out)
	if err := os.MkdirAll(filepath.Dir(out), 0o750); err != nil { //nolint:gosec // BENCH_OUT is the user's own choice
		t.Fatal(err)
	}
	data, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(out, data, 0o600); err != nil { //nolint:gosec // BENCH_OUT is the user's own choice
		t.Fatalf("writing %s: %v", out, err)
	}
	t.Logf("wrote %s", out)
	for _, suffix := range slices.Sorted(maps.Keys(tables)) {
		p, err := writeTableBeside(out, suffix, tables[suffix])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", p)
	}
	for _, r := range rep.DestLatency {
		if len(r.Dispatcher) == 0 {
			continue
		}
		p := dispatchPlotPath(out, r.DestLatencyMs, r.Destination)
		title := fmt.Sprintf("destination %s, latency %d ms, %d actions", destLabel(r.Destination, r.IdempotencyClaim), r.DestLatencyMs, r.Actions)
		if err := plotDispatch(p, title, r.Dispatcher); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", p)
	}
	checkReport(t, rep)
}

// reportText is the report as the test log prints it.
func reportText(rep Report, tables map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nmachine: %d CPUs, MemTotal %s, %s; loadavg %s at start, %s at end\n", rep.CPUs, rep.MemTotal, rep.GoVersion, rep.LoadStart, rep.LoadEnd)
	line := func(label string, r Row) {
		fmt.Fprintf(&b, "%-24s %7d %6d %5d %10.1f %10.1f %6.2f %8.1f %8.1f %8.1f  %s\n", label, r.Actions, r.Reconciles, r.Runs, r.ActionsPerSec,
			r.RawPerSec, r.Ratio, r.LatencyMs["p50"], r.LatencyMs["p95"], r.LatencyMs["p99"], r.Writes)
	}
	fmt.Fprintf(&b, "%-24s %7s %6s %5s %10s %10s %6s %8s %8s %8s  %s\n", "case", "actions", "reconc", "runs", "actions/s", "raw obj/s", "ratio",
		"p50 ms", "p95 ms", "p99 ms", "API writes per action (median run)")
	var kinds []string // the kinds that have a headline, in BENCH_DESTS order
	for _, k := range rep.Destinations {
		if rep.HeadlineByDest[k] != nil {
			kinds = append(kinds, k)
		}
	}
	for _, k := range kinds {
		for i, r := range rep.HeadlineByDest[k].Runs {
			line(fmt.Sprintf("headline-%s-%d", k, i+1), row([]Run{r}))
		}
	}
	if h := rep.Headline; h != nil {
		for i, r := range h.AtTenth {
			line(fmt.Sprintf("tenth-%s-%d@%.0f/s", h.Destination, i+1, r.RatePerSec), row([]Run{r}))
		}
	}
	for _, r := range rep.Sizes {
		line("size-"+r.Destination, r)
	}
	for _, r := range rep.Reconcile {
		line("reconciles-"+r.Destination, r)
	}
	for _, k := range kinds {
		h := rep.HeadlineByDest[k]
		claim := ""
		if len(h.Runs) > 0 {
			claim = h.Runs[0].IdempotencyClaim
		}
		fmt.Fprintf(&b, "headline, destination %s (median of %d): %.1f actions/s, raw %.1f obj/s, ratio %.2f (target >= 0.8); controller writes/action %.2f (target <= 3)",
			destLabel(k, claim), len(h.Runs), h.ActionsPerSec, h.RawPerSec, h.RatioToRaw, h.ControllerWrite)
		if h.Raw2PerSec > 0 {
			fmt.Fprintf(&b, "; against the 2-write bare client (create + outcome) %.1f obj/s: ratio %.2f (target >= 0.9)", h.Raw2PerSec, h.RatioToRaw2)
		}
		if h == rep.Headline && len(h.AtTenth) > 0 {
			fmt.Fprintf(&b, "; p99 at a tenth of max %.1f ms (target < 100)", h.P99AtTenthMs)
		}
		b.WriteString("\n")
		for i, r := range h.Runs {
			fmt.Fprintf(&b, "headline-%s-%d CPU ms per action: %v; raw per object: %v", k, i+1, r.CPUms, r.RawCPUms)
			if r.Raw2CPUms != nil {
				fmt.Fprintf(&b, "; 2-write raw per object: %v", *r.Raw2CPUms)
			}
			b.WriteString("\n")
		}
	}
	if table := tables["-dest-latency"]; table != "" {
		fmt.Fprintf(&b, "by destination latency (bound = min(raw obj/s, maxInFlight / latency)):\n%s", table)
	}
	if rep.Baseline != nil {
		fmt.Fprintf(&b, "memory, empty manager: %s\n", fmtMem(*rep.Baseline))
	}
	for _, m := range rep.Memory {
		fmt.Fprintf(&b, "memory, %6d cached: %s; per action: live %.0f B, inuse %.0f B, RSS %.0f B (target < 3072; object JSON %d B)\n",
			m.Cached, fmtMem(m.Memory), m.LivePerAction, m.InusePerAction, m.RSSPerAction, m.ObjectJSONBytes)
	}
	if table := tables["-status-bytes"]; table != "" {
		writes := "create + claim + outcome"
		if !bytesWritesClaim() {
			writes = "create + outcome (BENCH_BYTES_WRITES=2)"
		}
		fmt.Fprintf(&b, "by status shape (bare client, %s per object, no manager):\n%s", writes, table)
	}
	return b.String()
}

// checkReport fails the test when the harness measured nothing (not a speed assertion).
func checkReport(t *testing.T, rep Report) {
	t.Helper()
	for _, h := range rep.HeadlineByDest {
		for _, r := range h.Runs {
			if r.ActionsPerSecond <= 0 || r.RawPerSecond <= 0 || r.Writes.StatusWrites < 1 || r.Writes.Creates < 1 ||
				(r.Destination == destSafe && r.Raw2PerSecond <= 0) {
				t.Fatalf("the harness measured nothing (destination %s): %+v", h.Destination, r)
			}
		}
	}
	for _, m := range rep.Memory {
		if m.Memory.RSS <= 0 || m.Memory.HeapInuse <= 0 {
			t.Fatalf("no memory measured: %+v", m)
		}
	}
	for _, r := range rep.DestLatency {
		if r.Runs == 0 || r.ActionsPerS <= 0 || r.BoundPerS <= 0 {
			t.Fatalf("the harness measured nothing at destination latency %d ms (destination %s): %+v", r.DestLatencyMs, r.Destination, r)
		}
		for _, d := range r.Dispatcher {
			if len(d.Samples) == 0 {
				t.Fatalf("no dispatcher sample at destination latency %d ms (destination %s): %d scrape errors", r.DestLatencyMs, r.Destination, d.ScrapeErrors)
			}
		}
	}
	if len(rep.StatusBytes) > 0 {
		if err := checkBytesRows(rep.StatusBytes); err != nil {
			t.Fatalf("the bytes part: %v", err)
		}
	}
}
