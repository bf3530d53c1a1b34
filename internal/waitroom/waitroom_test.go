package waitroom

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/actionledger/actionledger/internal/metrics"
)

func k(ns string, i int) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("a%d", i)}
}

// Waiters are woken one namespace at a time, FIFO inside one; a namespace that parked many does not push another
// namespace's single waiter back; a key parked twice keeps its place; Leave and moving to another destination
// take it out; the room is empty once all are woken.
func TestWakeIsFairOverNamespaces(t *testing.T) {
	r := New()
	for i := range 5 {
		r.Park("D/a", k("big", i))
	}
	r.Park("D/a", k("small", 0))
	r.Park("D/a", k("big", 0)) // already there: keeps its place
	r.Park("D/a", k("mid", 0))
	r.Park("D/a", k("mid", 1))
	r.Leave(k("mid", 1))
	r.Park("D/b", k("big", 4)) // moves to another destination
	if got := r.Waiting("D/a"); got != 6 {
		t.Fatalf("Waiting = %d, want 6", got)
	}
	got := fmt.Sprint(r.Wake("D/a", 3), r.Wake("D/a", 10))
	want := fmt.Sprint([]types.NamespacedName{k("big", 0), k("small", 0), k("mid", 0)},
		[]types.NamespacedName{k("big", 1), k("big", 2), k("big", 3)})
	if got != want {
		t.Errorf("woken %s, want %s", got, want)
	}
	if w := r.Wake("D/a", 1); len(w) != 0 || r.Waiting("D/a") != 0 {
		t.Errorf("after all woken: %v, %d waiting", w, r.Waiting("D/a"))
	}
	if w := r.Wake("D/b", 5); len(w) != 1 || w[0] != k("big", 4) {
		t.Errorf("D/b woke %v", w)
	}
	if len(r.at) != 0 || len(r.dests) != 0 {
		t.Errorf("room not empty: %d keys, %d destinations", len(r.at), len(r.dests))
	}
}

// Since counts from a key's first look without room, across wakes that found none again, until it Leaves.
func TestSinceLastsUntilTheKeyLeaves(t *testing.T) {
	r := New()
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	if d := r.Since(k("ns", 0), t0); d != 0 {
		t.Fatalf("first look: %v, want 0", d)
	}
	r.Park("D/a", k("ns", 0))
	r.Wake("D/a", 1)
	r.Park("D/a", k("ns", 0))
	if d := r.Since(k("ns", 0), t0.Add(5*time.Second)); d != 5*time.Second {
		t.Fatalf("after a wake that found no room: %v, want 5s", d)
	}
	r.Leave(k("ns", 0))
	if d := r.Since(k("ns", 0), t0.Add(9*time.Second)); d != 0 || len(r.at) != 0 {
		t.Fatalf("after Leave: %v (%d parked), want a new wait", d, len(r.at))
	}
}

// step moves clk by d and waits for the wakes it set off.
func step(r *Room, clk *clocktesting.FakeClock, d time.Duration) {
	clk.Step(d)
	r.firing.Wait()
}

// woken collects the keys the room wakes, in order.
type woken struct {
	mu   sync.Mutex
	keys []types.NamespacedName
}

func (w *woken) wake(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys = append(w.keys, key)
}

func (w *woken) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := fmt.Sprint(w.keys)
	w.keys = nil
	return out
}

// A key parked for a time is woken at that time, by one timer for the whole room, and only then: the earliest
// first, each once; a key that left, moved to a slot, or was parked again for a later time is not woken at the
// old time; a wake already due when Wakes is called comes at once.
func TestTimedWaitersAreWokenAtTheirTime(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	r, w := New(), &woken{}
	r.ParkUntil("D/a", k("early", 0), t0.Add(-time.Second)) // parked before the room can wake anything
	r.Wakes(clk, w.wake)
	step(r, clk, 0)
	if got := w.take(); got != fmt.Sprint([]types.NamespacedName{k("early", 0)}) {
		t.Fatalf("a time already past when Wakes is set: woken %s", got)
	}
	r.ParkUntil("D/a", k("a", 0), t0.Add(3*time.Second))
	r.ParkUntil("D/a", k("b", 0), t0.Add(1*time.Second))
	r.ParkUntil("D/b", k("c", 0), t0.Add(2*time.Second))
	r.ParkUntil("D/a", k("a", 0), t0.Add(3*time.Second)) // the same time again: one entry, one wake
	r.ParkUntil("D/a", k("left", 0), t0.Add(1*time.Second))
	r.Leave(k("left", 0))
	r.ParkUntil("D/a", k("slot", 0), t0.Add(1*time.Second))
	r.Park("D/a", k("slot", 0)) // moved to a slot: woken by a completion, not by the time
	r.ParkUntil("D/a", k("later", 0), t0.Add(1*time.Second))
	r.ParkUntil("D/a", k("later", 0), t0.Add(4*time.Second)) // its turn moved: only the new time counts

	step(r, clk, 999*time.Millisecond)
	if got := w.take(); got != "[]" {
		t.Fatalf("before any time came: woken %s", got)
	}
	step(r, clk, time.Millisecond)
	if got := w.take(); got != fmt.Sprint([]types.NamespacedName{k("b", 0)}) {
		t.Fatalf("at 1s: woken %s, want [b]", got)
	}
	step(r, clk, 2*time.Second)
	if got := w.take(); got != fmt.Sprint([]types.NamespacedName{k("c", 0), k("a", 0)}) {
		t.Fatalf("at 3s: woken %s, want c then a", got)
	}
	step(r, clk, time.Second)
	if got := w.take(); got != fmt.Sprint([]types.NamespacedName{k("later", 0)}) {
		t.Fatalf("at 4s: woken %s, want [later]", got)
	}
	step(r, clk, time.Hour)
	if got := w.take(); got != "[]" {
		t.Fatalf("after every time: woken %s", got)
	}
	if got := r.Wake("D/a", 5); fmt.Sprint(got) != fmt.Sprint([]types.NamespacedName{k("slot", 0)}) {
		t.Errorf("slot waiters: %v, want [slot]", got)
	}
	if len(r.at) != 0 || len(r.timed) != 0 || clk.HasWaiters() {
		t.Errorf("room not empty: %d keys, %d timed entries, timer set %v", len(r.at), len(r.timed), clk.HasWaiters())
	}
}

