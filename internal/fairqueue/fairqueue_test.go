package fairqueue

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actionledger/actionledger/internal/metrics"
)

func req(ns string, i int) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("%s-%d", ns, i)}}
}

func newQueue(t *testing.T, share int) *Queue {
	t.Helper()
	q := NewQueue(Shares{share, share, share})(t.Name(), nil).(*Queue)
	t.Cleanup(q.ShutDown)
	return q
}

// get takes the next request, failing the test instead of blocking when there is none.
func get(t *testing.T, q *Queue) reconcile.Request {
	t.Helper()
	it, ok := tryGet(q, 5*time.Second)
	if !ok {
		t.Fatal("no request to get")
	}
	return it
}

// pending holds, per queue, the GetWithPriority a tryGet left waiting, so that the request it gets later is
// the next one taken rather than lost.
var (
	pendingMu sync.Mutex
	pending   = map[*Queue]chan reconcile.Request{}
)

// tryGet takes the next request if one is handed out within d.
func tryGet(q *Queue, d time.Duration) (reconcile.Request, bool) {
	pendingMu.Lock()
	got, ok := pending[q]
	if !ok {
		got = make(chan reconcile.Request, 1)
		go func() {
			if it, _, shut := q.GetWithPriority(); !shut {
				got <- it
			}
		}()
	}
	delete(pending, q)
	pendingMu.Unlock()
	select {
	case it := <-got:
		return it, true
	case <-time.After(d):
		pendingMu.Lock()
		pending[q] = got
		pendingMu.Unlock()
		return reconcile.Request{}, false
	}
}

// A namespace whose burst fills the workers leaves nothing of it ahead of another namespace's new request; the
// burst goes on, in its order, as its requests are done.
func TestABurstDoesNotStandAheadOfAnotherNamespace(t *testing.T) {
	q := newQueue(t, 2)
	for i := range 100 {
		q.Add(req("team-a", i))
	}
	if n := q.Len(); n != 100 {
		t.Fatalf("Len %d, want 100 (2 admitted, 98 held)", n)
	}
	// Two workers take team-a's two admitted requests.
	a0, a1 := get(t, q), get(t, q)
	if a0 != req("team-a", 0) || a1 != req("team-a", 1) {
		t.Fatalf("first two: %v %v, want team-a-0 and team-a-1", a0, a1)
	}
	q.Add(req("team-b", 0))
	if got := get(t, q); got != req("team-b", 0) {
		t.Fatalf("next after team-b's add: %v, want team-b-0 ahead of team-a's 98 held", got)
	}
	q.Done(req("team-b", 0))
	q.Done(a0)
	if got := get(t, q); got != req("team-a", 2) {
		t.Fatalf("after team-a-0 is done: %v, want team-a-2, the next held in order", got)
	}
}

// Held requests keep the priority queue's order within their namespace (higher priority first, then arrival),
// are deduplicated, and a delayed add, once due, is held behind them like any other add.
func TestBacklogOrderDedupAndDelays(t *testing.T) {
	q := newQueue(t, 1)
	low, high := -100, 5
	q.Add(req("ns", 0)) // admitted
	q.AddWithOpts(priorityqueue.AddOpts{Priority: &low}, req("ns", 1))
	q.Add(req("ns", 2))
	q.Add(req("ns", 2)) // the same request again: held once
	q.AddWithOpts(priorityqueue.AddOpts{Priority: &high}, req("ns", 3))
	q.AddWithOpts(priorityqueue.AddOpts{Priority: &high}, req("ns", 1)) // raised while held
	if n := q.Len(); n != 4 {
		t.Fatalf("Len %d, want 4 (1 admitted, 3 held)", n)
	}
	q.AddAfter(req("ns", 9), time.Millisecond) // delayed: held once due, the namespace's share being taken
	waitLen(t, q, 5, func() bool { return q.parkedLen() == 4 })
	var order []reconcile.Request
	for range 5 {
		it := get(t, q)
		order = append(order, it)
		q.Done(it)
	}
	want := []reconcile.Request{req("ns", 0), req("ns", 3), req("ns", 1), req("ns", 2), req("ns", 9)}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len %d after all done, want 0", n)
	}
}

