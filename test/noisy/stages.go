package noisy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Stages returns, as lines to log, the quantiles (ms) of each stage of r's actions and the slowest timelines:
// the create call; create returned -> the ADDED watch event; create began -> the request at the destination;
// create began -> the first event with an attempt (the claim, or the outcome of a claimless send); the
// destination's answer (its first request + latency) -> the Succeeded event; the total; the watch events per
// action; create returned -> the Succeeded event (the total less the create call). arrived gives the times
// the destination received the requests of an action's key (namespace/name), first first. Shared by the bench's
// noisy part and the real-cluster step, so that both say where team-b's time went.
func Stages(r Result, ns string, latency time.Duration, arrived func(key string) []time.Time) []string {
	stages := map[string][]float64{}
	type slow struct {
		name  string
		total float64
		line  string
	}
	var slows []slow
	add := func(k string, v float64) { stages[k] = append(stages[k], v) }
	for name, tr := range r.Traces {
		recs := arrived(ns + "/" + name)
		var succ, claim time.Time
		for _, ev := range tr.Events {
			if claim.IsZero() && ev.Attempts > 0 {
				claim = ev.At
			}
			if ev.Phase == actionsv1alpha1.PhaseSucceeded {
				succ = ev.At
			}
		}
		if succ.IsZero() || len(recs) == 0 || tr.Sent.IsZero() || len(tr.Events) == 0 {
			continue
		}
		req := recs[0]
		add("1 create call", ms(tr.Created.Sub(tr.Sent)))
		add("2 create returned -> ADDED seen", ms(tr.Events[0].At.Sub(tr.Created)))
		add("3 create began -> request at destination", ms(req.Sub(tr.Sent)))
		if !claim.IsZero() {
			add("4 create began -> first event with an attempt", ms(claim.Sub(tr.Sent)))
		}
		add("5 answer (request + latency) -> Succeeded seen", ms(succ.Sub(req.Add(latency))))
		add("6 total", ms(succ.Sub(tr.Sent)))
		add("7 watch events per action", float64(len(tr.Events)))
		// What follows the create: the object exists, the rest is the manager's (and the API server's writes).
		add("8 create returned -> Succeeded seen", ms(succ.Sub(tr.Created)))
		slows = append(slows, slow{name, ms(succ.Sub(tr.Sent)), timeline(tr, req)})
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(stages)) {
		v := stages[k]
		slices.Sort(v)
		q := func(p float64) float64 { return v[min(max(int(p*float64(len(v))+0.5)-1, 0), len(v)-1)] }
		lines = append(lines, fmt.Sprintf("%-48s n=%d p50 %.0f p90 %.0f p99 %.0f max %.0f ms", k, len(v), q(0.5), q(0.9),
			q(0.99), q(1)))
	}
	slices.SortFunc(slows, func(x, y slow) int { return cmp.Compare(y.total, x.total) })
	for _, s := range slows[:min(len(slows), 6)] {
		lines = append(lines, fmt.Sprintf("slow %s total %.0f ms: %s", s.name, s.total, s.line))
	}
	return lines
}

// timeline is one action's trace as a line: when the create began (UTC, to match the manager's log), then the
// create call, each watch event and the request's arrival, in ms from the create's start.
func timeline(tr *Trace, req time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %s, created +%.0f", tr.Sent.UTC().Format("15:04:05.000"), ms(tr.Created.Sub(tr.Sent)))
	for _, ev := range tr.Events {
		fmt.Fprintf(&b, ", %s %s a%d +%.0f", ev.Type, ev.Phase, ev.Attempts, ms(ev.At.Sub(tr.Sent)))
	}
	fmt.Fprintf(&b, "; request at +%.0f", ms(req.Sub(tr.Sent)))
	return b.String()
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / 1e6 }
