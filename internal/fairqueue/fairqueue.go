// Package fairqueue gives each namespace a fair share of a controller's reconcile workers: the ExternalAction
// controller's workqueue, shared by every tenant, served as API Priority and Fairness serves a priority level's
// flows (k8s.io/apiserver pkg/util/flowcontrol, KEP-1040), with namespaces as the flows.
//
// It wraps controller-runtime's priority queue (sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue),
// which keeps its order (priority, then first in, first out), its deduplication, its delays, its rate limiting
// and its metrics. What it adds is a bound per namespace: at most Share requests of one namespace are admitted
// into the shared queue at once, counting those waiting there and those a worker is reconciling. A request
// added for a namespace at its share waits in that namespace's own backlog (deduplicated, in priority then
// arrival order) and is admitted when one of the namespace's admitted requests is done.
//
// With Share equal to the number of workers, a namespace alone still keeps every worker busy, and a namespace
// whose burst fills the workers has nothing left waiting ahead of another namespace's new request: that request
// is the next one a worker takes. Before this, one tenant's burst (128 stalled sends timing out at once, each a
// reconcile that writes its outcome) stood in front of every other tenant's new action: 162 requests deep and
// up to a second of waiting in the noisy-neighbour benchmark (docs/benchmarks.md).
//
// Delayed adds (a reconcile's RequeueAfter) and rate-limited ones (a reconcile's error) go straight to the
// shared queue without counting: the queue merges each with the same request already there (the earliest time
// wins), which a second timer here would turn into extra reconciles. They are the safety nets and backoffs of a
// namespace's own requests, spread in time by their delays.
package fairqueue

import (
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actionledger/actionledger/internal/metrics"
)

// Queue is a priorityqueue.PriorityQueue of reconcile requests fair over namespaces (the package doc).
type Queue struct {
	priorityqueue.PriorityQueue[reconcile.Request]

	share int

	mu       sync.Mutex
	admitted map[reconcile.Request]struct{} // counted: in the shared queue or being reconciled
	perNS    map[string]int                 // admitted requests per namespace
	backlogs map[string]*backlog            // per namespace, requests waiting for their share
	parked   int                            // requests in all backlogs
}

// backlog is one namespace's requests waiting for its share: each request's priority, and for each priority
// the requests in arrival order (an entry whose request has since been admitted or raised to another priority
// is stale and skipped).
type backlog struct {
	prio  map[reconcile.Request]int
	order map[int][]reconcile.Request
}

// New wraps inner so that at most share (at least 1) requests of one namespace are admitted into it at once.
func New(inner priorityqueue.PriorityQueue[reconcile.Request], share int) *Queue {
	return &Queue{PriorityQueue: inner, share: max(share, 1), admitted: map[reconcile.Request]struct{}{},
		perNS: map[string]int{}, backlogs: map[string]*backlog{}}
}

// NewQueue is a controller's NewQueue option (sigs.k8s.io/controller-runtime/pkg/controller.Options): the
// priority queue controller-runtime builds by default, with its name, rate limiter and opts, made fair over
// namespaces with share requests each.
func NewQueue(share int, opts ...priorityqueue.Opt[reconcile.Request]) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		all := append([]priorityqueue.Opt[reconcile.Request]{func(o *priorityqueue.Opts[reconcile.Request]) {
			o.RateLimiter = rl
		}}, opts...)
		return New(priorityqueue.New(name, all...), share)
	}
}

// Add adds item now, at priority 0. AddAfter and AddRateLimited are the shared queue's own: delayed, uncounted
// (the package doc).
func (q *Queue) Add(item reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

// AddWithOpts adds items as the priority queue does, each admitted now if its namespace is under its share
// (or the request is admitted already), else held in its namespace's backlog at the higher of its priorities.
func (q *Queue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.After > 0 || o.RateLimited {
		q.PriorityQueue.AddWithOpts(o, items...)
		return
	}
	p := 0
	if o.Priority != nil {
		p = *o.Priority
	}
	var now []reconcile.Request
	q.mu.Lock()
	for _, it := range items {
		if q.admit(it) {
			now = append(now, it)
		} else {
			q.park(it, p)
		}
	}
	q.mu.Unlock()
	if len(now) > 0 {
		q.PriorityQueue.AddWithOpts(o, now...)
	}
}

// admit reports whether it goes into the shared queue now, counting it if it was not admitted yet. Locked.
func (q *Queue) admit(it reconcile.Request) bool {
	if _, ok := q.admitted[it]; ok {
		return true
	}
	if q.perNS[it.Namespace] >= q.share {
		return false
	}
	q.admitted[it] = struct{}{}
	q.perNS[it.Namespace]++
	return true
}

// park holds it in its namespace's backlog at priority p, or raises it there to p. Locked.
func (q *Queue) park(it reconcile.Request, p int) {
	b := q.backlogs[it.Namespace]
	if b == nil {
		b = &backlog{prio: map[reconcile.Request]int{}, order: map[int][]reconcile.Request{}}
		q.backlogs[it.Namespace] = b
	}
	old, ok := b.prio[it]
	if ok && old >= p {
		return
	}
	if !ok {
		q.parked++
		metrics.ReconcilesParked.Inc()
	}
	b.prio[it] = p
	b.order[p] = append(b.order[p], it)
}

// Done marks item as reconciled; when it was admitted, its namespace's next held request (highest priority,
// then first held) is admitted.
func (q *Queue) Done(item reconcile.Request) {
	q.PriorityQueue.Done(item)
	q.mu.Lock()
	if _, ok := q.admitted[item]; !ok {
		q.mu.Unlock()
		return
	}
	delete(q.admitted, item)
	ns := item.Namespace
	if q.perNS[ns]--; q.perNS[ns] <= 0 {
		delete(q.perNS, ns)
	}
	next, p, ok := q.unpark(ns)
	if ok {
		q.admitted[next] = struct{}{}
		q.perNS[ns]++
	}
	q.mu.Unlock()
	if ok {
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, next)
	}
}

// unpark takes ns's next held request: the first held at the highest priority. Locked.
func (q *Queue) unpark(ns string) (reconcile.Request, int, bool) {
	b := q.backlogs[ns]
	for b != nil && len(b.prio) > 0 {
		top, found := 0, false
		for p, l := range b.order {
			if len(l) > 0 && (!found || p > top) {
				top, found = p, true
			}
		}
		if !found {
			break
		}
		l := b.order[top]
		it := l[0]
		if len(l) == 1 {
			delete(b.order, top)
		} else {
			b.order[top] = l[1:]
		}
		if p, ok := b.prio[it]; !ok || p != top {
			continue // stale: raised to another priority since
		}
		delete(b.prio, it)
		if len(b.prio) == 0 {
			delete(q.backlogs, ns)
		}
		q.parked--
		metrics.ReconcilesParked.Dec()
		return it, top, true
	}
	delete(q.backlogs, ns)
	var zero reconcile.Request
	return zero, 0, false
}

// Len is the number of requests in the shared queue and in the backlogs.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.PriorityQueue.Len() + q.parked
}

// ShutDown drops the backlogs and shuts the shared queue down.
func (q *Queue) ShutDown() {
	q.drop()
	q.PriorityQueue.ShutDown()
}

// ShutDownWithDrain drops the backlogs and shuts the shared queue down once its admitted requests are done.
func (q *Queue) ShutDownWithDrain() {
	q.drop()
	q.PriorityQueue.ShutDownWithDrain()
}

func (q *Queue) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	metrics.ReconcilesParked.Sub(float64(q.parked))
	q.parked = 0
	clear(q.backlogs)
}