// A key woken from a slot wait and parked for a time (it found room, then no rate-limit token) waits for the
// time; parked for a slot again it leaves the timer, which is stopped when nothing is timed.
func TestSlotAndTimeAreOnePlace(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	r, w := New(), &woken{}
	r.Wakes(clk, w.wake)
	r.Park("D/a", k("ns", 0))
	r.ParkUntil("D/a", k("ns", 0), t0.Add(time.Second))
	if r.Waiting("D/a") != 0 {
		t.Fatalf("parked for a time, still counted as a slot waiter")
	}
	r.Park("D/a", k("ns", 0))
	if clk.HasWaiters() {
		t.Errorf("the timer still runs with no timed waiter")
	}
	step(r, clk, 2*time.Second)
	if got := w.take(); got != "[]" {
		t.Errorf("woken by a time it no longer waits for: %s", got)
	}
	if got := r.Wake("D/a", 1); len(got) != 1 {
		t.Errorf("slot wake: %v", got)
	}
}

// actionledger_waiting_requests counts the keys waiting at each destination by the capacity they wait for, and
// a count back at 0 deletes its series.
func TestWaitingRequestsGauge(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	r, w := New(), &woken{}
	r.Wakes(clk, w.wake)
	gauge := func(capacity string) float64 {
		return testutil.ToFloat64(metrics.WaitingRequests.WithLabelValues("D/gauge", capacity))
	}
	r.Park("D/gauge", k("a", 0))
	r.Park("D/gauge", k("b", 0))
	r.ParkUntil("D/gauge", k("c", 0), t0.Add(time.Second))
	r.ParkUntil("D/gauge", k("a", 1), t0.Add(time.Second))
	r.ParkUntil("D/gauge", k("b", 0), t0.Add(time.Second)) // moves from a slot to a time
	if s, tm := gauge("slot"), gauge("time"); s != 1 || tm != 3 {
		t.Fatalf("waiting for a slot %v, for a time %v; want 1 and 3", s, tm)
	}
	r.Leave(k("c", 0))
	step(r, clk, time.Second)
	r.Wake("D/gauge", 1)
	for _, c := range []string{"slot", "time"} {
		if metrics.WaitingRequests.DeleteLabelValues("D/gauge", c) {
			t.Errorf("the %s series is still there with nothing waiting", c)
		}
	}
}

// Later raises a time to the one a key is parked until, and only then: a key parked for a slot, or not parked, or
// parked for an earlier time, leaves t as it is.
func TestLaterIsTheParkedTimeWhenLater(t *testing.T) {
	r := New()
	at := time.Date(2026, 1, 1, 0, 0, 33, 0, time.UTC)
	key := types.NamespacedName{Namespace: "a", Name: "x"}
	if got := r.Later(key, at); !got.Equal(at) {
		t.Errorf("not parked: %v, want %v", got, at)
	}
	r.ParkUntil("d", key, at.Add(8*time.Millisecond))
	if got := r.Later(key, at); !got.Equal(at.Add(8 * time.Millisecond)) {
		t.Errorf("parked until 8 ms later: %v, want the parked time", got)
	}
	if got := r.Later(key, at.Add(time.Second)); !got.Equal(at.Add(time.Second)) {
		t.Errorf("parked until before t: %v, want t", got)
	}
	r.Park("d", key) // now waits for a slot: no time
	if got := r.Later(key, at); !got.Equal(at) {
		t.Errorf("parked for a slot: %v, want %v", got, at)
	}
	r.Leave(key)
}

