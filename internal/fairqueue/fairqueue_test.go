package fairqueue

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func req(ns string, i int) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("%s-%d", ns, i)}}
}

func newQueue(t *testing.T, share int) *Queue {
	t.Helper()
	q := NewQueue(share, share)(t.Name(), nil).(*Queue)
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
	q := NewQueue(4, 2)(t.Name(), nil).(*Queue)
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
