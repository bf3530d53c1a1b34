package noisy

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Metrics is one scrape of a Prometheus text endpoint: each sample's value keyed by its name and labels as
// written (`name{labels}`).
type Metrics map[string]float64

// ParseMetrics reads the Prometheus text exposition format from r; comment lines and unparsable samples are
// skipped.
func ParseMetrics(r io.Reader) (Metrics, error) {
	out := Metrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndex(line, " ")
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// Sum adds every series of metric whose labels contain all of want.
func (m Metrics) Sum(metric string, want ...string) float64 {
	var s float64
	for k, v := range m {
		name, labels, _ := strings.Cut(k, "{")
		if name == metric && containsAll(labels, want) {
			s += v
		}
	}
	return s
}

func containsAll(s string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// HistDelta describes histogram metric (its series whose labels contain all of want) between scrapes a and b:
// the count, the mean in ms and the upper bounds (seconds) of the buckets holding the p50, p90 and p99.
func HistDelta(a, b Metrics, metric string, want ...string) string {
	buckets := map[float64]float64{}
	for k, v := range b {
		name, labels, _ := strings.Cut(k, "{")
		if name != metric+"_bucket" || !containsAll(labels, want) {
			continue
		}
		_, le, _ := strings.Cut(labels, `le="`)
		le, _, _ = strings.Cut(le, `"`)
		x, err := strconv.ParseFloat(le, 64)
		if err != nil {
			x = math.Inf(1)
		}
		buckets[x] += v - a[k]
	}
	cnt := b.Sum(metric+"_count", want...) - a.Sum(metric+"_count", want...)
	s := b.Sum(metric+"_sum", want...) - a.Sum(metric+"_sum", want...)
	if cnt <= 0 {
		return fmt.Sprintf("%s %v: none", metric, want)
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	slices.Sort(les)
	q := func(p float64) string {
		for _, le := range les {
			if buckets[le] >= p*cnt {
				return fmt.Sprintf("<=%g", le)
			}
		}
		return "?"
	}
	return fmt.Sprintf("%s %v: n=%.0f mean %.1f ms, p50 %s p90 %s p99 %s s", metric, want, cnt, s/cnt*1000, q(0.5), q(0.9),
		q(0.99))
}

// ManagerHists are the lines that say where the manager's time went between two scrapes of its metrics: the
// ExternalAction workqueue's wait and work, its API requests by verb and their client-side rate limiter wait,
// the attempts, and the reconciles, errors and requeues.
func ManagerHists(a, b Metrics) []string {
	lines := []string{
		HistDelta(a, b, "workqueue_queue_duration_seconds", `name="externalaction"`),
		HistDelta(a, b, "workqueue_work_duration_seconds", `name="externalaction"`),
	}
	for _, verb := range []string{"GET", "PUT", "PATCH", "POST"} {
		lines = append(lines, HistDelta(a, b, "rest_client_request_duration_seconds", `verb="`+verb+`"`))
	}
	lines = append(lines, HistDelta(a, b, "rest_client_rate_limiter_duration_seconds"),
		HistDelta(a, b, "actionledger_attempt_duration_seconds"))
	d := func(metric string, want ...string) float64 { return b.Sum(metric, want...) - a.Sum(metric, want...) }
	return append(lines, fmt.Sprintf("reconciles %.0f, reconcile errors %.0f, requeues %.0f, max queue depth now %.0f",
		d("controller_runtime_reconcile_total", `controller="externalaction"`),
		d("controller_runtime_reconcile_errors_total", `controller="externalaction"`),
		d("workqueue_retries_total", `name="externalaction"`),
		b.Sum("workqueue_depth", `name="externalaction"`)))
}

// Held is the namespace label of each actionledger_reconciles_dominant series of m set to 1: the namespaces the
// manager's fair workqueue holds to its dominant share at the scrape.
func (m Metrics) Held() []string {
	var out []string
	for k, v := range m {
		name, labels, _ := strings.Cut(k, "{")
		if name != "actionledger_reconciles_dominant" || v != 1 {
			continue
		}
		if _, rest, ok := strings.Cut(labels, `namespace="`); ok {
			ns, _, _ := strings.Cut(rest, `"`)
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}

// HeldCounts tallies, over scrapes, how often each namespace was held to the dominant share (Metrics.Held), and
// how often none was. The zero value is ready; it is not safe for concurrent use.
type HeldCounts struct {
	counts  map[string]int
	samples int
}

// Add counts one scrape.
func (h *HeldCounts) Add(m Metrics) {
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.samples++
	held := m.Held()
	if len(held) == 0 {
		h.counts["none"]++
	}
	for _, ns := range held {
		h.counts[ns]++
	}
}

// String describes the tally: "none 2, team-a 9 of 11 samples".
func (h *HeldCounts) String() string {
	keys := slices.Sorted(maps.Keys(h.counts))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, h.counts[k]))
	}
	return fmt.Sprintf("%s of %d samples", strings.Join(parts, ", "), h.samples)
}

// SampleHeld scrapes every interval until the returned stop is called, and stop describes how often each
// namespace was held to the dominant share in the samples read (HeldCounts). A scrape that returns nil is not
// counted.
func SampleHeld(scrape func() Metrics, every time.Duration) (stop func() string) {
	done := make(chan struct{})
	result := make(chan string, 1)
	go func() {
		var held HeldCounts
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if m := scrape(); m != nil {
				held.Add(m)
			}
			select {
			case <-done:
				result <- held.String()
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	var out string
	return func() string {
		once.Do(func() { close(done); out = <-result })
		return out
	}
}