// A namespace's safety nets and backoffs (delayed and rate-limited adds) count against its share: once due,
// they wait in its backlog, and another namespace's new request is the next one a worker takes. Before, they
// went straight to the shared queue and stood ahead of it.
func TestDelayedAndRateLimitedAddsAreCounted(t *testing.T) {
	q := newQueue(t, 2)
	for i := range 2 {
		q.Add(req("team-a", i))
	}
	a0, a1 := get(t, q), get(t, q) // team-a's share: both being reconciled
	for i := 2; i < 6; i++ {
		q.AddAfter(req("team-a", i), time.Millisecond)
	}
	for i := 6; i < 10; i++ {
		q.AddRateLimited(req("team-a", i)) // the default limiter's first backoff: 5 ms
	}
	waitLen(t, q, 8, func() bool { return q.parkedLen() == 8 })
	q.Add(req("team-b", 0))
	if got := get(t, q); got != req("team-b", 0) {
		t.Fatalf("next after team-b's add: %v, want team-b-0 ahead of team-a's 8 due requeues", got)
	}
	q.Done(a0)
	if got := get(t, q); got.Namespace != "team-a" {
		t.Fatalf("after team-a-0 is done: %v, want one of team-a's held requeues", got)
	}
	if it, ok := tryGet(q, 100*time.Millisecond); ok {
		t.Fatalf("%v handed out beyond team-a's share of 2 (team-a-1 and one requeue are being reconciled)", it)
	}
	_ = a1
}

// Of two delayed adds of one request the earlier wins; an add due now replaces a pending delayed one, so the
// request is reconciled once.
func TestDelayedAddsMerge(t *testing.T) {
	q := newQueue(t, 4)
	q.AddAfter(req("ns", 0), time.Hour)
	q.AddAfter(req("ns", 0), time.Millisecond)
	if got := get(t, q); got != req("ns", 0) {
		t.Fatalf("got %v, want ns-0 after 1 ms, not an hour", got)
	}
	q.Done(req("ns", 0))
	q.AddAfter(req("ns", 1), 20*time.Millisecond)
	q.Add(req("ns", 1))
	if got := get(t, q); got != req("ns", 1) {
		t.Fatalf("got %v, want ns-1", got)
	}
	q.Done(req("ns", 1))
	if it, ok := tryGet(q, 100*time.Millisecond); ok {
		t.Fatalf("%v handed out again: the pending delayed add should have been replaced by the add due now", it)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len %d, want 0", n)
	}
}

// A request added again while it is reconciled is reconciled again after its Done, behind the requests its
// namespace held before it, and never beside them beyond the share.
func TestARequestAddedAgainWhileReconciledWaitsItsTurn(t *testing.T) {
	q := newQueue(t, 1)
	q.Add(req("ns", 0))
	it := get(t, q)
	q.Add(req("ns", 0)) // while it is reconciled
	q.Add(req("ns", 1)) // held: the namespace's one share is taken
	q.Done(it)
	if got := get(t, q); got != req("ns", 1) {
		t.Fatalf("after Done: %v, want ns-1, held before ns-0 was added again", got)
	}
	if extra, ok := tryGet(q, 100*time.Millisecond); ok {
		t.Fatalf("%v handed out beside ns-1 beyond the share of 1", extra)
	}
	q.Done(req("ns", 1))
	if got := get(t, q); got != req("ns", 0) {
		t.Fatalf("after ns-1 is done: %v, want ns-0 again", got)
	}
	q.Done(req("ns", 0))
	if n := q.Len(); n != 0 {
		t.Fatalf("Len %d, want 0", n)
	}
}

// waitLen waits until cond holds (the queue's timers have fired), then checks Len.
func waitLen(t *testing.T, q *Queue, want int, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timers not fired in 5 s (Len %d)", q.Len())
		}
		time.Sleep(time.Millisecond)
	}
	if n := q.Len(); n != want {
		t.Fatalf("Len %d, want %d", n, want)
	}
}

func (q *Queue) parkedLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.parked
}

