package bench

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The destination-latency part (BENCH_PARTS=destlatency): throughput, latency, 409s and manager CPU per
// action when the destination takes BENCH_DEST_LATENCY_MS to answer, against the bound
// min(raw API write rate, maxInFlight / latency) (issue #12).

const (
	// defaultMaxInFlight is BENCH_MAX_IN_FLIGHT's default: the bench Destination's spec.concurrency.maxInFlight.
	defaultMaxInFlight = 256
	// managerGlobalInFlight is the smallest --max-in-flight passed to a manager that has the flag, so that
	// the manager-wide limit (default 1024) is never the bench's bottleneck.
	managerGlobalInFlight = 1024
	// quickLatencyActions is the action count of a non-headline latency row in the quick variant.
	quickLatencyActions = 20
)

// quickLatencies is the quick variant's list when BENCH_DEST_LATENCY_MS is unset: 0 reuses the headline
// run, 50 ms exercises the delayed destination once.
var quickLatencies = []int{0, 50}

// parseLatencies parses a comma list of destination latencies in milliseconds ("0,200,1000"). Blanks
// around items are ignored; an empty string is def. Errors name the bad item; negatives and duplicates are
// refused (a typo in a benchmark knob must not silently measure something else).
func parseLatencies(v string, def []int) ([]int, error) {
	if strings.TrimSpace(v) == "" {
		return def, nil
	}
	var out []int
	seen := map[int]bool{}
	for s := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("BENCH_DEST_LATENCY_MS item %q: want a whole number of milliseconds >= 0", s)
		}
		if seen[n] {
			return nil, fmt.Errorf("BENCH_DEST_LATENCY_MS item %q: listed twice", s)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}

// benchDest is the bench Destination of one run: the test destination answers after Latency (a timer in the
// handler goroutine, destination.Options.CommitDelay: no CPU of the bench process), MaxInFlight is
// written into spec.concurrency.maxInFlight when the installed CRD has that field, and Kind (destUnsafe or
// destSafe, BENCH_DESTS) says whether the Destination declares that it deduplicates on the key.
type benchDest struct {
	Latency     time.Duration
	MaxInFlight int
	Kind        string
	// Sample says to take dispatcher samples during the manager's run (the destlatency part's runs).
	Sample bool
}

// defaultDest is the bench Destination of the headline, fixed-rate, size and reconciles runs (kind unsafe).
func defaultDest() benchDest {
	return benchDest{MaxInFlight: intEnv("BENCH_MAX_IN_FLIGHT", defaultMaxInFlight), Kind: destUnsafe}
}

// notes holds the notes already logged, so each is logged once per test binary and not once per run.
var notes sync.Map

func noteOnce(t *testing.T, msg string) {
	t.Helper()
	if _, seen := notes.LoadOrStore(msg, true); !seen {
		t.Log(msg)
	}
}

// managerHelp is the manager binary's -help output, read once per test binary: the flags it has decide what the
// bench passes, so that one harness measures older builds too.
var (
	helpOnce sync.Once
	helpText string
)

func managerHas(bin, flag string) bool {
	helpOnce.Do(func() {
		out, _ := exec.CommandContext(context.Background(), bin, "-help").CombinedOutput() //nolint:gosec // our own build
		helpText = string(out)
	})
	return strings.Contains(helpText, flag)
}

// managerInFlightArgs returns --max-in-flight=max(maxInFlight, 1024) when the manager binary has the flag,
// so that the manager-wide limit never caps the destination's; nothing otherwise.
func managerInFlightArgs(t *testing.T, bin string, maxInFlight int) []string {
	t.Helper()
	if !managerHas(bin, "-max-in-flight") {
		return nil
	}
	return []string{fmt.Sprintf("--max-in-flight=%d", max(maxInFlight, managerGlobalInFlight))}
}

