package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const destA, destB = "Destination/team-a/payments", "ClusterDestination/mail"

// (1) 5 rps burst 5, 200 keys of one namespace: the bucket bound holds in every
// interval, no 1 s window after the start sees more than 5, and the backlog
// drains at the full rate.
func TestRateBound200Keys(t *testing.T) {
	for _, tc := range []struct {
		name string
		late func(string) time.Duration
	}{
		{name: "punctual"},
		{name: "late callers", late: func() func(string) time.Duration {
			rnd := rand.New(rand.NewPCG(1, 2))
			return func(string) time.Duration { return time.Duration(rnd.Int64N(int64(300 * time.Millisecond))) }
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Limits{RequestsPerSecond: 5, Burst: 5}
			s := newSimulation(NewRegistry(), map[string]Limits{destA: l})
			s.late = tc.late
			s.run(t, asks(destA, "shop", 200, t0))
			adm := s.of(destA)
			checkOnce(t, adm, keys("shop", 200))
			checkBucket(t, adm, 5, 5)
			if n := maxInWindow(adm, time.Second, t0); n > 5+5 {
				t.Fatalf("a 1s window saw %d admissions, want <= burst + 5/s = 10", n)
			}
			if tc.late == nil {
				// 5 at once, then one every 200 ms (to the microsecond: the
				// wait is rounded up), so no 1s window after the burst sees
				// more than 5 and the last goes at 39 s.
				for i := 6; i < len(adm); i++ {
					if gap := adm[i].at.Sub(adm[i-1].at); gap < 200*time.Millisecond-5*time.Microsecond {
						t.Fatalf("admissions %d and %d %v apart, want 200ms", i, i+1, gap)
					}
				}
				if n := maxInWindow(adm, time.Second-10*time.Microsecond, sec(0.001)); n > 5 {
					t.Fatalf("a 1s window after the burst saw %d admissions, want <= 5", n)
				}
				if last := adm[len(adm)-1].at.Sub(t0); last < 39*time.Second || last > 39*time.Second+10*time.Millisecond {
					t.Fatalf("last admission at %v, want ~39s", last)
				}
				// One namespace: FIFO.
				for i, a := range adm {
					if want := fmt.Sprintf("shop/k%03d", i); a.key != want {
						t.Fatalf("admission %d is %s, want %s (FIFO)", i, a.key, want)
					}
				}
			}
		})
	}
}

// (2) Namespace A asks for 100 keys at t=0, B for 5 at t=0.01 s: B does not
// wait behind A's backlog, the two alternate, and each is served FIFO.
func TestFairnessAcrossNamespaces(t *testing.T) {
	l := Limits{RequestsPerSecond: 5, Burst: 5}
	s := newSimulation(NewRegistry(), map[string]Limits{destA: l})
	s.run(t, append(asks(destA, "a", 100, t0), asks(destA, "b", 5, sec(0.01))...))
	adm := s.of(destA)
	checkOnce(t, adm, append(keys("a", 100), keys("b", 5)...))
	checkBucket(t, adm, 5, 5)

	var bAt []int // 1-based admission numbers of b's keys
	next := map[string]int{}
	for i, a := range adm {
		if want := fmt.Sprintf("%s/k%03d", a.ns, next[a.ns]); a.key != want {
			t.Fatalf("admission %d of %s is %s, want %s (FIFO within a namespace)", i+1, a.ns, a.key, want)
		}
		next[a.ns]++
		if a.ns == "b" {
			bAt = append(bAt, i+1)
		}
	}
	// a's burst of 5 went at t=0 before b existed; from then on b and a
	// alternate, b first: admissions 6, 8, 10, 12, 14 (FCFS would be 101..105).
	if want := []int{6, 8, 10, 12, 14}; !slices.Equal(bAt, want) {
		t.Fatalf("b admitted as admissions %v, want %v", bAt, want)
	}
	if last := adm[13].at.Sub(t0); last > 2*time.Second {
		t.Fatalf("b's last key admitted at %v, want <= 2s", last)
	}
}

// Three backlogged namespaces share the rate round-robin: in every prefix of
// the admissions the counts differ by at most one, whatever the arrival order.
func TestFairnessThreeNamespacesRoundRobin(t *testing.T) {
	l := Limits{RequestsPerSecond: 10, Burst: 1}
	events := make([]event, 0, 150)
	events = append(events, asks(destA, "x", 60, t0)...)
	events = append(events, asks(destA, "y", 30, sec(0.05))...)
	events = append(events, asks(destA, "z", 60, sec(0.05))...)
	s := newSimulation(NewRegistry(), map[string]Limits{destA: l})
	s.run(t, events)
	adm := s.of(destA)
	checkBucket(t, adm, 10, 1)
	count := map[string]int{}
	for i, a := range adm {
		count[a.ns]++
		if i == 0 || count["y"] == 30 {
			continue // x's first key went alone; stop when y is drained
		}
		lo, hi := math.MaxInt, 0
		for _, ns := range []string{"x", "y", "z"} {
			c := count[ns]
			if ns == "x" {
				c-- // x's head start at t=0
			}
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Fatalf("after %d admissions counts %v are not round-robin", i+1, count)
		}
	}
}

// (3) Destinations are independent: a backlogged and paused A does not delay B.
func TestDestinationsIndependent(t *testing.T) {
	limits := map[string]Limits{
		destA: {RequestsPerSecond: 5, Burst: 5},
		destB: {RequestsPerSecond: 1, Burst: 1},
	}
	s := newSimulation(NewRegistry(), limits)
	events := asks(destA, "a", 200, t0)
	events = append(events, event{at: sec(0.1), dest: destA, pauseUntil: sec(10)})
	events = append(events, event{at: sec(0.5), dest: destB, ns: "a", key: "a/mail", first: true})
	events = append(events, event{at: sec(3), dest: destB, ns: "b", key: "b/mail", first: true})
	s.run(t, events)
	b := s.of(destB)
	if len(b) != 2 || !b[0].at.Equal(sec(0.5)) || !b[1].at.Equal(sec(3)) {
		t.Fatalf("B's admissions %+v, want a/mail at 0.5s and b/mail at 3s (no wait)", b)
	}
	for _, a := range s.of(destA) {
		if !a.at.Before(sec(0.1)) && a.at.Before(sec(10)) {
			t.Fatalf("A admitted %s at %v during its pause", a.key, a.at.Sub(t0))
		}
	}
	checkOnce(t, s.of(destA), keys("a", 200))
}

