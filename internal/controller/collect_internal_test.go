package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// With a rate of 0, a collection found by a reconcile dequeued at any priority is handed to CollectPriority
// first, and done only by the next reconcile (armed); one reconcile for another reason in between takes the turn
// back.
func TestCollectorHandsCollectionToCollectPriority(t *testing.T) {
	c := newCollector(16, 0)
	nn := types.NamespacedName{Namespace: "shop", Name: "invoice"}
	_, res, ok := c.turn(nn, c.take(nn))
	if ok || res.Priority == nil || *res.Priority != CollectPriority || res.RequeueAfter <= 0 {
		t.Fatalf("first turn: ok %v, result %+v; want a requeue at CollectPriority", ok, res)
	}
	release, _, ok := c.turn(nn, c.take(nn))
	if !ok {
		t.Fatal("the reconcile dequeued at CollectPriority did not get its turn")
	}
	release()
	if c.take(nn) {
		t.Error("the turn stayed armed after it was used")
	}
}

// The rate lets its burst of collections go at once (in line with the sends), then hands the rest to
// CollectPriority.
func TestCollectorLetsItsRateGoInLine(t *testing.T) {
	c := newCollector(1000, 3)
	now, deferred := 0, 0
	for i := range 10 {
		nn := types.NamespacedName{Namespace: "shop", Name: string(rune('a' + i))}
		release, _, ok := c.turn(nn, c.take(nn))
		if ok {
			now++
			release()
		} else {
			deferred++
		}
	}
	if now != 3 || deferred != 7 {
		t.Errorf("%d collections at once and %d deferred, want the burst of 3 and 7", now, deferred)
	}
}

// At most a quarter of the workers collect at once: a turn beyond it waits at CollectPriority.
func TestCollectorBoundsCollectionsAtOnce(t *testing.T) {
	c := newCollector(8, 0)
	var releases []func()
	for i := range 3 {
		nn := types.NamespacedName{Namespace: "shop", Name: string(rune('a' + i))}
		c.arm(nn)
		release, res, ok := c.turn(nn, c.take(nn))
		if i < 2 && !ok {
			t.Fatalf("turn %d refused with 2 slots of 8 workers", i)
		}
		if i == 2 {
			if ok || *res.Priority != CollectPriority || !c.take(nn) {
				t.Fatalf("third turn at once: ok %v, result %+v; want a requeue at CollectPriority, armed", ok, res)
			}
			break
		}
		releases = append(releases, release)
	}
	for _, r := range releases {
		r()
	}
}

// The workqueue controller-runtime gives the controller (its priority queue) hands out a send queued after a
// backlog of collections at CollectPriority before any of them: the order the controller relies on.
func TestCollectPriorityQueuesBehindSends(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("collect-order")
	defer q.ShutDown()
	p := CollectPriority
	for i := range 50 {
		q.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: string(rune('A' + i))}})
	}
	send := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: "new"}}
	q.Add(send)
	got, priority, _ := q.GetWithPriority()
	if got != send || priority != 0 {
		t.Errorf("first out: %v at priority %d, want the send %v at 0", got, priority, send)
	}
}
