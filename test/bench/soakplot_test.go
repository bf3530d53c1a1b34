package bench

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// series is one line of a panel: a name, a colour and the value of each sample.
type series[S any] struct {
	name  string
	color color.Color
	value func(S) float64
}

// soakSeries is one line of a soak panel.
type soakSeries = series[SoakSample]

// addLines draws lines over samples on p, each sample at at(sample) seconds, with a legend entry each.
func addLines[S any](p *plot.Plot, samples []S, at func(S) float64, lines []series[S]) error {
	for _, ln := range lines {
		xys := make(plotter.XYs, 0, len(samples))
		for _, s := range samples {
			xys = append(xys, plotter.XY{X: at(s), Y: ln.value(s)})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", ln.name, err)
		}
		l.Color, l.Width = ln.color, vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(ln.name, l)
	}
	return nil
}

var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
)

// plotSoak renders the run's rate, latency and etcd size over time as a PNG of three panels (gonum/plot).
func plotSoak(path string, r SoakResult) error {
	title := fmt.Sprintf("actionledger soak: %g actions/s offered (%.1fM a day), %d shard(s), %s store", r.Rate, r.PerDay()/1e6, r.Shards, r.Store)
	panels := []struct {
		title, y string
		lines    []soakSeries
	}{
		{title, "actions/s", []soakSeries{
			{"offered", orange, func(s SoakSample) float64 { return s.OfferedPerSec }},
			{"succeeded (seen by a watch)", blue, func(s SoakSample) float64 { return s.SucceededPerSec }},
			{"succeeded (managers' metric)", green, func(s SoakSample) float64 { return s.ManagerSucceededPerSec }},
		}},
		{"create → Succeeded, actions that succeeded in each sample", "ms", []soakSeries{
			{"p50", green, func(s SoakSample) float64 { return s.P50Ms }},
			{"p99", blue, func(s SoakSample) float64 { return s.P99Ms }},
		}},
		{"etcd (API server compacts every --etcd-compaction-interval; periodic defrag)", "MiB", []soakSeries{
			{"db file (quota counts this)", blue, func(s SoakSample) float64 { return s.Etcd.DBTotal / (1 << 20) }},
			{"db in use", orange, func(s SoakSample) float64 { return s.Etcd.DBInUse / (1 << 20) }},
		}},
	}
	rows := make([][]*plot.Plot, 0, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text, p.Y.Label.Text = pn.title, pn.y
		if i == len(panels)-1 {
			p.X.Label.Text = "seconds since the first create"
		}
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid()) // first, so that the lines are drawn over it
		if err := addLines(p, r.Samples, func(s SoakSample) float64 { return s.AtSeconds }, pn.lines); err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{p})
	}
	return writePNG(path, rows, vg.Points(900), vg.Points(900))
}