// A delayed add of a request already added again while it is reconciled is merged into that add, as the
// priority queue merges them: the request is reconciled once more, not once more and again at the delay.
func TestADelayedAddMergesWithAnAddDueNow(t *testing.T) {
	q := newQueue(t, 4)
	q.Add(req("ns", 0))
	it := get(t, q)
	q.Add(req("ns", 0))                        // while it is reconciled: due at its Done
	q.AddAfter(req("ns", 0), time.Millisecond) // merged into the add above
	q.Done(it)
	if got := get(t, q); got != req("ns", 0) {
		t.Fatalf("got %v, want ns-0 again", got)
	}
	q.Done(req("ns", 0))
	if extra, ok := tryGet(q, 100*time.Millisecond); ok {
		t.Fatalf("%v handed out a third time: the delayed add should have been merged", extra)
	}
}

// Delayed adds of many requests, added in any order, come due in the order of their times, on one timer.
func TestDelayedAddsComeDueInTimeOrder(t *testing.T) {
	q := newQueue(t, 16)
	for i := 9; i >= 0; i-- {
		q.AddAfter(req("ns", i), time.Duration(i+1)*20*time.Millisecond)
	}
	q.AddAfter(req("ns", 5), time.Hour) // later than its pending add: that one stands
	if n := q.Len(); n != 10 {
		t.Fatalf("Len %d, want 10 delayed", n)
	}
	for i := range 10 {
		if got := get(t, q); got != req("ns", i) {
			t.Fatalf("due #%d: %v, want ns-%d", i, got, i)
		}
	}
}

// While another namespace has requests, a namespace holds at most its contended share of the workers; alone it
// keeps its whole share, and it gets that back once the others have been quiet for the window.
func TestANamespaceHoldsItsContendedShareWhileAnotherHasRequests(t *testing.T) {
	q := NewQueue(Shares{4, 2, 2})(t.Name(), nil).(*Queue)
	t.Cleanup(q.ShutDown)
	var mu sync.Mutex
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	q.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	for i := range 10 {
		q.Add(req("team-a", i))
	}
	var a []reconcile.Request
	for range 4 { // alone: its whole share, 4
		a = append(a, get(t, q))
	}
	if it, ok := tryGet(q, 50*time.Millisecond); ok {
		t.Fatalf("a fifth of team-a's requests was handed out (%v) beyond its share of 4", it)
	}
	q.Add(req("team-b", 0))
	if b := get(t, q); b != req("team-b", 0) {
		t.Fatalf("got %v; want team-b-0, the next request a worker takes", b)
	}
	// team-b has requests: team-a's share is 2, and it holds 4. Two of them done admit nothing.
	q.Done(a[0])
	q.Done(a[1])
	if it, ok := tryGet(q, 50*time.Millisecond); ok {
		t.Fatalf("%v was handed out with team-a at its contended share of 2", it)
	}
	q.Done(a[2]) // down to 1: one more
	if it := get(t, q); it != req("team-a", 4) {
		t.Fatalf("got %v; want team-a-4", it)
	}
	if it, ok := tryGet(q, 50*time.Millisecond); ok {
		t.Fatalf("%v was handed out with team-a at its contended share of 2", it)
	}
	mu.Lock()
	now = now.Add(2 * time.Second) // team-b quiet for longer than the window
	mu.Unlock()
	q.Done(a[3]) // down to 1, share 4 again: three admitted at once
	for want := 5; want <= 7; want++ {
		if it := get(t, q); it != req("team-a", want) {
			t.Fatalf("got %v; want team-a-%d", it, want)
		}
	}
	if it, ok := tryGet(q, 50*time.Millisecond); ok {
		t.Fatalf("%v was handed out beyond team-a's share of 4", it)
	}
}