// (4) Pause: nothing is admitted before the end, admissions resume after it at
// the configured rate, later pauses extend and never shorten.
func TestPause(t *testing.T) {
	l := Limits{RequestsPerSecond: 5, Burst: 5}
	s := newSimulation(NewRegistry(), map[string]Limits{destA: l})
	events := asks(destA, "a", 30, t0)
	events = append(events,
		event{at: sec(1.05), dest: destA, pauseUntil: sec(5)}, // 429 Retry-After
		event{at: sec(1.10), dest: destA, pauseUntil: sec(3)}, // shorter: ignored
		event{at: sec(2.00), dest: destA, pauseUntil: sec(7)}, // longer: extends
		event{at: sec(2.50), dest: destA, pauseUntil: sec(6)}, // shorter: ignored
	)
	s.run(t, events)
	adm := s.of(destA)
	checkOnce(t, adm, keys("a", 30))
	checkBucket(t, adm, 5, 5)
	before, after := 0, 0
	for _, a := range adm {
		switch {
		case a.at.Before(sec(1.05)):
			before++
		case a.at.Before(sec(7)):
			t.Fatalf("%s admitted at %v during the pause", a.key, a.at.Sub(t0))
		default:
			after++
		}
	}
	if before != 10 { // burst 5 at 0, then 0.2 .. 1.0
		t.Fatalf("%d admitted before the pause, want 10", before)
	}
	if !adm[before].at.Equal(sec(7)) && adm[before].at.Sub(sec(7)) > 10*time.Millisecond {
		t.Fatalf("first admission after the pause at %v, want ~7s", adm[before].at.Sub(t0))
	}
	paused := 0
	for _, rf := range s.refused {
		if !rf.at.Before(sec(1.05)) && rf.at.Before(sec(7)) {
			paused++
			if rf.reason != ReasonPaused {
				t.Fatalf("refusal during the pause has reason %q, want %q", rf.reason, ReasonPaused)
			}
			if rf.at.Add(rf.wait).Before(sec(5)) {
				t.Fatalf("refusal at %v says come back after %v, before the pause ends", rf.at.Sub(t0), rf.wait)
			}
		}
	}
	if paused == 0 {
		t.Fatal("no refusal during the pause")
	}
}

// A pause on a fresh destination, huge pauses and pauses without a rate limit.
func TestPauseEdges(t *testing.T) {
	r := NewRegistry()
	r.Pause(destA, sec(10))
	ok, wait, reason := r.Admit(destA, Limits{}, "a", "a/x", true, t0)
	if ok || wait != 10*time.Second || reason != ReasonPaused {
		t.Fatalf("unlimited paused: got %v %v %q, want false 10s %q", ok, wait, reason, ReasonPaused)
	}
	if ok, _, _ := r.Admit(destA, Limits{}, "a", "a/x", true, sec(10)); !ok {
		t.Fatal("not admitted at the end of the pause")
	}
	far := t0.AddDate(200, 0, 0)
	r.Pause(destB, far)
	ok, wait, reason = r.Admit(destB, Limits{RequestsPerSecond: 1}, "a", "a/y", true, t0)
	if ok || wait <= 0 || reason != ReasonPaused {
		t.Fatalf("far pause: got %v %v %q", ok, wait, reason)
	}
	st, _ := r.Stats(destB, t0)
	if !st.PausedUntil.Equal(far) || st.Waiting != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// (5) Retry budget: 10 first attempts in the window, 20% and no floor: two
// retries, then RetryBudgetExhausted with a positive wait; first attempts are
// not affected and raise the budget.
func TestRetryBudget(t *testing.T) {
	r := NewRegistry()
	pct, floor := int32(20), int32(0)
	l := Limits{}.WithRetryBudget(&pct, &floor, 10*time.Second)
	for i := range 10 {
		if ok, _, _ := r.Admit(destA, l, "a", fmt.Sprintf("a/f%d", i), true, sec(0.1*float64(i))); !ok {
			t.Fatalf("first attempt %d refused", i)
		}
	}
	for i := range 2 {
		if ok, w, why := r.Admit(destA, l, "a", fmt.Sprintf("a/f%d", i), false, sec(1)); !ok {
			t.Fatalf("retry %d refused: %v %q", i, w, why)
		}
	}
	ok, wait, reason := r.Admit(destA, l, "a", "a/f2", false, sec(1))
	if ok || reason != ReasonRetryBudgetExhausted || wait <= 0 {
		t.Fatalf("third retry: got %v %v %q, want refused RetryBudgetExhausted with a positive wait", ok, wait, reason)
	}
	st, _ := r.Stats(destA, sec(1))
	if st.Waiting != 0 || st.FirstAttempts != 10 || st.Retries != 2 || st.BudgetRemaining != 0 || !st.Budget {
		t.Fatalf("stats %+v", st)
	}
	// First attempts never wait on the budget.
	for i := 10; i < 15; i++ {
		if ok, _, _ := r.Admit(destA, l, "a", fmt.Sprintf("a/f%d", i), true, sec(1.5)); !ok {
			t.Fatalf("first attempt %d refused while the budget is spent", i)
		}
	}
	// 15 first attempts allow 3 retries.
	if ok, _, _ := r.Admit(destA, l, "a", "a/f2", false, sec(1.5)); !ok {
		t.Fatal("retry refused though 15 first attempts allow 3")
	}
	if ok, _, reason := r.Admit(destA, l, "a", "a/f3", false, sec(1.5)); ok || reason != ReasonRetryBudgetExhausted {
		t.Fatal("fourth retry admitted")
	}
}

// spentBudget returns a registry whose destA has a budget of 2 retries per 2 s window (the floor only: 1 retry/s),
// and its limits, both retries taken, at 0 and 0.5 s, by namespace a.
func spentBudget(t *testing.T) (*Registry, Limits) {
	t.Helper()
	r := NewRegistry()
	l := Limits{Budget: true, RetryPercent: 0, MinRetriesPerSecond: 1, Window: 2 * time.Second}
	for i, at := range []float64{0, 0.5} {
		if ok, _, _ := r.Admit(destA, l, "a", fmt.Sprintf("a/r%d", i), false, sec(at)); !ok {
			t.Fatalf("retry %d refused", i)
		}
	}
	return r, l
}

// The wait of an exhausted budget is when the oldest retry leaves the window.
func TestRetryBudgetWait(t *testing.T) {
	r, l := spentBudget(t)
	ok, wait, reason := r.Admit(destA, l, "a", "a/r2", false, sec(0.6))
	// The retry at 0 leaves at 0 + 2 s + one 10 ms bucket.
	if ok || reason != ReasonRetryBudgetExhausted || wait != 1410*time.Millisecond {
		t.Fatalf("got %v %v %q, want refused for 1.41s", ok, wait, reason)
	}
	if ok, _, _ := r.Admit(destA, l, "a", "a/r2", false, sec(0.6).Add(wait-time.Microsecond)); ok {
		t.Fatal("admitted before the returned wait")
	}
	if ok, _, _ := r.Admit(destA, l, "a", "a/r2", false, sec(0.6).Add(wait)); !ok {
		t.Fatal("refused at the returned wait")
	}
	// No floor and no first attempts: nothing frees the budget; come back in a window.
	r2 := NewRegistry()
	l2 := Limits{Budget: true, RetryPercent: 20}
	ok, wait, reason = r2.Admit(destA, l2, "a", "a/x", false, t0)
	if ok || reason != ReasonRetryBudgetExhausted || wait != DefaultWindow {
		t.Fatalf("got %v %v %q, want refused for the default window", ok, wait, reason)
	}
	// Without a budget retries are only rate limited.
	if ok, _, _ := r2.Admit(destB, Limits{}, "a", "a/x", false, t0); !ok {
		t.Fatal("retry refused without a budget")
	}
}

// Retries refused by the budget together come back one after the other: each is told to come back when the
// budget fits it and every retry waiting ahead of it, so each is admitted the first time it comes back and no
// more come back at once than the budget then admits. (Told only when one more retry would fit, all of them came
// back together and all but one were refused again, a herd each window.)
func TestRetryBudgetWaitersComeBackInTurn(t *testing.T) {
	r, l := spentBudget(t)
	type back struct {
		key string
		at  time.Time
	}
	var backs []back
	for i := 2; i < 8; i++ {
		key := fmt.Sprintf("a/r%d", i)
		ok, wait, why := r.Admit(destA, l, "a", key, false, sec(0.6))
		if ok || why != ReasonRetryBudgetExhausted {
			t.Fatalf("%s at 0.6 s: %v %v %q, want refused by the budget", key, ok, wait, why)
		}
		backs = append(backs, back{key, sec(0.6).Add(wait)})
	}
	if st, _ := r.Stats(destA, sec(0.6)); st.BudgetWaiting != 6 || st.Waiting != 0 {
		t.Fatalf("stats %+v: want 6 retries waiting for the budget and no token reservation", st)
	}
	// The retries at 0 and 0.5 s leave the window at 2.01 and 2.51 s (2 s and one 10 ms bucket): the first two
	// waiters take their places; each of those leaves a retry lifetime (2.01 s) and one bucket of slack after it,
	// at 4.03 and 4.53 s, for the next two, and so on.
	want := []float64{2.01, 2.51, 4.03, 4.53, 6.05, 6.55}
	for i, b := range backs {
		if d := b.at.Sub(sec(want[i])); d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("%s told to come back at %v, want %.2f s", b.key, b.at.Sub(t0), want[i])
		}
	}
	// Each comes back at its time, in that order, and is admitted.
	for _, b := range backs {
		if ok, w, why := r.Admit(destA, l, "a", b.key, false, b.at); !ok {
			t.Errorf("%s refused when it came back at %v: %v %q", b.key, b.at.Sub(t0), w, why)
		}
	}
	if st, _ := r.Stats(destA, sec(6.55)); st.BudgetWaiting != 0 {
		t.Errorf("%d retries still hold a place for the budget, want 0", st.BudgetWaiting)
	}
}