// LatencyRow is the median of the runs at one destination latency and kind.
type LatencyRow struct {
	// Destination is the kind (BENCH_DESTS); IdempotencyClaim the spec.idempotency.claim its Destination kept.
	Destination      string `json:"destination"`
	IdempotencyClaim string `json:"idempotencyClaim,omitempty"`
	DestLatencyMs    int    `json:"destinationLatencyMs"`
	Actions          int    `json:"actions"`
	Reconciles       int    `json:"maxConcurrentReconciles"`
	// MaxInFlight is BENCH_MAX_IN_FLIGHT; Applied says whether the Destination kept it.
	MaxInFlight int     `json:"maxInFlight"`
	Applied     bool    `json:"maxInFlightApplied"`
	Runs        int     `json:"runs"`
	ActionsPerS float64 `json:"actionsPerSecond"`
	RawPerS     float64 `json:"rawObjectsPerSecond"`
	// BoundPerS is min(raw, maxInFlight / latency) in actions per second; Ratio is actions/s over it.
	BoundPerS float64 `json:"boundPerSecond"`
	Ratio     float64 `json:"ratioToBound"`
	P50Ms     float64 `json:"p50Ms"`
	P99Ms     float64 `json:"p99Ms"`
	// ConflictsPerAction counts API writes answered 409 on any resource, from apiserver_request_total.
	ConflictsPerAction float64 `json:"conflictsPerAction"`
	// ManagerCPUms is the manager process's utime+stime (/proc/<pid>/stat) per action, in milliseconds.
	ManagerCPUms float64 `json:"managerCpuMsPerAction"`
	// APIServerCPUms is the kube-apiserver's CPU per action, RawAPIServerCPUms its CPU per object of the 3-write
	// bare client, in milliseconds (issue 35: the steadier figures on a shared machine).
	APIServerCPUms    float64 `json:"apiserverCpuMsPerAction"`
	RawAPIServerCPUms float64 `json:"rawApiserverCpuMsPerObject"`
	// Raw2PerS is the 2-write bare client's rate (create + outcome; safe kind only, else 0) and Ratio2 actions/s
	// over min(it, maxInFlight / latency).
	Raw2PerS float64 `json:"rawClaimlessObjectsPerSecond,omitempty"`
	Ratio2   float64 `json:"ratioToClaimlessBound,omitempty"`
	// CPURatio is the median of the runs' cpuRatio: the ratio their CPU figures predict on a machine that is
	// busy in both runs. ManagerPerAPIServer is the median of the manager's CPU over the API server's in the same
	// run: the manager's cost with the machine's speed of the moment divided out.
	CPURatio            float64 `json:"cpuRatio,omitempty"`
	ManagerPerAPIServer float64 `json:"managerCpuPerApiserverCpu,omitempty"`
	// NoGapShare is the median of the runs' no-gap shares (runs with no eligible sample aside; absent: no run
	// had one) and LongestGapSeconds the median of their longest gaps; Dispatcher holds each run's samples
	// (issue 42 item 3; absent when the runs were not sampled).
	NoGapShare        *float64             `json:"noGapShare,omitempty"`
	LongestGapSeconds float64              `json:"longestGapSeconds,omitempty"`
	Dispatcher        []*DispatcherSamples `json:"dispatcherRuns,omitempty"`
}

// bound is min(raw objects/s, maxInFlight / latency); a latency of 0 leaves raw.
func bound(raw float64, maxInFlight int, latency time.Duration) float64 {
	if latency <= 0 || maxInFlight <= 0 {
		return raw
	}
	return math.Min(raw, float64(maxInFlight)/latency.Seconds())
}

