package fairqueue

import (
	"fmt"
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
	q := NewQueue(share)(t.Name(), nil).(*Queue)
	t.Cleanup(q.ShutDown)
	return q
}

// get takes the next request, failing the test instead of blocking when there is none.
func get(t *testing.T, q *Queue) reconcile.Request {
	t.Helper()
	got := make(chan reconcile.Request, 1)
	go func() {
		it, _, _ := q.GetWithPriority()
		got <- it
	}()
	select {
	case it := <-got:
		return it
	case <-time.After(5 * time.Second):
		t.Fatal("no request to get")
		return reconcile.Request{}
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
// are deduplicated, and a delayed add is not held.
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
	q.AddAfter(req("ns", 9), time.Millisecond) // delayed: straight to the shared queue
	var order []reconcile.Request
	delayed := false
	for range 5 {
		it := get(t, q)
		if it == req("ns", 9) {
			delayed = true
		} else {
			order = append(order, it)
		}
		q.Done(it)
	}
	want := []reconcile.Request{req("ns", 0), req("ns", 3), req("ns", 1), req("ns", 2)}
	if fmt.Sprint(order) != fmt.Sprint(want) || !delayed {
		t.Fatalf("order %v (the delayed ns-9 seen: %t), want %v and ns-9", order, delayed, want)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("Len %d after all done, want 0", n)
	}
}

// A request added again while it is admitted (waiting or being reconciled) is not held behind its own
// namespace's share: the shared queue merges it, as before.
func TestAnAdmittedRequestAddedAgainIsMerged(t *testing.T) {
	q := newQueue(t, 1)
	q.Add(req("ns", 0))
	it := get(t, q)
	q.Add(req("ns", 0)) // while it is reconciled: the priority queue requeues it after Done
	q.Add(req("ns", 1)) // held: the namespace's one share is taken
	q.Done(it)
	first, second := get(t, q), get(t, q)
	got := map[reconcile.Request]bool{first: true, second: true}
	if !got[req("ns", 0)] || !got[req("ns", 1)] {
		t.Fatalf("after Done: %v and %v, want ns-0 again and ns-1", first, second)
	}
}