// The retries waiting for the budget are served in the fair order over namespaces the token queue keeps: a
// namespace whose retry starts waiting behind another namespace's backlog is not put behind all of it.
func TestRetryBudgetWaitersAreFairOverNamespaces(t *testing.T) {
	r, l := spentBudget(t)
	var aBacks []time.Time
	for i := 2; i < 6; i++ {
		_, wait, _ := r.Admit(destA, l, "a", fmt.Sprintf("a/r%d", i), false, sec(0.6))
		aBacks = append(aBacks, sec(0.6).Add(wait))
	}
	ok, wait, why := r.Admit(destA, l, "b", "b/r0", false, sec(0.7))
	if ok || why != ReasonRetryBudgetExhausted {
		t.Fatalf("b's retry: %v %v %q, want refused by the budget", ok, wait, why)
	}
	// Start-time fair queuing: a's waiting retries start after a's two admitted ones, b's (none admitted) at the
	// virtual clock, so b's is served first, not behind a's backlog of four.
	if got := sec(0.7).Add(wait); !got.Equal(aBacks[0]) {
		t.Errorf("b's retry told to come back at %v, want the first place's time %v (a's backlog: %v)",
			got.Sub(t0), aBacks[0].Sub(t0), aBacks)
	}
	if st, _ := r.Stats(destA, sec(0.7)); st.BudgetWaiting != 5 {
		t.Errorf("%d retries wait for the budget, want 5", st.BudgetWaiting)
	}
}

// A retry waiting for the budget keeps the place of no key that went away: Forget drops it, and the retry behind
// takes its time.
func TestRetryBudgetForgetDropsThePlace(t *testing.T) {
	r, l := spentBudget(t)
	_, wx, _ := r.Admit(destA, l, "a", "a/x", false, sec(0.6))
	r.Admit(destA, l, "a", "a/y", false, sec(0.6))
	// Without the Forget, y at x's time would need the budget for x and itself there: refused.
	r.Forget(destA, "a/x")
	if ok, w, why := r.Admit(destA, l, "a", "a/y", false, sec(0.6).Add(wx)); !ok {
		t.Errorf("y refused at x's time after x was forgotten: %v %q", w, why)
	}
}

// A retry that waited for a token rechecks the budget when its turn comes and
// then leaves the queue.
func TestRetryBudgetWithRateLimit(t *testing.T) {
	r := NewRegistry()
	l := Limits{RequestsPerSecond: 1, Burst: 1, Budget: true, RetryPercent: 0, MinRetriesPerSecond: 1, Window: time.Second}
	if ok, _, _ := r.Admit(destA, l, "a", "a/x", false, t0); !ok {
		t.Fatal("first retry refused")
	}
	ok, wait, reason := r.Admit(destA, l, "a", "a/y", false, sec(0.1))
	if ok || reason != ReasonRetryBudgetExhausted {
		t.Fatalf("got %v %v %q", ok, wait, reason)
	}
	if st, _ := r.Stats(destA, sec(0.1)); st.Waiting != 0 {
		t.Fatalf("a budget refusal holds a reservation: %+v", st)
	}
}

// (6) Asking again before the slot consumes no capacity and keeps the place.
func TestReaskKeepsPlace(t *testing.T) {
	r := NewRegistry()
	l := Limits{RequestsPerSecond: 1, Burst: 1}
	if ok, _, _ := r.Admit(destA, l, "a", "a/k0", true, t0); !ok {
		t.Fatal("k0 refused")
	}
	ok, wait, reason := r.Admit(destA, l, "a", "a/k1", true, t0)
	if ok || reason != ReasonRateLimited {
		t.Fatalf("k1: got %v %v %q", ok, wait, reason)
	}
	slot := t0.Add(wait)
	for i := 1; i < 10; i++ {
		now := sec(0.1 * float64(i))
		ok, w, _ := r.Admit(destA, l, "a", "a/k1", true, now)
		if ok {
			t.Fatalf("k1 admitted at %v, before its slot", now.Sub(t0))
		}
		if d := now.Add(w).Sub(slot); d < -time.Microsecond || d > time.Microsecond {
			t.Fatalf("re-ask at %v moved the slot by %v", now.Sub(t0), d)
		}
		st, _ := r.Stats(destA, now)
		if want := 0.1 * float64(i); math.Abs(st.Tokens-want) > 1e-9 || st.Waiting != 1 {
			t.Fatalf("re-ask consumed capacity: stats %+v, want tokens %.1f", st, want)
		}
	}
	// k2 arrives later and is behind k1.
	ok, w2, _ := r.Admit(destA, l, "a", "a/k2", true, sec(0.5))
	if ok || sec(0.5).Add(w2).Before(slot.Add(time.Second-time.Millisecond)) {
		t.Fatalf("k2: got %v, come back at %v; want behind k1's slot %v", ok, sec(0.5).Add(w2).Sub(t0), slot.Sub(t0))
	}
	if ok, _, _ := r.Admit(destA, l, "a", "a/k1", true, slot); !ok {
		t.Fatal("k1 refused at its slot")
	}
	if ok, _, _ := r.Admit(destA, l, "a", "a/k2", true, sec(0.5).Add(w2)); !ok {
		t.Fatal("k2 refused at its slot")
	}
}