// latencyRow takes the medians of the runs of one latency and destination kind (each run's ratio is against
// its own raw rate).
func latencyRow(latencyMs, maxInFlight int, kind string, rs []Run) LatencyRow {
	if len(rs) == 0 {
		return LatencyRow{Destination: kind, DestLatencyMs: latencyMs, MaxInFlight: maxInFlight}
	}
	lat := time.Duration(latencyMs) * time.Millisecond
	var tput, raw, bnd, ratio, ratio2, p50, p99, c409, cpu, api, rawAPI, share, longest, cpuRatios, mgrShare []float64
	var samples []*DispatcherSamples
	for _, r := range rs {
		if d := r.Dispatcher; d != nil {
			samples, longest = append(samples, d), append(longest, d.LongestGapSeconds)
			if d.NoGapShare != nil {
				share = append(share, *d.NoGapShare)
			}
		}
		b := bound(r.RawPerSecond, maxInFlight, lat)
		tput, raw, bnd = append(tput, r.ActionsPerSecond), append(raw, r.RawPerSecond), append(bnd, b)
		if b > 0 {
			ratio = append(ratio, r.ActionsPerSecond/b)
		}
		if r.Raw2PerSecond > 0 {
			ratio2 = append(ratio2, r.ActionsPerSecond/bound(r.Raw2PerSecond, maxInFlight, lat))
		}
		p50, p99 = append(p50, r.LatencyMs["p50"]), append(p99, r.LatencyMs["p99"])
		c409, cpu = append(c409, r.Writes.ConflictsAll), append(cpu, r.CPUms.Manager)
		api, rawAPI = append(api, r.CPUms.APIServer), append(rawAPI, r.RawCPUms.APIServer)
		if c := cpuRatio(r); c > 0 {
			cpuRatios = append(cpuRatios, c)
		}
		if r.CPUms.APIServer > 0 {
			mgrShare = append(mgrShare, r.CPUms.Manager/r.CPUms.APIServer)
		}
	}
	var noGap *float64
	if len(share) > 0 {
		m := median(share)
		noGap = &m
	}
	return LatencyRow{Destination: kind, IdempotencyClaim: rs[0].IdempotencyClaim, DestLatencyMs: latencyMs, Actions: rs[0].Actions, Reconciles: rs[0].Reconciles, MaxInFlight: maxInFlight,
		Applied: rs[0].MaxInFlight > 0, Runs: len(rs), ActionsPerS: median(tput), RawPerS: median(raw), BoundPerS: median(bnd),
		Ratio: median(ratio), P50Ms: median(p50), P99Ms: median(p99), ConflictsPerAction: median(c409), ManagerCPUms: median(cpu),
		APIServerCPUms: median(api), RawAPIServerCPUms: median(rawAPI),
		Raw2PerS: medianOf(rs, func(r Run) float64 { return r.Raw2PerSecond }), Ratio2: median(ratio2),
		NoGapShare: noGap, LongestGapSeconds: median(longest), Dispatcher: samples,
		CPURatio: median(cpuRatios), ManagerPerAPIServer: median(mgrShare)}
}

// cpuRatio is the ratio r's CPU figures predict: the bare client's CPU per object over the manager run's per
// action, every measured process summed (manager, kube-apiserver, etcd, this process); the claimless path's is
// over its 2-write client. When the machine is busy through both runs (the bench's runs on 2 cores are), its
// throughput is the cores over the CPU per action, so the measured ratio equals this one; 0 without figures.
func cpuRatio(r Run) float64 {
	raw := r.RawCPUms
	if r.Raw2CPUms != nil {
		raw = *r.Raw2CPUms
	}
	if run := r.CPUms.total(); run > 0 {
		return raw.total() / run
	}
	return 0
}

// latencyTable renders rows as a markdown table for docs/benchmarks.md.
func latencyTable(rows []LatencyRow) string {
	var b strings.Builder
	b.WriteString("| destination | destination latency | actions | reconciles | maxInFlight | runs | actions/s | raw obj/s | bound/s | ratio to bound | " +
		"2-write raw obj/s | ratio to 2-write bound | p50 ms | p99 ms | 409s per action | manager CPU ms per action | API server CPU ms per action (raw per object) | " +
		"ratio the CPU predicts | manager CPU ÷ API server CPU | no-gap share (longest gap s) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		lat := "0"
		if r.DestLatencyMs > 0 {
			lat = (time.Duration(r.DestLatencyMs) * time.Millisecond).String()
		}
		mif := strconv.Itoa(r.MaxInFlight)
		if !r.Applied {
			mif += " (not applied)"
		}
		raw2, ratio2 := "", ""
		if r.Raw2PerS > 0 {
			raw2, ratio2 = fmt.Sprintf("%.1f", r.Raw2PerS), fmt.Sprintf("%.2f", r.Ratio2)
		}
		noGap := ""
		if len(r.Dispatcher) > 0 {
			noGap = fmt.Sprintf("%s (%.2f)", fmtShare(r.NoGapShare), r.LongestGapSeconds)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %d | %.1f | %.1f | %.1f | %.2f | %s | %s | %.0f | %.0f | %.3f | %.2f | %.2f (%.2f) | %.2f | %.3f | %s |\n",
			destLabel(r.Destination, r.IdempotencyClaim), lat, r.Actions, r.Reconciles, mif, r.Runs, r.ActionsPerS, r.RawPerS, r.BoundPerS, r.Ratio,
			raw2, ratio2, r.P50Ms, r.P99Ms, r.ConflictsPerAction, r.ManagerCPUms, r.APIServerCPUms, r.RawAPIServerCPUms, r.CPURatio,
			r.ManagerPerAPIServer, noGap)
	}
	return b.String()
}