// Which namespace dominates: the one over the floor and over DominanceFactor times every other namespace with
// requests, never one whose usage grew while another's stays at least half of it (a quiet tenant whose
// reconciles slowed down beside a busy one), and none with a single namespace active; one held stays held while
// it keeps the highest usage, and is released once another overtakes it or no other has requests.
func TestUsagesDominant(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		busy   map[string]float64
		quiet  []string // entries with no requests
		was    string   // the dominant namespace before
		want   string
		remain int // entries left after the scan
	}{
		{"one dominates", map[string]float64{"a": 3, "b": 1}, nil, "", "a", 2},
		{"not twice the other", map[string]float64{"a": 3, "b": 1.6}, nil, "", "", 2},
		{"under the floor", map[string]float64{"a": 0.4, "b": 0.1}, nil, "", "", 2},
		{"a third close behind", map[string]float64{"a": 3, "b": 1, "c": 2}, nil, "", "", 3},
		{"the other has no requests", map[string]float64{"a": 3, "b": 0.1}, []string{"b"}, "", "", 2},
		{"a slowed quiet tenant beside a busy one", map[string]float64{"a": 4, "b": 2.5}, nil, "", "", 2},
		{"a new tenant with no usage yet", map[string]float64{"a": 3, "b": 0}, nil, "", "a", 2},
		{"a forgotten entry", map[string]float64{"a": 3, "b": 1, "gone": 0}, []string{"gone"}, "", "a", 2},
		{"held, still the top", map[string]float64{"a": 0.3, "b": 0.2}, nil, "a", "a", 2},
		{"held, overtaken", map[string]float64{"a": 0.3, "b": 0.4}, nil, "a", "", 2},
		{"held, overtaken by twice", map[string]float64{"a": 0.3, "b": 0.7}, nil, "a", "b", 2},
		{"held, the other gone quiet", map[string]float64{"a": 0.3, "b": 0.2}, []string{"b"}, "a", "", 2},
		{"the quiet tenant never takes the turn of a busier one", map[string]float64{"a": 2, "b": 1.5}, nil, "b", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			us := usages{dom: tc.was}
			for ns, v := range tc.busy {
				u := us.of(ns)
				u.busy, u.at, u.added = v, now, now
				if slices.Contains(tc.quiet, ns) {
					u.added = now.Add(-time.Minute)
				}
			}
			active := func(_ string, u *usage) bool { return now.Sub(u.added) < time.Second }
			// peek (the metrics' read) finds the same and changes nothing: no entry forgotten, nothing cached.
			if got := us.peek(now, active); got != tc.want || len(us.by) != len(tc.busy) || us.dom != tc.was || !us.domAt.IsZero() {
				t.Errorf("peek = %q with %d entries, %q cached at %v; want %q, %d, %q unset", got, len(us.by), us.dom,
					us.domAt, tc.want, len(tc.busy), tc.was)
			}
			if got := us.dominant(now, active); got != tc.want {
				t.Errorf("dominant = %q; want %q", got, tc.want)
			}
			if len(us.by) != tc.remain {
				t.Errorf("%d entries left; want %d", len(us.by), tc.remain)
			}
		})
	}
}

