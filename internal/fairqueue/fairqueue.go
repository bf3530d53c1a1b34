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
// Every add is counted, whatever its form. A delayed add (a reconcile's RequeueAfter: the safety nets of waits)
// and a rate-limited one (a reconcile's error, its backoff from the controller's rate limiter) wait here until due
// (one entry per request, the earlier of two adds winning, as the priority queue merges them; one timer for all),
// and are then admitted like any other add. A request added again while a worker reconciles it is held here
// too, and at its Done it goes to the back of its namespace's backlog: it is admitted again after the requests
// that waited before it.
// While another namespace has had a request added within the last second (internal/contention), a namespace's
// share is the smaller contended one (the manager's --contended-reconciles, by default half its workers), and a
// namespace alone still has them all. The contended share applies to every namespace while others have
// requests, the quiet tenant's too, so it cannot be small: at 2 (of 16) it paced a busy tenant's bursts enough to
// meet the noisy-neighbour goal in the envtest benchmark, but on the real cluster, where a reconcile beside the
// busy tenant took 44 ms on average, it held the quiet tenant itself to 2 workers (12.97x; docs/benchmarks.md).
// The small share goes to one namespace only, the dominant one (Shares.Dominant, --dominant-reconciles, by
// default an eighth of the workers): the one whose reconciles took more than twice the worker time of every other
// namespace with requests (and more than half a worker), averaged over UsageWindow, a reconcile counting when it
// ends. It stays held while it keeps
// the highest usage, between its bursts too; while held its usage falls, so another namespace that overtakes it
// ends its turn. A quiet namespace whose reconciles slow down is not held beside a busier one (its usage must
// pass twice the busier one's first), and two namespaces equally busy hold each other to the contended share only,
// as before. This is usage-based fair sharing (as fair queuing in API Priority and Fairness serves first the
// flow that has used the least): the cores the manager and the API server share are what a burst spends, and
// the workers are the lever the manager holds.
// So at most Share requests of one namespace are handed to workers at once, whatever the namespace's requests
// were added by, and a namespace's own safety nets never stand ahead of another namespace's new request. Before
// this, delayed adds went straight to the shared queue: in the noisy-neighbour benchmark one tenant had about
// 100 reconciles a second outside its share (docs/benchmarks.md).
package fairqueue

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/actionledger/actionledger/internal/contention"
	"github.com/actionledger/actionledger/internal/metrics"
)

// Queue is a priorityqueue.PriorityQueue of reconcile requests fair over namespaces (the package doc).
type Queue struct {
	priorityqueue.PriorityQueue[reconcile.Request]

	shares Shares
	rl     workqueue.TypedRateLimiter[reconcile.Request] // the backoff of rate-limited adds

	mu       sync.Mutex
	admitted map[reconcile.Request]time.Time // counted (in the shared queue or being reconciled): since when a worker has it (zero: waiting)
	again    map[reconcile.Request]int       // added again while being reconciled: its priority
	perNS    map[string]int                  // admitted requests per namespace
	backlogs map[string]*backlog             // per namespace, requests waiting for their share
	parked   int                             // requests in all backlogs
	delays   delays                          // delayed and rate-limited adds not yet due
	timer    *time.Timer                     // set to the earliest of them
	recent   contention.Recent               // the latest adds, to tell whether another namespace has requests
	usage    usages                          // each namespace's recent worker time, to tell which one dominates
	now      func() time.Time                // the clock of recent (tests set it)
	shut     bool
	// unregister takes the queue out of actionledger_reconciles_dominant (metrics.ReconcilesDominant) at shutdown.
	unregister func()
}

// backlog is one namespace's requests waiting for its share: each request's priority, and for each priority
// the requests in arrival order (an entry whose request has since been admitted or raised to another priority
// is stale and skipped).
type backlog struct {
	prio  map[reconcile.Request]int
	order map[int][]reconcile.Request
}