// (7) A reservation not claimed within the grace period is dropped and its
// capacity goes to the next key.
func TestGraceDropsUnclaimedReservation(t *testing.T) {
	r := NewRegistry(WithGrace(2 * time.Second))
	l := Limits{RequestsPerSecond: 1, Burst: 1}
	r.Admit(destA, l, "a", "a/k0", true, t0)
	_, wx, _ := r.Admit(destA, l, "a", "a/x", true, t0) // slot ~1s, never comes back
	_, wy, _ := r.Admit(destA, l, "a", "a/y", true, t0) // slot ~2s
	if wx <= 0 || wy <= wx {
		t.Fatalf("waits x %v y %v", wx, wy)
	}
	// At y's slot x still holds its reservation (1s + 2s grace): y waits.
	if ok, _, _ := r.Admit(destA, l, "a", "a/y", true, t0.Add(wy)); ok {
		t.Fatal("y admitted while x's reservation is within grace")
	}
	// Just after x's grace: x is dropped, y takes the token.
	after := t0.Add(wx).Add(2 * time.Second).Add(time.Microsecond)
	if ok, w, why := r.Admit(destA, l, "a", "a/y", true, after); !ok {
		t.Fatalf("y refused after x's grace ended: %v %q", w, why)
	}
	if st, _ := r.Stats(destA, after); st.Waiting != 0 {
		t.Fatalf("x's reservation not dropped: %+v", st)
	}
	// x coming back late takes its place again, at the front (its reservation went late, not away), and waits
	// for the next token, the one y's was.
	ok, w, _ := r.Admit(destA, l, "a", "a/x", true, after)
	if ok || w < 900*time.Millisecond {
		t.Fatalf("late x: got %v %v, want a wait of ~1s for the next token", ok, w)
	}
	if st, _ := r.Stats(destA, after); st.Waiting != 1 {
		t.Fatalf("late x holds no place: %+v", st)
	}
}

// The same, in a simulation: a vanished head delays the others by at most the
// grace period and every token is used afterwards.
func TestGraceInSimulation(t *testing.T) {
	l := Limits{RequestsPerSecond: 5, Burst: 1}
	s := newSimulation(NewRegistry(WithGrace(time.Second)), map[string]Limits{destA: l})
	s.vanish = map[string]bool{"a/k001": true, "a/k002": true}
	s.run(t, asks(destA, "a", 20, t0))
	adm := s.of(destA)
	if len(adm) != 18 {
		t.Fatalf("%d admitted, want 18", len(adm))
	}
	checkBucket(t, adm, 5, 1)
	// k001's slot is 0.2 s and k002's 0.4 s: k003 goes when k002's grace ends
	// (1.4 s), then the rest at 5/s. The keys behind learn about the dropped
	// reservations only when they ask again, so each dropped one may leave one
	// token unused (a hole of 200 ms).
	if got := adm[1].at.Sub(t0); got < 1400*time.Millisecond || got > 1410*time.Millisecond {
		t.Fatalf("k003 admitted at %v, want just after 1.4s", got)
	}
	if last := adm[17].at.Sub(adm[1].at); last > (16+2)*200*time.Millisecond+10*time.Millisecond {
		t.Fatalf("the rest took %v, want <= 3.6s", last)
	}
	if st, _ := s.r.Stats(destA, adm[17].at); st.Waiting != 0 {
		t.Fatalf("stale reservations kept: %+v", st)
	}
}

func TestForget(t *testing.T) {
	r := NewRegistry()
	l := Limits{RequestsPerSecond: 1, Burst: 1}
	r.Admit(destA, l, "a", "a/k0", true, t0)
	r.Admit(destA, l, "a", "a/x", true, t0)
	_, wy, _ := r.Admit(destA, l, "a", "a/y", true, t0)
	r.Forget(destA, "a/x")
	r.Forget(destA, "a/unknown")
	r.Forget("Destination/none/none", "a/x")
	ok, w, _ := r.Admit(destA, l, "a", "a/y", true, sec(0.5))
	if ok || sec(0.5).Add(w).After(t0.Add(wy)) || w > 600*time.Millisecond {
		t.Fatalf("y after x was forgotten: got %v %v, want its slot to move to ~1s", ok, w)
	}
	if ok, _, _ := r.Admit(destA, l, "a", "a/y", true, sec(0.5).Add(w)); !ok {
		t.Fatal("y refused at its new slot")
	}
}

// ForgetKey drops a key's reservations on every destination (the key left this shard): the key behind it on
// each destination gets its slot without waiting for the grace.
func TestForgetKey(t *testing.T) {
	const destB = "Destination/b/pay"
	r := NewRegistry(WithGrace(2 * time.Second))
	l := Limits{RequestsPerSecond: 1, Burst: 1}
	for _, d := range []string{destA, destB} {
		r.Admit(d, l, "a", "a/k0", true, t0)
		r.Admit(d, l, "a", "a/x", true, t0) // slot ~1s; then relabeled away, never asks again
		r.Admit(d, l, "a", "a/y", true, t0) // slot ~2s
	}
	r.ForgetKey("a/x")
	r.ForgetKey("a/unknown")
	for _, d := range []string{destA, destB} {
		if ok, w, why := r.Admit(d, l, "a", "a/y", true, sec(1.01)); !ok {
			t.Errorf("%s: y refused at x's slot after x was forgotten: %v %q", d, w, why)
		}
		if st, _ := r.Stats(d, sec(1.01)); st.Waiting != 0 {
			t.Errorf("%s: %d reservations kept, want 0", d, st.Waiting)
		}
	}
}