// Sooner moves a key waiting for a time to an earlier time, and only to an earlier one: at once when that time is
// not after now, and its old time then wakes nothing. A key not yet parked is woken at the earlier time by its
// next ParkUntil there, unless it left or parked for a slot first; a key waiting for a slot stays there, and a time
// for another destination neither moves a wait nor marks the next park.
func TestSoonerMovesATimedWaitEarlier(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	r, w := New(), &woken{}
	r.Wakes(clk, w.wake)
	r.ParkUntil("D/a", k("a", 0), t0.Add(10*time.Second))
	r.ParkUntil("D/a", k("a", 1), t0.Add(10*time.Second))
	r.ParkUntil("D/a", k("a", 2), t0.Add(10*time.Second))
	r.Sooner(k("a", 0), "D/a", t0)                     // now
	r.Sooner(k("a", 1), "D/a", t0.Add(3*time.Second))  // earlier
	r.Sooner(k("a", 2), "D/a", t0.Add(30*time.Second)) // later: stays at 10 s
	step(r, clk, 0)
	if got := w.take(); got != fmt.Sprint([]types.NamespacedName{k("a", 0)}) {
		t.Fatalf("Sooner to now: woken %s, want [a0]", got)
	}
	if until, ok := r.Until(k("a", 1)); !ok || !until.Equal(t0.Add(3*time.Second)) {
		t.Errorf("a1 waits until %v (%v), want 3 s", until, ok)
	}
	// Handed over before it parked: its ParkUntil takes the earlier time.
	r.Sooner(k("b", 0), "D/a", t0.Add(2*time.Second))
	r.ParkUntil("D/a", k("b", 0), t0.Add(10*time.Second))
	// The time is used once, and Leave or Park forget it.
	r.ParkUntil("D/a", k("b", 0), t0.Add(10*time.Second)) // parked again for 10 s: the 2 s was used
	r.Sooner(k("c", 0), "D/a", t0)
	r.Leave(k("c", 0))
	r.ParkUntil("D/a", k("c", 0), t0.Add(10*time.Second))
	r.Sooner(k("d", 0), "D/a", t0)
	r.Park("D/a", k("d", 0))
	r.Sooner(k("d", 0), "D/a", t0) // waits for a slot: stays
	// Another destination's time neither moves a wait nor marks the next park here.
	r.ParkUntil("D/b", k("e", 0), t0.Add(10*time.Second))
	r.Sooner(k("e", 0), "D/a", t0)
	r.Sooner(k("f", 0), "D/b", t0)
	r.ParkUntil("D/a", k("f", 0), t0.Add(10*time.Second))
	step(r, clk, 3*time.Second)
	if got := w.take(); got != fmt.Sprint([]types.NamespacedName{k("a", 1)}) {
		t.Fatalf("at 3 s: woken %s, want [a1] (b0 parked again for 10 s, c0's mark gone, d0 for a slot, e0 and f0 at other destinations)", got)
	}
	if r.Waiting("D/a") != 1 {
		t.Errorf("%d slot waiters, want d0", r.Waiting("D/a"))
	}
	// At the old time only the keys still parked for it are woken (in any order: they share the time).
	step(r, clk, 7*time.Second)
	w.mu.Lock()
	slices.SortFunc(w.keys, func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) })
	w.mu.Unlock()
	if got := w.take(); got != fmt.Sprint([]types.NamespacedName{k("a", 2), k("b", 0), k("c", 0), k("e", 0), k("f", 0)}) {
		t.Fatalf("at 10 s: woken %s, want a2, b0, c0, e0, f0", got)
	}
}

// Marks of Sooner for keys that never park (their object went between the refusal and the park) do not pile up:
// once soonerPruneAt are held, those older than soonerKeep are dropped at the next mark.
func TestSoonerMarksOfKeysThatNeverParkAreDropped(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	r, w := New(), &woken{}
	r.Wakes(clk, w.wake)
	for i := range soonerPruneAt {
		r.Sooner(k("gone", i), "D/a", t0)
	}
	r.Sooner(k("fresh", 0), "D/a", t0.Add(30*time.Second)) // within soonerKeep: nothing dropped
	if n := len(r.sooner); n != soonerPruneAt+1 {
		t.Fatalf("%d marks at 30 s, want %d", n, soonerPruneAt+1)
	}
	r.Sooner(k("fresh", 1), "D/a", t0.Add(2*time.Minute))
	if n := len(r.sooner); n != 1 {
		t.Fatalf("%d marks at 2 min, want 1 (every mark older than a minute dropped)", n)
	}
	r.ParkUntil("D/a", k("fresh", 1), t0.Add(10*time.Minute)) // a kept mark is still used
	if until, ok := r.Until(k("fresh", 1)); !ok || !until.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("fresh-1 waits until %v (%v), want its mark's 2 min", until, ok)
	}
}