// Shares are how many requests of one namespace may be admitted at once (waiting in the shared queue or being
// reconciled), a number of workers each.
type Shares struct {
	// Alone is the share while no other namespace has requests: at least 1, normally every worker.
	Alone int
	// Contended is the share while another namespace's requests were added within contention.DefaultWindow:
	// 1 to Alone.
	Contended int
	// Dominant is the share, while contended, of the dominant namespace: the one whose reconciles took more than
	// DominanceFloor workers on average over the last UsageWindow, and more than DominanceFactor times the worker
	// time of every other namespace with requests. 1 to Contended; Contended means no namespace is held harder.
	Dominant int
}

// clamped is s with each share in its range (Shares).
func (s Shares) clamped() Shares {
	s.Alone = max(s.Alone, 1)
	s.Contended = min(max(s.Contended, 1), s.Alone)
	s.Dominant = min(max(s.Dominant, 1), s.Contended)
	return s
}

// New wraps inner so that at most shares.Alone requests of one namespace are admitted into it at once, at most
// shares.Contended while another namespace's requests were added within the last contention.DefaultWindow, and
// at most shares.Dominant while, in addition, the namespace dominates the workers' recent time (Shares): a
// namespace alone keeps every worker busy, while others have requests too it holds at most Contended of them,
// and one that has been taking more than twice the worker time of every other is held to Dominant, the rest
// free for the others' next requests. Each share is clamped to its range. rl gives the backoff of rate-limited
// adds; it must be the rate limiter inner was built with, which keeps their failure counts (Forget and
// NumRequeues are inner's). A nil rl is client-go's default controller rate limiter.
func New(inner priorityqueue.PriorityQueue[reconcile.Request], rl workqueue.TypedRateLimiter[reconcile.Request],
	shares Shares) *Queue {
	if rl == nil {
		rl = workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()
	}
	q := &Queue{PriorityQueue: inner, shares: shares.clamped(), rl: rl, now: time.Now,
		admitted: map[reconcile.Request]time.Time{}, again: map[reconcile.Request]int{}, perNS: map[string]int{},
		backlogs: map[string]*backlog{}, delays: newDelays()}
	q.unregister = metrics.ReconcilesDominant.Source(q.Dominant)
	return q
}

// NewQueue is a controller's NewQueue option (sigs.k8s.io/controller-runtime/pkg/controller.Options): the
// priority queue controller-runtime builds by default, with its name, rate limiter and opts, made fair over
// namespaces with the given shares (New).
func NewQueue(shares Shares, opts ...priorityqueue.Opt[reconcile.Request]) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		if rl == nil {
			rl = workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()
		}
		all := append([]priorityqueue.Opt[reconcile.Request]{func(o *priorityqueue.Opts[reconcile.Request]) {
			o.RateLimiter = rl
		}}, opts...)
		return New(priorityqueue.New(name, all...), rl, shares)
	}
}

