package bench

import (
	"fmt"
	"image/color"
	"os"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The dispatcher samples of the destlatency part (issue 42 item 3): every dispatchSamplePeriod of a manager
// run, the dispatcher's sends in flight and queued at the bench Destination (the manager's
// actionledger_inflight_sends and actionledger_queued_sends gauges), the requests parked in its waiting room for
// a slot (actionledger_waiting_requests{capacity="slot"}) and the run's actions not yet Succeeded (created −
// Succeeded, from the bench's watch). The criterion: no gap while work waits for room, in flight >= 90 %
// of the Destination's maxInFlight whenever at least that many requests wait for room (parked or queued).

const (
	// dispatchSamplePeriod is the time between two dispatcher samples.
	dispatchSamplePeriod = 250 * time.Millisecond
	// noGapFraction is the share of the limit the criterion asks for: in flight >= noGapFraction × limit whenever
	// parked + queued >= noGapFraction × limit.
	noGapFraction = 0.9
)

// DispatchSample is one dispatcher sample of a manager run.
type DispatchSample struct {
	// AtSeconds is the time of the sample since the run's first create.
	AtSeconds float64 `json:"atSeconds"`
	// InFlight and Queued are the manager's actionledger_inflight_sends and actionledger_queued_sends at the
	// bench Destination (0 when the series is absent: the dispatcher deletes it when both are 0).
	InFlight float64 `json:"inFlight"`
	Queued   float64 `json:"queued"`
	// Parked is the manager's actionledger_waiting_requests{capacity="slot"} at the bench Destination: requests
	// parked in its waiting room for room under maxInFlight (0 when the series is absent).
	Parked float64 `json:"parked"`
	// Waiting is the run's actions created and not yet seen Succeeded by the bench's watch.
	Waiting int `json:"waiting"`
}

// DispatcherSamples are the dispatcher samples of one manager run and the figures on them.
type DispatcherSamples struct {
	// Limit is the bench Destination's maxInFlight: as the API server kept it, else BENCH_MAX_IN_FLIGHT.
	Limit    int `json:"limit"`
	PeriodMs int `json:"periodMs"`
	// Eligible counts the samples where parked + queued >= 0.9 × Limit (that many requests wait for room).
	Eligible int `json:"eligibleSamples"`
	// NoGapShare is the share of the eligible samples that have inFlight >= 0.9 × Limit (absent: none eligible).
	NoGapShare *float64 `json:"noGapShare,omitempty"`
	// LongestGapSeconds is the longest stretch of eligible samples without it (longestGap).
	LongestGapSeconds float64 `json:"longestGapSeconds"`
	// ScrapeErrors counts the samples lost because the metrics endpoint did not answer.
	ScrapeErrors int              `json:"scrapeErrors,omitempty"`
	Samples      []DispatchSample `json:"samples"`
}

// eligible says whether at least 0.9 × limit requests wait for room in s: parked + queued.
func eligible(s DispatchSample, limit int) bool {
	return s.Parked+s.Queued >= noGapFraction*float64(limit)
}

// gap says whether s breaks the criterion: eligible, and less than 0.9 × limit in flight.
func gap(s DispatchSample, limit int) bool {
	return eligible(s, limit) && s.InFlight < noGapFraction*float64(limit)
}

// noGapShare returns how many samples are eligible and the share of them with inFlight >= 0.9 × limit
// (nil when none is eligible).
func noGapShare(samples []DispatchSample, limit int) (int, *float64) {
	n, ok := 0, 0
	for _, s := range samples {
		if !eligible(s, limit) {
			continue
		}
		n++
		if !gap(s, limit) {
			ok++
		}
	}
	if n == 0 {
		return 0, nil
	}
	share := float64(ok) / float64(n)
	return n, &share
}

// longestGap is the longest stretch, in seconds, of consecutive samples that break the criterion: from the
// first sample of the stretch to the next sample that does not break it (to the last sample when the stretch
// runs to the end). A lone breaking sample between two good ones counts as one sample period.
func longestGap(samples []DispatchSample, limit int) float64 {
	longest, from, in := 0.0, 0.0, false
	for _, s := range samples {
		switch {
		case gap(s, limit) && !in:
			from, in = s.AtSeconds, true
		case !gap(s, limit) && in:
			longest, in = max(longest, s.AtSeconds-from), false
		}
	}
	if in && len(samples) > 0 {
		longest = max(longest, samples[len(samples)-1].AtSeconds-from)
	}
	return longest
}

// summarizeDispatch is the run's record: its samples and the figures on them.
func summarizeDispatch(samples []DispatchSample, limit, scrapeErrors int) *DispatcherSamples {
	n, share := noGapShare(samples, limit)
	return &DispatcherSamples{Limit: limit, PeriodMs: int(dispatchSamplePeriod.Milliseconds()), Eligible: n, NoGapShare: share,
		LongestGapSeconds: longestGap(samples, limit), ScrapeErrors: scrapeErrors, Samples: samples}
}

// String is the record as a log line.
func (d *DispatcherSamples) String() string {
	return fmt.Sprintf("%d dispatcher samples (limit %d, %d scrape errors): %d with waiting for room >= %.0f, no-gap share %s, longest gap %.2f s",
		len(d.Samples), d.Limit, d.ScrapeErrors, d.Eligible, noGapFraction*float64(d.Limit), fmtShare(d.NoGapShare), d.LongestGapSeconds)
}

// fmtShare is a no-gap share with two decimals, "n/a" when no sample was eligible.
func fmtShare(s *float64) string {
	if s == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *s)
}