// Limits change between calls: the bucket adapts and keeps its tokens.
func TestLimitsChange(t *testing.T) {
	r := NewRegistry()
	fast := Limits{RequestsPerSecond: 10, Burst: 10}
	for i := range 10 {
		if ok, _, _ := r.Admit(destA, fast, "a", fmt.Sprintf("a/f%d", i), true, t0); !ok {
			t.Fatalf("burst %d refused", i)
		}
	}
	slow := Limits{RequestsPerSecond: 1, Burst: 2}
	ok, w, _ := r.Admit(destA, slow, "a", "a/s", true, t0)
	if ok || w < time.Second-time.Millisecond || w > time.Second+time.Millisecond {
		t.Fatalf("after slowing down: got %v %v, want ~1s", ok, w)
	}
	if st, _ := r.Stats(destA, sec(10)); st.Tokens != 2 {
		t.Fatalf("burst not lowered: %+v", st)
	}
	// Rate limit removed: everything goes.
	for i := range 50 {
		if ok, _, _ := r.Admit(destA, Limits{}, "a", fmt.Sprintf("a/u%d", i), true, sec(10)); !ok {
			t.Fatal("refused without a rate limit")
		}
	}
	if st, _ := r.Stats(destA, sec(10)); st.Limited || !math.IsInf(st.Tokens, 1) || st.Waiting != 0 {
		t.Fatalf("stats without a rate limit %+v", st)
	}
	// Rate limit back: a fresh bucket of Burst (defaulting to the rate).
	back := Limits{RequestsPerSecond: 3}
	n := 0
	for i := range 10 {
		if ok, _, _ := r.Admit(destA, back, "a", fmt.Sprintf("a/b%d", i), true, sec(10)); ok {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d admitted with a fresh bucket of 3", n)
	}
}

// Callers racing with slightly different clocks cannot mint tokens.
func TestTimeNeverGoesBack(t *testing.T) {
	r := NewRegistry()
	l := Limits{RequestsPerSecond: 1, Burst: 1}
	if ok, _, _ := r.Admit(destA, l, "a", "a/1", true, sec(10)); !ok {
		t.Fatal("refused")
	}
	if ok, _, _ := r.Admit(destA, l, "a", "a/2", true, sec(5)); ok {
		t.Fatal("admitted with an earlier clock")
	}
	r.Forget(destA, "a/2")
	if ok, _, _ := r.Admit(destA, l, "a", "a/3", true, sec(10.5)); ok {
		t.Fatal("admitted half a second after the last token")
	}
	r.Forget(destA, "a/3")
	if ok, _, _ := r.Admit(destA, l, "a", "a/4", true, sec(11)); !ok {
		t.Fatal("refused a second after the last token")
	}
}

// Memory stays bounded: idle destinations are dropped, but never while they
// hold state that matters (waiting keys, a pause, spent tokens, budget).
func TestIdleDestinationsDropped(t *testing.T) {
	r := NewRegistry(WithIdleTTL(time.Minute), WithGrace(time.Second))
	l := Limits{RequestsPerSecond: 1, Burst: 100, Budget: true, RetryPercent: 20, MinRetriesPerSecond: 1}
	for i := range 100 {
		r.Admit("spent", l, "a", fmt.Sprintf("a/%d", i), true, t0)
	}
	r.Admit("idle", Limits{RequestsPerSecond: 5}, "a", "a/x", true, t0)
	r.Admit("waiting", Limits{RequestsPerSecond: 1}, "a", "a/x", true, t0)
	r.Admit("waiting", Limits{RequestsPerSecond: 1}, "a", "a/y", true, t0) // holds a reservation
	r.Pause("paused", t0.Add(time.Hour))
	r.Admit("vanished", Limits{RequestsPerSecond: 1}, "a", "a/x", true, t0)
	r.Admit("vanished", Limits{RequestsPerSecond: 1}, "a", "a/y", true, t0) // y never comes back

	r.Admit("waiting", Limits{RequestsPerSecond: 1}, "a", "a/y", true, sec(0.5)) // y asks again, then goes away
	r.Admit("tick", Limits{}, "a", "a/t", true, sec(90))
	// "idle", "vanished" and "waiting" (whose reservation expired) are gone;
	// "spent" has 90 of 100 tokens back, "paused" is paused.
	if got, want := r.Destinations(), []string{"paused", "spent", "tick"}; !slices.Equal(got, want) {
		t.Fatalf("after 90s: %v, want %v", got, want)
	}
	r.Admit("tick", Limits{}, "a", "a/t", true, sec(200))
	if got, want := r.Destinations(), []string{"paused", "tick"}; !slices.Equal(got, want) {
		t.Fatalf("after 200s: %v, want %v", got, want)
	}
	if _, ok := r.Stats("spent", sec(200)); ok {
		t.Fatal("stats of a dropped destination")
	}
	r.Admit("tick", Limits{}, "a", "a/t", true, sec(3700))
	if got, want := r.Destinations(), []string{"tick"}; !slices.Equal(got, want) {
		t.Fatalf("after the pause: %v, want %v", got, want)
	}
}

// A waiting key keeps its destination alive while it keeps asking.
func TestWaitingDestinationKept(t *testing.T) {
	r := NewRegistry(WithIdleTTL(time.Second))
	l := Limits{RequestsPerSecond: 1, Burst: 1}
	r.Pause(destA, sec(100))
	for s := 0.0; s < 100; s += 5 {
		if ok, _, _ := r.Admit(destA, l, "a", "a/x", true, sec(s)); ok {
			t.Fatalf("admitted at %vs during the pause", s)
		}
		r.Admit(destB, Limits{}, "b", "b/t", true, sec(s))
	}
	if ok, _, _ := r.Admit(destA, l, "a", "a/x", true, sec(100)); !ok {
		t.Fatal("refused after the pause")
	}
}

// Random workload: several namespaces, late and vanishing callers, Forget and
// limit changes; the token-bucket bound always holds.
func TestRandomizedBound(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 99))
			rps, burst := 1+rnd.Int32N(20), 1+rnd.Int32N(10)
			l := Limits{RequestsPerSecond: rps, Burst: burst}
			s := newSimulation(NewRegistry(WithGrace(500*time.Millisecond)), map[string]Limits{destA: l})
			s.late = func(string) time.Duration { return time.Duration(rnd.Int64N(int64(700 * time.Millisecond))) }
			s.vanish = map[string]bool{}
			events := make([]event, 0, 300)
			for i := range 300 {
				ns := fmt.Sprintf("ns%d", rnd.IntN(4))
				key := fmt.Sprintf("%s/k%d", ns, i)
				if rnd.IntN(10) == 0 {
					s.vanish[key] = true
				}
				events = append(events, event{at: sec(rnd.Float64() * 20), dest: destA, ns: ns, key: key, first: rnd.IntN(2) == 0})
			}
			s.run(t, events)
			adm := s.of(destA)
			checkBucket(t, adm, float64(rps), float64(burst))
			if len(adm)+len(s.vanish) < 300 {
				t.Fatalf("%d admitted, %d vanished, of 300", len(adm), len(s.vanish))
			}
		})
	}
}