// Add adds item now, at priority 0.
func (q *Queue) Add(item reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

// AddAfter adds item once after has passed (a duration; at most 0 is now), at priority 0.
func (q *Queue) AddAfter(item reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

// AddRateLimited adds item after the rate limiter's backoff for it, at priority 0.
func (q *Queue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

// AddWithOpts adds items as the priority queue does: after o.After, or the rate limiter's backoff when
// o.RateLimited (the shorter of the two when both are given), at o.Priority. A request due now is admitted if
// its namespace is under its share, else held in its namespace's backlog at the higher of its priorities; a
// request not due yet waits for its time on the queue's timer and is added so then.
func (q *Queue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	p := 0
	if o.Priority != nil {
		p = *o.Priority
	}
	var now []reconcile.Request
	q.mu.Lock()
	if q.shut {
		q.mu.Unlock()
		return
	}
	for _, it := range items {
		after := o.After
		if o.RateLimited {
			if rl := q.rl.When(it); after <= 0 || rl < after {
				after = rl
			}
		}
		if after > 0 {
			q.later(it, p, after)
		} else if q.add(it, p) {
			now = append(now, it)
		}
	}
	q.mu.Unlock()
	if len(now) > 0 {
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, now...)
	}
}

// add adds it now at priority p and reports whether it goes into the shared queue now: admitted (and counted)
// if it was not, or merged with itself there. A request being reconciled is held until its Done; one over its
// namespace's share waits in the backlog. Its pending delayed add, if any, is dropped: it is due now. Locked.
func (q *Queue) add(it reconcile.Request, p int) bool {
	if d := q.delays.get(it); d != nil {
		p = max(p, d.prio)
		q.delays.drop(it)
	}
	if at, ok := q.admitted[it]; ok {
		if at.IsZero() {
			return true
		}
		if old, ok := q.again[it]; !ok || p > old {
			q.again[it] = p
		}
		return false
	}
	now := q.now()
	q.recent.Mark(it.Namespace, now)
	q.usage.of(it.Namespace).added = now
	if q.perNS[it.Namespace] >= q.shareOf(it.Namespace, now) {
		q.park(it, p)
		return false
	}
	q.admitted[it] = time.Time{}
	q.perNS[it.Namespace]++
	return true
}

// later adds it at priority p once after has passed, unless it is added sooner: a request waiting in the
// shared queue or in its backlog, or added again while being reconciled, is due already (a higher p raises it
// there), and of two delayed adds of one request the earlier wins, at the higher priority. Locked.
func (q *Queue) later(it reconcile.Request, p int, after time.Duration) {
	if at, ok := q.admitted[it]; ok {
		if at.IsZero() {
			q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, it) // raises its priority, if higher
			return
		}
		if old, ok := q.again[it]; ok {
			q.again[it] = max(old, p)
			return
		}
	}
	if b := q.backlogs[it.Namespace]; b != nil {
		if _, ok := b.prio[it]; ok {
			q.park(it, p)
			return
		}
	}
	at := time.Now().Add(after)
	if d := q.delays.get(it); d != nil {
		if !at.Before(d.at) {
			d.prio = max(d.prio, p)
			return
		}
		p = max(p, d.prio)
	}
	if q.delays.put(it, at, p) {
		q.wake(after)
	}
}

// wake sets the timer to fire after d (a duration), when the earliest delayed add is due. Locked.
func (q *Queue) wake(d time.Duration) {
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.fire)
		return
	}
	q.timer.Reset(d)
}

// fire adds every delayed add now due, at its priority, and sets the timer to the next. The shared queue gets
// those it admits as delayed adds of 1 ns, so that its retries metric (workqueue_retries_total) still counts
// them. A fire with nothing due (the earliest was dropped or replaced) only sets the timer again.
func (q *Queue) fire() {
	q.mu.Lock()
	if q.shut {
		q.mu.Unlock()
		return
	}
	due, next := q.delays.due(time.Now())
	if next > 0 {
		q.wake(next)
	}
	var now []*delay
	for _, d := range due {
		if q.add(d.it, d.prio) {
			now = append(now, d)
		}
	}
	q.mu.Unlock()
	for _, d := range now {
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{After: time.Nanosecond, Priority: &d.prio}, d.it)
	}
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

// GetWithPriority takes the next request and its priority from the shared queue, as the priority queue does, and
// notes when a worker took it.
func (q *Queue) GetWithPriority() (reconcile.Request, int, bool) {
	it, p, shutdown := q.PriorityQueue.GetWithPriority()
	if shutdown {
		return it, p, shutdown
	}
	q.mu.Lock()
	if _, ok := q.admitted[it]; !ok {
		// Added again (AddWithOpts hands a waiting request to the shared queue again, outside the lock) just as a
		// worker took it: the shared queue hands it out once more after its Done. Counted like any other, so that
		// it is reconciled within its namespace's count and its worker time is its namespace's.
		q.perNS[it.Namespace]++
	}
	q.admitted[it] = q.now()
	q.mu.Unlock()
	return it, p, shutdown
}

// Get takes the next request from the shared queue.
func (q *Queue) Get() (reconcile.Request, bool) {
	it, _, shutdown := q.GetWithPriority()
	return it, shutdown
}

