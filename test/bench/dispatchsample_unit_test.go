package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dispatchSamples are samples 250 ms apart with the given in flight and waiting (parked for a slot: waiting − in
// flight).
func dispatchSamples(inFlight []float64, waiting []int) []DispatchSample {
	out := make([]DispatchSample, 0, len(inFlight))
	for i := range inFlight {
		out = append(out, DispatchSample{AtSeconds: 0.25 * float64(i), InFlight: inFlight[i], Parked: float64(waiting[i]) - inFlight[i], Waiting: waiting[i]})
	}
	return out
}

func TestNoGapShareAndLongestGap(t *testing.T) {
	const limit = 100 // 0.9 × limit = 90
	// i:        0    1    2    3    4    5    6    7    8    9
	inFlight := []float64{10, 95, 100, 50, 40, 100, 30, 100, 20, 5}
	waiting := []int{500, 500, 300, 300, 300, 200, 200, 189, 100, 5}
	// Eligible (parked >= 90): 0..7 (7: 189 − 100 = 89 is not); 8: 80 is not; 9: 0 is not.
	// Gaps (eligible and in flight < 90): 0, 3, 4, 6.
	s := dispatchSamples(inFlight, waiting)
	wantGap := []bool{true, false, false, true, true, false, true, false, false, false}
	for i, x := range s {
		if gap(x, limit) != wantGap[i] {
			t.Errorf("sample %d %+v: gap %v, want %v", i, x, gap(x, limit), wantGap[i])
		}
	}
	n, share := noGapShare(s, limit)
	if n != 7 || share == nil || *share != 3.0/7 {
		t.Errorf("noGapShare = %d, %v; want 7 eligible, share 3/7", n, share)
	}
	// Stretches: 0 (to sample 1, 0.25 s), 3-4 (to sample 5, 0.5 s), 6 (to sample 7, 0.25 s).
	if g := longestGap(s, limit); g != 0.5 {
		t.Errorf("longestGap = %v, want 0.5", g)
	}
	// A stretch that runs to the last sample ends there.
	tail := dispatchSamples([]float64{100, 0, 0, 0}, []int{500, 500, 500, 500})
	if g := longestGap(tail, limit); g != 0.5 {
		t.Errorf("longestGap of a trailing stretch = %v, want 0.5 (0.25 s to 0.75 s)", g)
	}
	// Nothing eligible: no share, no gap.
	idle := dispatchSamples([]float64{0, 5, 0}, []int{0, 50, 0})
	if n, share := noGapShare(idle, limit); n != 0 || share != nil || longestGap(idle, limit) != 0 || longestGap(nil, limit) != 0 {
		t.Errorf("idle samples: %d eligible, share %v, gap %v", n, share, longestGap(idle, limit))
	}
	d := summarizeDispatch(s, limit, 1)
	if d.Eligible != 7 || fmtShare(d.NoGapShare) != "0.43" || d.LongestGapSeconds != 0.5 || d.PeriodMs != 250 || len(d.Samples) != 10 ||
		!strings.Contains(d.String(), "10 dispatcher samples (limit 100, 1 scrape errors): 7 with waiting for room >= 90, no-gap share 0.43") {
		t.Errorf("summarizeDispatch = %v", d)
	}
}

func TestDispatchRowTableAndPlot(t *testing.T) {
	const limit = 100
	full := summarizeDispatch(dispatchSamples([]float64{100, 95, 0}, []int{500, 300, 0}), limit, 0)
	half := summarizeDispatch(dispatchSamples([]float64{100, 50, 100}, []int{500, 300, 0}), limit, 0)
	idle := summarizeDispatch(dispatchSamples([]float64{0, 0}, []int{0, 0}), limit, 0)
	runs := []Run{
		{Actions: 10, ActionsPerSecond: 40, RawPerSecond: 150, Dispatcher: full},
		{Actions: 10, ActionsPerSecond: 40, RawPerSecond: 150, Dispatcher: half},
		{Actions: 10, ActionsPerSecond: 40, RawPerSecond: 150, Dispatcher: idle},
	}
	r := latencyRow(1000, limit, destUnsafe, runs)
	// Shares 1 and 0.5 (the idle run has none): median 0.75. Longest gaps 0, 0.25, 0: median 0.
	if r.NoGapShare == nil || *r.NoGapShare != 0.75 || r.LongestGapSeconds != 0 || len(r.Dispatcher) != 3 {
		t.Fatalf("latencyRow dispatcher figures: share %v, gap %v, %d runs", fmtShare(r.NoGapShare), r.LongestGapSeconds, len(r.Dispatcher))
	}
	table := latencyTable([]LatencyRow{r, latencyRow(200, limit, destUnsafe, runs[2:]), latencyRow(0, limit, destUnsafe, []Run{{Actions: 1, ActionsPerSecond: 1, RawPerSecond: 1}})})
	lines := strings.Split(strings.TrimSpace(table), "\n")
	for i, want := range []string{"| no-gap share (longest gap s) |", "|---|", "| 0.75 (0.00) |", "| n/a (0.00) |", " |  |"} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("table line %d %q does not end with %q", i, lines[i], want)
		}
		if c := strings.Count(lines[i], "|"); c != strings.Count(lines[0], "|") {
			t.Errorf("table line %d has %d cells' bars, the header %d", i, c, strings.Count(lines[0], "|"))
		}
	}

	out := filepath.Join(t.TempDir(), "result.json")
	p := dispatchPlotPath(out, 1000, destUnsafe)
	if filepath.Base(p) != "result-dispatcher-1000ms-unsafe.png" {
		t.Errorf("dispatchPlotPath = %s", p)
	}
	if err := plotDispatch(p, "destination unsafe, latency 1000 ms", r.Dispatcher); err != nil {
		t.Fatal(err)
	}
	img, err := os.Open(p) //nolint:gosec // the test's own temp dir
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = img.Close() }()
	cfg, err := png.DecodeConfig(img)
	if err != nil || cfg.Width < 600 || cfg.Height < 600 {
		t.Errorf("PNG %+v, %v", cfg, err)
	}
	if err := plotDispatch(p, "none", nil); err == nil {
		t.Error("plotDispatch with no runs: no error")
	}
}
