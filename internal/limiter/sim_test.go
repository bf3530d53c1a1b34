package limiter

import (
	"container/heap"
	"fmt"
	"testing"
	"time"
)

// t0 is the start of every simulated timeline.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sec returns t0 plus s seconds.
func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// event is one thing that happens on the simulated timeline: a key asks to send
// (pauseUntil zero) or a destination is paused.
type event struct {
	at         time.Time
	dest       string
	ns, key    string
	first      bool
	pauseUntil time.Time
	seq        int
	// gen is the key's wait this event ends: an event whose key was since woken early is stale.
	gen int
}

// admission is one ok=true answer of Admit.
type admission struct {
	at        time.Time
	dest      string
	ns, key   string
	first     bool
	askedFrom time.Time // when the key first asked
}

// refusal is one ok=false answer of Admit.
type refusal struct {
	at     time.Time
	dest   string
	key    string
	wait   time.Duration
	reason Reason
}

// simulation drives a Registry the way the reconciler does: a refused key
// comes back after the returned wait (plus lateness), an admitted key is done.
type simulation struct {
	r      *Registry
	limits map[string]Limits
	// late returns how late a key comes back after a refusal; nil = on time.
	late func(key string) time.Duration
	// vanish marks keys that never come back after their first refusal.
	vanish map[string]bool
	// maxEvents stops a runaway simulation.
	maxEvents int
	// early: the registry's early wakes (Registry.WakesEarly) bring a waiting key back at once, as the manager's
	// waiting room does; without it a key comes back only at its told time.
	early bool

	admitted []admission
	refused  []refusal
}

func newSimulation(r *Registry, limits map[string]Limits) *simulation {
	return &simulation{r: r, limits: limits, maxEvents: 1_000_000}
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// run plays events until every key is admitted or vanished.
func (s *simulation) run(t *testing.T, events []event) {
	t.Helper()
	h := &eventHeap{}
	seq := 0
	asked := map[string]time.Time{}
	for _, e := range events {
		seq++
		e.seq = seq
		heap.Push(h, e)
	}
	gen := map[string]int{}      // by dest|key: the current wait of each key
	parked := map[string]event{} // by dest|key: the event that ends a key's current wait
	var cur event
	if s.early {
		s.r.WakesEarly(func(ws []Wake) {
			for _, wk := range ws {
				id := cur.dest + "|" + wk.Key
				w, ok := parked[id]
				if !ok {
					t.Fatalf("%s woken early but not waiting", wk.Key)
				}
				if !wk.At.Before(w.at) && s.late == nil {
					t.Fatalf("%s woken for %v, not before its time %v", wk.Key, wk.At.Sub(t0), w.at.Sub(t0))
				}
				gen[id]++
				seq++
				w.at, w.seq, w.gen = wk.At, seq, gen[id]
				if s.late != nil {
					w.at = w.at.Add(s.late(wk.Key))
				}
				heap.Push(h, w)
				parked[id] = w
			}
		})
		defer s.r.WakesEarly(nil)
	}
	for n := 0; h.Len() > 0; n++ {
		if n > s.maxEvents {
			t.Fatalf("simulation did not finish after %d events", n)
		}
		e := heap.Pop(h).(event)
		if !e.pauseUntil.IsZero() {
			s.r.Pause(e.dest, e.pauseUntil)
			continue
		}
		id := e.dest + "|" + e.key
		if e.gen != gen[id] {
			continue // woken early: this was its told time
		}
		delete(parked, id)
		cur = e
		if _, ok := asked[id]; !ok {
			asked[id] = e.at
		}
		ok, wait, reason := s.r.Admit(e.dest, s.limits[e.dest], e.ns, e.key, e.first, e.at)
		if ok {
			if wait != 0 || reason != "" {
				t.Fatalf("ok with wait %v reason %q", wait, reason)
			}
			s.admitted = append(s.admitted, admission{at: e.at, dest: e.dest, ns: e.ns, key: e.key, first: e.first, askedFrom: asked[id]})
			continue
		}
		if wait < MinWait {
			t.Fatalf("%s at %v: refused with wait %v < MinWait", e.key, e.at.Sub(t0), wait)
		}
		s.refused = append(s.refused, refusal{at: e.at, dest: e.dest, key: e.key, wait: wait, reason: reason})
		if s.vanish[e.key] {
			continue
		}
		next := e.at.Add(wait)
		if s.late != nil {
			next = next.Add(s.late(e.key))
		}
		seq++
		e.at, e.seq = next, seq
		heap.Push(h, e)
		parked[id] = e
	}
}

// of returns the admissions of dest.
func (s *simulation) of(dest string) []admission {
	var out []admission
	for _, a := range s.admitted {
		if a.dest == dest {
			out = append(out, a)
		}
	}
	return out
}

// keys returns n keys of namespace ns: ns/k000, ns/k001, ...
func keys(ns string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/k%03d", ns, i)
	}
	return out
}

// asks returns one first-attempt event per key of ns at at.
//
//nolint:unparam // dest is spelled out at each call so a scenario reads as "asks of <dest>".
func asks(dest, ns string, n int, at time.Time) []event {
	out := make([]event, 0, n)
	for _, k := range keys(ns, n) {
		out = append(out, event{at: at, dest: dest, ns: ns, key: k, first: true})
	}
	return out
}

// checkBucket fails unless every interval [a_i, a_j] holds at most
// burst + rps*(a_j-a_i) admissions (the token-bucket bound).
func checkBucket(t *testing.T, adm []admission, rps, burst float64) {
	t.Helper()
	for i := range adm {
		for j := i; j < len(adm); j++ {
			n := float64(j - i + 1)
			limit := burst + rps*adm[j].at.Sub(adm[i].at).Seconds()
			if n > limit+1e-6 {
				t.Fatalf("%v admissions in [%v, %v], token bucket allows %.6f",
					n, adm[i].at.Sub(t0), adm[j].at.Sub(t0), limit)
			}
		}
	}
}

// maxInWindow returns the largest number of admissions in any window
// [a_i, a_i+w) with a_i >= from.
func maxInWindow(adm []admission, w time.Duration, from time.Time) int {
	best := 0
	for i := range adm {
		if adm[i].at.Before(from) {
			continue
		}
		n := 0
		for j := i; j < len(adm) && adm[j].at.Before(adm[i].at.Add(w)); j++ {
			n++
		}
		best = max(best, n)
	}
	return best
}

// checkOnce fails unless every key in want was admitted exactly once.
func checkOnce(t *testing.T, adm []admission, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, a := range adm {
		seen[a.key]++
	}
	for _, k := range want {
		if seen[k] != 1 {
			t.Fatalf("%s admitted %d times, want 1", k, seen[k])
		}
	}
	if len(adm) != len(want) {
		t.Fatalf("%d admissions, want %d", len(adm), len(want))
	}
}