// dispatchSampler takes dispatcher samples of one manager run until stop.
type dispatchSampler struct {
	*sampling
	mu      sync.Mutex
	samples []DispatchSample
	errs    int
}

// sampleDispatcher samples the manager p every dispatchSamplePeriod from now on: its gauges at the Destination
// whose metrics label is dest ("Destination/<namespace>/<name>"), and waiting() (the actions not yet Succeeded),
// with times since start.
func sampleDispatcher(p *proc, dest string, start time.Time, waiting func() int) *dispatchSampler {
	s := &dispatchSampler{}
	want := `destination="` + dest + `"`
	s.sampling = sampleEvery(dispatchSamplePeriod, func() {
		at, w := time.Since(start).Seconds(), waiting()
		m, err := p.scrape()
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.errs++
			return
		}
		s.samples = append(s.samples, DispatchSample{AtSeconds: at, Waiting: w,
			InFlight: sum(m, "actionledger_inflight_sends", want), Queued: sum(m, "actionledger_queued_sends", want),
			Parked: sum(m, "actionledger_waiting_requests", want, `capacity="slot"`)})
	})
	return s
}

// stop ends the sampling and returns the run's record against limit.
func (s *dispatchSampler) stop(limit int) *DispatcherSamples {
	s.end()
	s.mu.Lock()
	defer s.mu.Unlock()
	return summarizeDispatch(s.samples, limit, s.errs)
}

// dispatchPlotPath is the PNG of a destlatency row beside the JSON report: result.json ->
// result-dispatcher-1000ms-unsafe.png.
func dispatchPlotPath(jsonPath string, latencyMs int, kind string) string {
	return fmt.Sprintf("%s-dispatcher-%dms-%s.png", strings.TrimSuffix(jsonPath, ".json"), latencyMs, kind)
}

var grey = color.RGBA{R: 128, G: 128, B: 128, A: 255}

// plotDispatch renders the dispatcher samples of a row's runs as a PNG, one panel per run: in flight, queued
// and waiting over time, with the limit and 0.9 × limit as dashed lines (gonum/plot, as plotSoak).
func plotDispatch(path, title string, runs []*DispatcherSamples) error {
	if len(runs) == 0 {
		return fmt.Errorf("plotting %s: no runs", path)
	}
	lines := []series[DispatchSample]{
		{"in flight (actionledger_inflight_sends)", blue, func(s DispatchSample) float64 { return s.InFlight }},
		{"queued (actionledger_queued_sends)", orange, func(s DispatchSample) float64 { return s.Queued }},
		{"waiting (created − Succeeded)", green, func(s DispatchSample) float64 { return float64(s.Waiting) }},
		{"parked for a slot (actionledger_waiting_requests)", grey, func(s DispatchSample) float64 { return s.Parked }},
	}
	rows := make([][]*plot.Plot, 0, len(runs))
	for i, d := range runs {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s, run %d: no-gap share %s over %d samples with waiting for room ≥ %.0f, longest gap %.2f s",
			title, i+1, fmtShare(d.NoGapShare), d.Eligible, noGapFraction*float64(d.Limit), d.LongestGapSeconds)
		p.Y.Label.Text = "actions"
		if i == len(runs)-1 {
			p.X.Label.Text = "seconds since the first create"
		}
		p.Y.Min = 0
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		if len(d.Samples) > 0 {
			last := d.Samples[len(d.Samples)-1].AtSeconds
			for _, h := range []struct {
				name string
				y    float64
			}{{fmt.Sprintf("limit (maxInFlight %d)", d.Limit), float64(d.Limit)}, {"0.9 × limit", noGapFraction * float64(d.Limit)}} {
				l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: h.y}, {X: last, Y: h.y}})
				if err != nil {
					return fmt.Errorf("plotting %s: %w", h.name, err)
				}
				l.Color, l.Width, l.Dashes = grey, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
				p.Add(l)
				p.Legend.Add(h.name, l)
			}
		}
		if err := addLines(p, d.Samples, func(s DispatchSample) float64 { return s.AtSeconds }, lines); err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{p})
	}
	return writePNG(path, rows, vg.Points(900), vg.Points(float64(120+300*len(rows))))
}

// writePNG draws rows of plots, one column, on a width × height canvas and writes it to path as a PNG.
func writePNG(path string, rows [][]*plot.Plot, width, height vg.Length) error {
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path) //nolint:gosec // BENCH_OUT is the user's own choice
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