// A namespace whose reconciles took most of the workers' time is held to its dominant share while another
// namespace has requests, the other keeping its contended share; once its usage has decayed it gets its
// contended share back.
func TestTheDominantNamespaceHoldsItsDominantShare(t *testing.T) {
	q := NewQueue(Shares{Alone: 8, Contended: 4, Dominant: 2})(t.Name(), nil).(*Queue)
	shutDown := sync.OnceFunc(q.ShutDown)
	t.Cleanup(shutDown)
	var mu sync.Mutex
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	q.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	// taken hands out every request waiting in the shared queue, all of ns.
	taken := func(ns string) []reconcile.Request {
		t.Helper()
		var got []reconcile.Request
		for {
			it, ok := tryGet(q, 50*time.Millisecond)
			if !ok {
				return got
			}
			if it.Namespace != ns {
				t.Fatalf("got %v; want only %s's requests", it, ns)
			}
			got = append(got, it)
		}
	}
	for i := range 40 {
		q.Add(req("team-a", i))
	}
	// Alone, team-a keeps its 8 workers busy for a second, twice: about 2.9 busy workers over UsageWindow.
	for range 2 {
		held := taken("team-a")
		if len(held) != 8 {
			t.Fatalf("team-a alone had %d handed out; want its whole share, 8", len(held))
		}
		advance(time.Second)
		for _, it := range held {
			q.Done(it)
		}
	}
	held := taken("team-a")
	q.Add(req("team-a", 40)) // team-a is still asking
	for i := range 10 {
		q.Add(req("team-b", i))
	}
	got := taken("team-b")
	if len(got) != 4 {
		t.Fatalf("team-b had %d handed out; want its contended share, 4 (it does not dominate)", len(got))
	}
	if d, series := q.Dominant(), dominantSeries(t); d != "team-a" || !slices.Equal(series, []string{"team-a"}) {
		t.Fatalf("held now: %q, actionledger_reconciles_dominant series %v; want team-a and [team-a]", d, series)
	}
	for _, it := range held {
		q.Done(it)
	}
	held = taken("team-a")
	if len(held) != 2 {
		t.Fatalf("team-a had %d handed out once its 8 were done; want its dominant share, 2", len(held))
	}
	// team-b's requests all done and none added for the window: team-a is alone again, with its whole share.
	for b := len(got); ; b += len(got) {
		for _, it := range got {
			q.Done(it)
		}
		if b == 10 {
			break
		}
		if got = taken("team-b"); len(got) == 0 {
			t.Fatalf("team-b had %d of its 10 requests handed out, then none", b)
		}
	}
	advance(2 * time.Second)
	// Nothing was added since: the metric is computed at the scrape, so team-a is no longer held in it.
	if d, series := q.Dominant(), dominantSeries(t); d != "" || len(series) != 0 {
		t.Fatalf("team-b quiet for 2 s: held %q, actionledger_reconciles_dominant series %v; want none", d, series)
	}
	q.Done(held[0])
	if more := taken("team-a"); len(more) != 7 {
		t.Fatalf("team-a had %d more handed out once alone; want 7, up to its whole share of 8", len(more))
	}
	shutDown()
	if series := dominantSeries(t); len(series) != 0 {
		t.Fatalf("after ShutDown: actionledger_reconciles_dominant series %v; want none", series)
	}
}

// dominantSeries is the namespace label of each actionledger_reconciles_dominant series a scrape reads now, each
// checked to be 1.
func dominantSeries(t *testing.T) []string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.ReconcilesDominant)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if v := m.GetGauge().GetValue(); v != 1 {
				t.Errorf("%s %v = %v; want 1", mf.GetName(), m.GetLabel(), v)
			}
			for _, l := range m.GetLabel() {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

// A request handed to the shared queue again just as a worker took it (AddWithOpts re-adds a waiting request
// outside the lock) is handed out once more after its Done: that reconcile is counted in its namespace too.
func TestARequestHandedOutAgainIsCounted(t *testing.T) {
	q := NewQueue(Shares{1, 1, 1})(t.Name(), nil).(*Queue)
	t.Cleanup(q.ShutDown)
	k := req("ns", 0)
	q.Add(k)
	q.mu.Lock()
	got := make(chan reconcile.Request, 1)
	go func() { it, _, _ := q.GetWithPriority(); got <- it }()
	// A condition wait: the worker has it from the shared queue, not yet counted as taken (it waits for the lock
	// this test holds), which only the shared queue's Len shows.
	for deadline := time.Now().Add(5 * time.Second); q.PriorityQueue.Len() != 0; {
		if time.Now().After(deadline) {
			q.mu.Unlock() // the cleanup's ShutDown takes it
			t.Fatal("the worker did not take the request from the shared queue in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	if !q.add(k, 0) { // AddWithOpts's steps, in the window before GetWithPriority takes the lock
		t.Fatal("a request waiting in the shared queue is handed to it again")
	}
	q.mu.Unlock()
	p := 0
	q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, k)
	<-got
	q.Done(k) // the shared queue hands k out again
	q.Add(req("ns", 1))
	a, b := get(t, q), get(t, q)
	q.mu.Lock()
	n := q.perNS["ns"]
	q.mu.Unlock()
	if n != 2 {
		t.Fatalf("%v and %v being reconciled, %d counted; want 2", a, b, n)
	}
	q.Done(a)
	q.Done(b)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.perNS["ns"] != 0 || len(q.admitted) != 0 {
		t.Fatalf("after both are done: %d counted, %d admitted; want 0 and 0", q.perNS["ns"], len(q.admitted))
	}
}