// Concurrent callers (run with -race): the bound holds per destination.
func TestConcurrentCallers(t *testing.T) {
	r := NewRegistry(WithGrace(50*time.Millisecond), WithIdleTTL(time.Second))
	dests := []string{"d0", "d1", "d2"}
	limits := Limits{RequestsPerSecond: 50, Burst: 10, Budget: true, RetryPercent: 50, MinRetriesPerSecond: 5}
	var clock atomic.Int64 // nanoseconds since t0
	var admitted [3]atomic.Int64
	var wg sync.WaitGroup
	for g := range uint64(8) {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(g, 7))
			for i := range 3000 {
				now := t0.Add(time.Duration(clock.Add(int64(rnd.IntN(200)) * int64(time.Microsecond))))
				di := rnd.IntN(len(dests))
				ns := fmt.Sprintf("ns%d", rnd.IntN(3))
				key := fmt.Sprintf("%s/g%d-%d", ns, g, rnd.IntN(50))
				switch rnd.IntN(40) {
				case 0:
					r.Pause(dests[di], now.Add(time.Duration(rnd.IntN(100))*time.Millisecond))
				case 1:
					r.Forget(dests[di], key)
				case 2:
					r.Stats(dests[di], now)
					r.Destinations()
				default:
					if ok, _, _ := r.Admit(dests[di], limits, ns, key, i%3 != 0, now); ok {
						admitted[di].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Duration(clock.Load()).Seconds()
	for i := range dests {
		if n, limit := float64(admitted[i].Load()), 10+50*elapsed; n > limit+1e-6 || n == 0 {
			t.Fatalf("%s: %v admitted in %.3fs, bound %.1f", dests[i], n, elapsed, limit)
		}
	}
}

func TestWithRetryBudgetDefaults(t *testing.T) {
	l := Limits{RequestsPerSecond: 5}.WithRetryBudget(nil, nil, 0)
	want := Limits{RequestsPerSecond: 5, Budget: true, RetryPercent: DefaultRetryPercent, MinRetriesPerSecond: DefaultMinRetriesPerSecond}
	if l != want {
		t.Fatalf("got %+v, want %+v", l, want)
	}
	if n := l.normalized(); n.Window != DefaultWindow || n.Burst != 5 {
		t.Fatalf("normalized %+v", n)
	}
	zero := int32(0)
	if l := (Limits{}).WithRetryBudget(&zero, &zero, time.Minute); l.RetryPercent != 0 || l.MinRetriesPerSecond != 0 || l.Window != time.Minute {
		t.Fatalf("explicit zeros not kept: %+v", l)
	}
}

// A first attempt raises the budget by RetryPercent of one. The retries waiting for it were told times that
// assume no new first attempts, so when first attempts make room the registry hands exactly as many waiters as
// now fit, in the fair order, to its wake function, each once; they are admitted when they come.
func TestFirstAttemptsWakeBudgetWaitersEarly(t *testing.T) {
	r := NewRegistry()
	var woken [][]string
	r.WakesEarly(func(ws []Wake) {
		var keys []string
		for _, w := range ws {
			keys = append(keys, w.Key)
		}
		woken = append(woken, keys)
	})
	pct, floor := int32(20), int32(0)
	l := Limits{}.WithRetryBudget(&pct, &floor, 10*time.Second)
	for i := range 10 {
		r.Admit(destA, l, "f", fmt.Sprintf("f/%d", i), true, sec(0))
	}
	for i := range 2 { // 10 first attempts allow 2 retries
		if ok, _, _ := r.Admit(destA, l, "a", fmt.Sprintf("a/r%d", i), false, sec(0)); !ok {
			t.Fatalf("retry %d refused", i)
		}
	}
	for _, k := range []string{"a/w0", "a/w1", "b/w0"} {
		ns, _, _ := strings.Cut(k, "/")
		// Without more first attempts nothing frees the budget: told to come back in a window.
		if ok, wait, why := r.Admit(destA, l, ns, k, false, sec(1)); ok || why != ReasonRetryBudgetExhausted || wait != 10*time.Second {
			t.Fatalf("%s: %v %v %q, want refused for a window", k, ok, wait, why)
		}
	}
	firsts := 10
	first := func(at float64) {
		t.Helper()
		if ok, _, _ := r.Admit(destA, l, "f", fmt.Sprintf("f/%d", firsts), true, sec(at)); !ok {
			t.Fatalf("first attempt %d refused", firsts)
		}
		firsts++
	}
	for range 4 { // 14 first attempts: 2.8 retries, 2 taken
		first(2)
	}
	if len(woken) != 0 {
		t.Fatalf("woken %v before the budget fits one more retry", woken)
	}
	first(2) // 15: 3 retries, one fits
	first(2) // 16: still one: the one woken is not woken again
	// Namespace a had the two retries admitted, so b's waiter goes first, then a's in their order (fair order).
	if want := [][]string{{"b/w0"}}; !reflect.DeepEqual(woken, want) {
		t.Fatalf("woken %v, want %v", woken, want)
	}
	if ok, w, why := r.Admit(destA, l, "b", "b/w0", false, sec(2.1)); !ok {
		t.Fatalf("b/w0 refused when woken: %v %q", w, why)
	}
	for range 4 { // 20 first attempts: 4 retries, 3 taken
		first(3)
	}
	if want := [][]string{{"b/w0"}, {"a/w0"}}; !reflect.DeepEqual(woken, want) {
		t.Fatalf("woken %v, want %v", woken, want)
	}
	// A pause stops the destination: nothing is woken into it.
	r.Pause(destA, sec(60))
	for range 10 {
		r.Admit(destA, l, "f", "f/paused", true, sec(4))
	}
	if len(woken) != 2 {
		t.Fatalf("woken %v during a pause", woken)
	}
}

// Under a steady stream of first attempts the budget refills far faster than the times told to waiting retries
// (which assume no new first attempts): 60 retries that ask at once, behind 10 first attempts a second with a
// 20 % budget and a floor of 1 retry/s over 10 s (30 retries a window once the stream is steady). Woken as first
// attempts make room (WakesEarly), the last of them is admitted about when the budget's rate allows it and each
// is refused about once; left to come back at their told times, the last waits about twice as long.
func TestBudgetWaitersUnderSteadyFirstAttempts(t *testing.T) {
	pct, floor := int32(20), int32(1)
	l := Limits{}.WithRetryBudget(&pct, &floor, 10*time.Second)
	run := func(early bool) (last time.Duration, refusals int) {
		s := newSimulation(NewRegistry(), map[string]Limits{destA: l})
		s.early = early
		var evs []event
		for i := range 600 { // 10 a second for a minute
			evs = append(evs, event{at: sec(float64(i) / 10), dest: destA, ns: "f", key: fmt.Sprintf("f/%d", i), first: true})
		}
		for i := range 60 {
			ns := []string{"a", "b"}[i%2]
			evs = append(evs, event{at: sec(5), dest: destA, ns: ns, key: fmt.Sprintf("%s/r%d", ns, i)})
		}
		s.run(t, evs)
		for _, a := range s.of(destA) {
			if !a.first {
				last = max(last, a.at.Sub(sec(5)))
			}
		}
		checkBudget(t, s.of(destA), l)
		return last, len(s.refused)
	}
	last, refusals := run(true)
	lastTold, refusalsTold := run(false)
	t.Logf("woken early: last retry %v after asking, %d refusals; at told times only: %v, %d", last, refusals, lastTold, refusalsTold)
	// 50 first attempts before they ask allow 20 retries in the first window; 30 more each window after.
	if last > 20*time.Second {
		t.Errorf("woken early, the last retry was admitted %v after asking, want within 20 s (about 1.5 windows)", last)
	}
	if refusals > 2*60 {
		t.Errorf("%d refusals for 60 waiting retries, want at most 2 each", refusals)
	}
}

// checkBudget fails unless, at every retry admitted, the retries admitted in the window before it (it included)
// fit the budget of the first attempts admitted in that window.
func checkBudget(t *testing.T, adm []admission, l Limits) {
	t.Helper()
	l = l.normalized()
	for i, a := range adm {
		if a.first {
			continue
		}
		firsts, retries := 0, 0
		for _, b := range adm[:i+1] {
			if a.at.Sub(b.at) < l.Window {
				if b.first {
					firsts++
				} else {
					retries++
				}
			}
		}
		if float64(retries) > allowance(l, firsts)+budgetEpsilon {
			t.Fatalf("at %v: %d retries in the window, the budget of %d first attempts allows %.1f", a.at.Sub(t0), retries, firsts, allowance(l, firsts))
		}
	}
}

// The budget is never left unused while retries wait for it. When a stream of first attempts stops, the times
// told to the retries deep in the queue (which assumed the retries ahead would take the budget later than they
// did, woken early by those first attempts) are brought forward as the queue moves (WakesEarly with a time):
// every 10 s window admits at least the floor's 10 retries until the queue is empty. 10 first attempts a second
// for 30 s, 150 retries asking at 5 s, a 20 % budget with a floor of 1 retry/s over 10 s.
func TestBudgetWaitersAfterFirstAttemptsStop(t *testing.T) {
	pct, floor := int32(20), int32(1)
	l := Limits{}.WithRetryBudget(&pct, &floor, 10*time.Second)
	s := newSimulation(NewRegistry(), map[string]Limits{destA: l})
	s.early = true
	var evs []event
	for i := range 300 {
		evs = append(evs, event{at: sec(float64(i) / 10), dest: destA, ns: "f", key: fmt.Sprintf("f/%d", i), first: true})
	}
	for i := range 150 {
		evs = append(evs, event{at: sec(5), dest: destA, ns: "a", key: fmt.Sprintf("a/r%d", i)})
	}
	s.run(t, evs)
	checkBudget(t, s.of(destA), l)
	per := map[int]int{}
	last := 0
	for _, a := range s.of(destA) {
		if !a.first {
			w := int(a.at.Sub(sec(5)) / (10 * time.Second))
			per[w]++
			last = max(last, w)
		}
	}
	for w := range last { // the last window is the queue's tail
		if per[w] < 10 {
			t.Errorf("window %d (from %ds): %d retries admitted while retries waited, want at least the floor's 10 (per window: %v)",
				w, 5+10*w, per[w], per)
		}
	}
}

// A destination whose retry budget is removed hands every retry waiting for it to the wake function at once:
// nothing holds them any more.
func TestRemovedBudgetWakesItsWaiters(t *testing.T) {
	r, l := spentBudget(t)
	var woken []string
	r.WakesEarly(func(ws []Wake) {
		for _, w := range ws {
			if !w.At.Equal(sec(1)) {
				t.Errorf("%s woken for %v, want now (1 s)", w.Key, w.At.Sub(t0))
			}
			woken = append(woken, w.Key)
		}
	})
	for _, k := range []string{"a/x", "a/y", "b/z"} {
		ns, _, _ := strings.Cut(k, "/")
		if ok, _, why := r.Admit(destA, l, ns, k, false, sec(0.6)); ok || why != ReasonRetryBudgetExhausted {
			t.Fatalf("%s admitted with the budget spent", k)
		}
	}
	l.Budget = false
	r.Admit(destA, l, "c", "c/first", true, sec(1))
	slices.Sort(woken)
	if want := []string{"a/x", "a/y", "b/z"}; !slices.Equal(woken, want) {
		t.Errorf("woken %v, want %v", woken, want)
	}
	if st, _ := r.Stats(destA, sec(1)); st.BudgetWaiting != 0 {
		t.Errorf("%d retries still wait for a removed budget", st.BudgetWaiting)
	}
}

// Waiters slower than the grace (a busy workqueue: every wake runs 3 s after its time) neither hold the budget
// for the others nor lose their place: 20 retries behind 2 per 2 s are all admitted about when the budget allows
// them (18 s when on time), each refused about once. Dropping a late waiter's place put it at the back with a
// later time each round, where the budget waited for retries not yet there.
func TestLateBudgetWaitersKeepTheirPlace(t *testing.T) {
	l := Limits{Budget: true, RetryPercent: 0, MinRetriesPerSecond: 1, Window: 2 * time.Second}
	s := newSimulation(NewRegistry(), map[string]Limits{destA: l})
	s.early = true
	s.late = func(string) time.Duration { return 3 * time.Second }
	s.maxEvents = 20_000
	var evs []event
	for i := range 20 {
		evs = append(evs, event{at: sec(0.6), dest: destA, ns: "a", key: fmt.Sprintf("a/r%d", i)})
	}
	s.run(t, evs)
	checkBudget(t, s.of(destA), l)
	var last time.Time
	for _, a := range s.of(destA) {
		last = a.at
	}
	if len(s.of(destA)) != 20 || last.After(sec(25)) || len(s.refused) > 40 {
		t.Errorf("%d of 20 admitted, the last at %v, %d refusals; want all by 25 s, at most two refusals each",
			len(s.of(destA)), last.Sub(t0), len(s.refused))
	}
}

// The budget is not held for a retry whose time has come but that has not asked yet: the next one that asks takes
// it. With one retry per 1 s window spent at 0, x and y wait (x first: told 1.005 s, y 2.015 s; a 5 ms bucket). At 1.5 s x has
// not come (a slow wake) and y asks (a look for another reason): y is admitted, not refused for x; x, when it
// comes, waits from its place at the front.
func TestABudgetWaiterThatHasNotComeHoldsNothing(t *testing.T) {
	r := NewRegistry()
	l := Limits{Budget: true, RetryPercent: 0, MinRetriesPerSecond: 1, Window: time.Second}
	if ok, _, _ := r.Admit(destA, l, "a", "a/r0", false, sec(0)); !ok {
		t.Fatal("first retry refused")
	}
	_, wx, _ := r.Admit(destA, l, "a", "a/x", false, sec(0.1))
	_, wy, _ := r.Admit(destA, l, "a", "a/y", false, sec(0.1))
	if tx, ty := sec(0.1).Add(wx), sec(0.1).Add(wy); !tx.Equal(t0.Add(1005*time.Millisecond)) || !ty.Equal(t0.Add(2015*time.Millisecond)) {
		t.Fatalf("x told %v, y %v: want 1.005 s and 2.015 s", tx.Sub(t0), ty.Sub(t0))
	}
	if ok, w, why := r.Admit(destA, l, "a", "a/y", false, sec(1.5)); !ok {
		t.Fatalf("y refused at 1.5 s for x, due at 1.005 s and not come: %v %q", w, why)
	}
	ok, w, why := r.Admit(destA, l, "a", "a/x", false, sec(1.8))
	if ok || why != ReasonRetryBudgetExhausted {
		t.Fatalf("x admitted after y took the budget: %v %v %q", ok, w, why)
	}
	if st, _ := r.Stats(destA, sec(1.8)); st.BudgetWaiting != 1 {
		t.Errorf("%d waiting, want x", st.BudgetWaiting)
	}
}

// A key slower than the grace (every wake 3 s after its turn: a busy workqueue) keeps its place in the token
// queue: its reservation goes late, not away, so it holds no token from the keys that come, and takes its place
// again when it comes. 20 keys at 1 request/s with a burst of 1 are all admitted, each refused once. When a late
// reservation was dropped, each key came back to the end of the queue to be told a later turn it would again miss:
// none but the first was ever admitted.
func TestLateTokenWaitersKeepTheirPlace(t *testing.T) {
	l := Limits{RequestsPerSecond: 1, Burst: 1}
	s := newSimulation(NewRegistry(), map[string]Limits{destA: l})
	s.late = func(string) time.Duration { return 3 * time.Second }
	s.maxEvents = 20_000
	s.run(t, asks(destA, "a", 20, t0))
	adm := s.of(destA)
	checkBucket(t, adm, 1, 1)
	checkOnce(t, adm, keys("a", 20))
	if len(s.refused) > 20 {
		t.Errorf("%d refusals for 20 keys, want at most one each", len(s.refused))
	}
}

// The cost of an Admit at a destination whose retry budget has waiters: 2,000 retries waiting over 100
// namespaces, each first attempt raising the budget (100 %), so every Admit works out who to wake and retime
// (destination.wakeups); BenchmarkAdmitNoWaiters is the same first attempts with no retry waiting.
// go test ./internal/limiter/ -run '^$' -bench Admit -benchmem
func BenchmarkAdmitBudgetWaiters(b *testing.B) {
	benchAdmit(b, 2000, 100)
}

// BenchmarkAdmitNoWaiters: first attempts at a destination with a retry budget and no retry waiting.
func BenchmarkAdmitNoWaiters(b *testing.B) {
	benchAdmit(b, 0, 1)
}

func benchAdmit(b *testing.B, waiters, namespaces int) {
	pct, floor := int32(100), int32(0)
	l := Limits{}.WithRetryBudget(&pct, &floor, 10*time.Second)
	r := NewRegistry()
	r.WakesEarly(func([]Wake) {})
	for i := range 1000 {
		r.Admit(destA, l, "f", fmt.Sprintf("f/%d", i), true, sec(0))
	}
	for i := range 1000 { // the budget spent
		r.Admit(destA, l, "x", fmt.Sprintf("x/%d", i), false, sec(0))
	}
	for i := range waiters {
		ns := fmt.Sprintf("n%d", i%namespaces)
		r.Admit(destA, l, ns, fmt.Sprintf("%s/%d", ns, i), false, sec(0.1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		r.Admit(destA, l, "f", fmt.Sprintf("h/%d", i), true, sec(0.2).Add(time.Duration(i)*time.Microsecond))
	}
}

// fitTimes' periodic shortcut gives the times the full replay gives: random windows of first attempts and retries,
// floors, percents and shares, for ranges of needs near the front and deep in a queue.
func TestFitTimesPeriodicIsTheReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 42))
	for c := range 500 {
		l := Limits{Budget: true, RetryPercent: rng.Int32N(60), MinRetriesPerSecond: rng.Int32N(4),
			Window: time.Duration(1+rng.IntN(20)) * time.Second, Shares: 1 + rng.IntN(2)}.normalized()
		var b retryBudget
		now := t0
		for range rng.IntN(300) {
			now = now.Add(time.Duration(rng.IntN(int(l.Window / 50))))
			b.record(rng.IntN(3) > 0, now, l.Window)
		}
		now = now.Add(time.Duration(rng.IntN(int(l.Window))))
		b.prune(now, l.Window)
		from := rng.IntN(3000)
		to := from + 1 + rng.IntN(20)
		got, want := b.fitTimes(now, l, from, to), b.replayTimes(now, l, from, to, false)
		if !slices.EqualFunc(got, want, func(x, y time.Time) bool { return x.Equal(y) }) {
			t.Fatalf("case %d (%+v, needs %d..%d): periodic %v, replay %v", c, l, from+1, to, got, want)
		}
	}
}

// The cost of telling a retry deep in a long queue its time: 10,000 retries of one namespace wait; each Admit is
// one of the last thousand asking again (refused). The told time's replay stops once the window's own admissions
// have left it and counts the rest by the period (fitTimes).
func BenchmarkAdmitDeepBudgetWaiter(b *testing.B) {
	pct, floor := int32(20), int32(1)
	l := Limits{}.WithRetryBudget(&pct, &floor, 10*time.Second)
	r := NewRegistry()
	r.WakesEarly(func([]Wake) {})
	for i := range 10 {
		r.Admit(destA, l, "x", fmt.Sprintf("x/%d", i), false, sec(float64(i)/10))
	}
	for i := range 10000 {
		r.Admit(destA, l, "t", fmt.Sprintf("t/%d", i), false, sec(1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := 9000 + i%1000
		r.Admit(destA, l, "t", fmt.Sprintf("t/%d", k), false, sec(1.5))
	}
}

// A retry that has not waited yet does not take the budget a woken waiter ahead of it was woken for: x (namespace
// b), refused at 0.1 s and told 1.005 s, is due and on its way when n, the first retry of namespace c, asks at
// 1.2 s; both start at the virtual time, so x is ahead in the fair order. n is
// refused and told to come back after x's grace (2.005 s) at the earliest; x, asking at 1.5 s, is admitted. Before,
// n took the budget at 1.2 s and x was refused again and told a window later.
func TestAFreshRetryLeavesTheBudgetToTheWokenWaiter(t *testing.T) {
	r := NewRegistry()
	l := Limits{Budget: true, RetryPercent: 0, MinRetriesPerSecond: 1, Window: time.Second}
	if ok, _, _ := r.Admit(destA, l, "a", "a/r0", false, sec(0)); !ok {
		t.Fatal("first retry refused")
	}
	_, wx, _ := r.Admit(destA, l, "b", "b/x", false, sec(0.1))
	if tx := sec(0.1).Add(wx); !tx.Equal(t0.Add(1005 * time.Millisecond)) {
		t.Fatalf("x told %v, want 1.005 s", tx.Sub(t0))
	}
	ok, wn, why := r.Admit(destA, l, "c", "c/n", false, sec(1.2))
	if ok || why != ReasonRetryBudgetExhausted {
		t.Fatalf("fresh n at 1.2 s: admitted %v (%q), want refused: x is due and on its way", ok, why)
	}
	if tn := sec(1.2).Add(wn); tn.Before(t0.Add(2005 * time.Millisecond)) {
		t.Errorf("n told %v, want no sooner than x's grace ends (2.005 s)", tn.Sub(t0))
	}
	if ok, w, why := r.Admit(destA, l, "b", "b/x", false, sec(1.5)); !ok {
		t.Fatalf("x refused at 1.5 s after n asked: %v %q", w, why)
	}
}

// A late reservation keeps its place for lateKeep from the first time it went late, however often it comes back
// (revive) and misses its time again: a key that never uses its place loses it. Before, each lateness kept it
// 30 s more, so a key could hold the head of the queue indefinitely without being admitted.
func TestALatePlaceIsKeptFromTheFirstLateness(t *testing.T) {
	q := newFairQueue()
	q.push("a", "a/x", sec(1))
	q.push("b", "b/y", sec(100))
	q.expire(sec(2)) // a/x late since 2 s
	if q.get("a/x") != nil || q.late["a/x"] == nil {
		t.Fatal("a/x not late at 2 s")
	}
	for _, at := range []float64{10, 20, 29} { // it comes back, is told a time, and misses it again
		if e := q.revive("a/x", sec(at+0.5)); e == nil {
			t.Fatalf("a/x lost its place at %v s, within 30 s of its first lateness", at)
		}
		if first := q.first(1); len(first) != 1 || first[0].key != "a/x" {
			t.Fatalf("a/x revived at %v s is not first", at)
		}
		q.expire(sec(at + 1))
	}
	if q.late["a/x"] == nil {
		t.Fatal("a/x dropped before 32 s")
	}
	q.expire(sec(33)) // sweeps the late ones whose place is spent
	if q.revive("a/x", sec(40)) != nil {
		t.Fatal("a/x took its place again 31 s after it first went late")
	}
	if first := q.first(1); len(first) != 1 || first[0].key != "b/y" {
		t.Fatalf("first is %v, want b/y", first)
	}
}