// TestDestLatencyKnobs checks the knob parsing, the bound and the markdown table (no control plane).
func TestDestLatencyKnobs(t *testing.T) {
	got, err := parseLatencies(" 0, 200 ,1000", []int{0})
	if err != nil || fmt.Sprint(got) != "[0 200 1000]" {
		t.Fatalf("parseLatencies: %v, %v", got, err)
	}
	if got, err := parseLatencies("", []int{7}); err != nil || fmt.Sprint(got) != "[7]" {
		t.Fatalf("empty knob: %v, %v; want the default", got, err)
	}
	for _, bad := range []string{"-1", "200ms", "0,,1", "200,200"} {
		if _, err := parseLatencies(bad, nil); err == nil {
			t.Errorf("parseLatencies(%q) accepted", bad)
		}
	}

	if b := bound(150, 256, 0); b != 150 {
		t.Errorf("bound at latency 0 = %v, want the raw rate", b)
	}
	if b := bound(150, 256, time.Second); b != 150 {
		t.Errorf("bound(150, 256, 1s) = %v, want the raw rate (256/s is above it)", b)
	}
	if b := bound(150, 16, 200*time.Millisecond); b != 80 {
		t.Errorf("bound(150, 16, 200ms) = %v, want 80 (maxInFlight / latency)", b)
	}

	runs := []Run{
		{Actions: 10, Reconciles: 16, MaxInFlight: 16, ActionsPerSecond: 40, RawPerSecond: 150,
			LatencyMs: map[string]float64{"p50": 210, "p99": 400}, Writes: Writes{ConflictsAll: 0.5}, CPUms: CPU{Manager: 3, APIServer: 10},
			RawCPUms: CPU{APIServer: 8}},
		{Actions: 10, Reconciles: 16, MaxInFlight: 16, ActionsPerSecond: 60, RawPerSecond: 150,
			LatencyMs: map[string]float64{"p50": 230, "p99": 600}, Writes: Writes{ConflictsAll: 0.1}, CPUms: CPU{Manager: 5, APIServer: 12},
			RawCPUms: CPU{APIServer: 9}},
	}
	r := latencyRow(200, 16, destUnsafe, runs)
	if r.Runs != 2 || r.ActionsPerS != 50 || r.BoundPerS != 80 || r.Ratio != 0.625 || r.P99Ms != 500 ||
		r.ConflictsPerAction != 0.3 || r.ManagerCPUms != 4 || r.APIServerCPUms != 11 || r.RawAPIServerCPUms != 8.5 || !r.Applied ||
		r.Raw2PerS != 0 || r.Ratio2 != 0 || math.Abs(r.CPURatio-(8.0/13+9.0/17)/2) > 1e-9 || math.Abs(r.ManagerPerAPIServer-(0.3+5.0/12)/2) > 1e-9 {
		t.Fatalf("latencyRow = %+v", r)
	}
	// The safe kind's 2-write bare client: its own bound, min(raw2, maxInFlight / latency).
	safe := []Run{{Actions: 10, ActionsPerSecond: 40, RawPerSecond: 150, Raw2PerSecond: 200}, {Actions: 10, ActionsPerSecond: 90, RawPerSecond: 150, Raw2PerSecond: 100}}
	if r2 := latencyRow(0, 256, destSafe, safe); r2.Raw2PerS != 150 || r2.Ratio2 != 0.55 ||
		!strings.Contains(latencyTable([]LatencyRow{r2}), "| 150.0 | 0.55 |") {
		t.Errorf("2-write columns: %+v\n%s", r2, latencyTable([]LatencyRow{r2}))
	}
	table := latencyTable([]LatencyRow{r, latencyRow(0, 256, destSafe, runs[:1])})
	for _, want := range []string{
		"| destination | destination latency |", "| unsafe | 200ms | 10 | 16 | 16 | 2 | 50.0 | 150.0 | 80.0 | 0.62 |  |  | 220 | 500 | 0.300 | 4.00 | 11.00 (8.50) | 0.57 | 0.358 |",
		"| safe (no claim field) | 0 | 10 | 16 | 256 | 1 | 40.0 | 150.0 | 150.0 | 0.27 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if r := latencyRow(0, 256, destUnsafe, []Run{{Actions: 1, ActionsPerSecond: 1, RawPerSecond: 1}}); r.Applied ||
		!strings.Contains(latencyTable([]LatencyRow{r}), "256 (not applied)") {
		t.Errorf("a run without maxInFlight must show it was not applied: %+v", r)
	}
}