// Done marks item as reconciled. When it was admitted, its place is its namespace's again and the worker time
// it took counts in its namespace's usage: if it was added again meanwhile it goes to the back of the
// namespace's backlog, and the namespace's next held requests (highest priority, then first held) are admitted
// while it is under its share (one, or more when its share grew back because the other namespaces went quiet).
func (q *Queue) Done(item reconcile.Request) {
	q.PriorityQueue.Done(item)
	q.mu.Lock()
	at, ok := q.admitted[item]
	if !ok {
		q.mu.Unlock()
		return
	}
	delete(q.admitted, item)
	ns := item.Namespace
	now := q.now()
	if !at.IsZero() {
		q.usage.of(ns).spend(now.Sub(at), now)
	}
	if q.perNS[ns]--; q.perNS[ns] <= 0 {
		delete(q.perNS, ns)
	}
	if p, ok := q.again[item]; ok {
		delete(q.again, item)
		q.park(item, p)
	}
	type held struct {
		it reconcile.Request
		p  int
	}
	var next []held
	for share := q.shareOf(ns, now); q.perNS[ns] < share; {
		it, p, ok := q.unpark(ns)
		if !ok {
			break
		}
		q.admitted[it] = time.Time{}
		q.perNS[ns]++
		next = append(next, held{it, p})
	}
	q.mu.Unlock()
	for _, h := range next {
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{Priority: &h.p}, h.it)
	}
}

// shareOf is ns's share at now: Alone unless another namespace's requests were added within the window, else
// Dominant if ns is the dominant namespace, else Contended (Shares). Locked.
func (q *Queue) shareOf(ns string, now time.Time) int {
	s := q.shares
	if s.Dominant >= s.Alone || !q.recent.Others(ns, now, 0) {
		return s.Alone
	}
	if q.held(now, q.usage.dominant) == ns {
		return s.Dominant
	}
	return s.Contended
}

// Dominant is the namespace held to Shares.Dominant now, or "" when none is (actionledger_reconciles_dominant):
// the dominant namespace while another namespace has requests, when the dominant share is smaller than the
// contended one.
func (q *Queue) Dominant() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shut {
		return ""
	}
	return q.held(q.now(), q.usage.peek)
}

// held is the namespace held to Shares.Dominant at now, or "", as dominant (usages.dominant, or usages.peek to
// change nothing) finds it. Locked.
func (q *Queue) held(now time.Time, dominant func(time.Time, func(string, *usage) bool) string) string {
	if q.shares.Dominant >= q.shares.Contended {
		return ""
	}
	ns := dominant(now, q.active(now))
	if ns == "" || !q.recent.Others(ns, now, 0) {
		return ""
	}
	return ns
}

// active tells, at now, whether a namespace (and its usage entry) has requests: added within
// contention.DefaultWindow, admitted, or held in its backlog. Locked.
func (q *Queue) active(now time.Time) func(string, *usage) bool {
	return func(ns string, u *usage) bool {
		return now.Sub(u.added) < contention.DefaultWindow || q.perNS[ns] > 0 || q.backlogs[ns] != nil
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

// Len is the number of requests waiting: in the shared queue, in the backlogs, on their timers, and added
// again while being reconciled.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.PriorityQueue.Len() + q.parked + q.delays.len() + len(q.again)
}

// ShutDown drops the backlogs, the timers and the requests added again, and shuts the shared queue down.
func (q *Queue) ShutDown() {
	q.drop()
	q.PriorityQueue.ShutDown()
}

// ShutDownWithDrain drops the backlogs, the timers and the requests added again, and shuts the shared queue
// down once its admitted requests are done.
func (q *Queue) ShutDownWithDrain() {
	q.drop()
	q.PriorityQueue.ShutDownWithDrain()
}

// drop stops the timers, forgets every request not yet in the shared queue and takes the queue out of the
// metrics.
func (q *Queue) drop() {
	if q.unregister != nil {
		q.unregister()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shut = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.delays.clear()
	clear(q.again)
	metrics.ReconcilesParked.Sub(float64(q.parked))
	q.parked = 0
	clear(q.backlogs)
}
