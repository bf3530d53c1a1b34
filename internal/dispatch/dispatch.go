package dispatch

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/actionledger/actionledger/internal/membudget"
	"github.com/actionledger/actionledger/internal/metrics"
)

// Defaults and bounds.
const (
	// DefaultMaxInFlight is a destination's limit of sends in flight when Job.MaxInFlight is not positive
	// (CONTRACT spec.concurrency.maxInFlight default).
	DefaultMaxInFlight = 64
	// MaxMaxInFlight is the largest per-destination limit; a larger Job.MaxInFlight is cut to it. The CRDs'
	// Maximum of spec.concurrency.maxInFlight writes it out as well (TestBoundsAgree in internal/destination).
	MaxMaxInFlight = 1024
	// DefaultGlobalMaxInFlight is the manager-wide limit of sends in flight when Options.MaxInFlight is not
	// positive (--max-in-flight default).
	DefaultGlobalMaxInFlight = 1024
	// DefaultShutdownGrace is how long running sends are awaited after the stop began when
	// Options.ShutdownGrace is not positive (--shutdown-grace default, 25 s).
	DefaultShutdownGrace = 25 * time.Second
	// MinJobBytes is the least a send holds (bytes): HasRoom is false while a namespace cannot take as much of the
	// byte budget.
	MinJobBytes = 64 << 10
)

var (
	// ErrAlreadyQueued is returned by Submit for a key that is queued or running (or whose completion is
	// being delivered): a key never has two attempts in the dispatcher at once.
	ErrAlreadyQueued = errors.New("an attempt of this action is already queued or in flight")
	// ErrStopped is returned by Submit once the stop began (Start's context is done).
	ErrStopped = errors.New("the dispatcher is stopping and accepts no sends")
	// ErrShutdown is the Err of a Completion whose job was still queued when the stop began: Run was
	// never called, nothing was sent.
	ErrShutdown = errors.New("the manager stopped before the attempt was sent")
	// ErrStartDeadline is the Err of a Completion whose job was still queued at its StartBy time: Run was
	// never called, nothing was sent.
	ErrStartDeadline = errors.New("no in-flight slot became free before the attempt's start deadline")
	// ErrRunPanicked is the Err of a Completion whose Run panicked: Run was called, so the request may
	// have left (the outcome is uncertain).
	ErrRunPanicked = errors.New("the attempt panicked")
)

// Job is one claimed attempt. R is the result type of Run (the controller's classified outcome).
type Job[R any] struct {
	// Destination identifies the destination whose queue and limit apply, for example
	// "Destination/<namespace>/<name>" or "ClusterDestination/<name>"; also the metrics label. Required.
	Destination string
	// Key is the action (namespace/name). Key.Namespace is the tenant that fairness is computed over.
	// Required.
	Key types.NamespacedName
	// Attempt is the claimed attempt number; it is only handed back in the Completion.
	Attempt int32
	// Bytes is what the send will make the manager hold while it runs (the response body it keeps and its copies,
	// the request body, the connection's buffers), in bytes: taken from Options.Budget, charged to Key.Namespace,
	// before Run starts, and given back when it returns. The job stays queued until they fit. 0: none.
	Bytes int64
	// MaxInFlight is the destination's limit of sends in flight; the value of the newest job submitted
	// for the destination applies to it. Not positive means DefaultMaxInFlight; it is cut to
	// MaxMaxInFlight and to the global limit.
	MaxInFlight int
	// Deadline is the deadline of Run's context, on the Dispatcher's clock (Options.Clock): the claim's
	// expiry minus the margin needed to record the outcome. Required.
	Deadline time.Time
	// StartBy is the latest time Run may start (by the Dispatcher's clock); a job still queued then is
	// handed back not started with ErrStartDeadline. Zero means Deadline.
	StartBy time.Time
	// Run performs the attempt and returns its result. It must return soon after ctx is done. Required.
	Run func(ctx context.Context) R
	// NotRun, if set, gives the Completion's Result when Run is never called or panicked (err is the
	// Completion's Err), so that every completion carries a result of the job's owner: for example a
	// not-sent outcome with its ledger environment. Nil leaves the zero value.
	NotRun func(err error) R
}

// Completion is what happened to one accepted job; Deliver receives exactly one per job.
type Completion[R any] struct {
	// Destination, Key and Attempt are copied from the job.
	Destination string
	Key         types.NamespacedName
	Attempt     int32
	// Started reports whether Run was called (a request may have left).
	Started bool
	// Result is what Run returned; when Run was not called or panicked, what NotRun returned (or the zero
	// value).
	Result R
	// Err is nil when Run returned; ErrShutdown or ErrStartDeadline (Started false) when it was never
	// called; wraps ErrRunPanicked (Started true) when it panicked.
	Err error
	// Draining reports that the stop had begun when the completion was handed back: the reconcile
	// workers may be gone, so the receiver records it directly.
	Draining bool
	// Waited is how long the job was queued before it started (or was dropped).
	Waited time.Duration
}

// Options configure a Dispatcher.
type Options[R any] struct {
	// MaxInFlight is the manager-wide limit of sends in flight; not positive means
	// DefaultGlobalMaxInFlight.
	MaxInFlight int
	// ShutdownGrace is how long running sends are awaited after the stop began before their contexts are
	// cancelled; not positive means DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Deliver receives every completion, from the dispatcher's goroutines, possibly concurrently. It must
	// not block for long (it delays the stop and keeps the key taken) and must not call Submit for the
	// same key. Required.
	Deliver func(Completion[R])
	// Clock is the clock of Job.Deadline and Job.StartBy, and times Waited and the shutdown grace; nil
	// means the real clock.
	Clock clock.WithDelayedExecution
	// Budget is the process's byte budget (internal/membudget) that every job's Bytes are taken from before it
	// starts; the dispatcher sets its OnFree, so bytes given back by anyone (a decoder's window) start the jobs
	// that waited for them. nil: bytes are not counted.
	Budget *membudget.Budget
}

// Dispatcher runs jobs with per-destination and global limits of sends in flight, fair across
// namespaces. It is safe for concurrent use. Jobs run as soon as they are submitted; Start (see
// manager.Runnable) only governs the stop, so the dispatcher must be added to the manager.
type Dispatcher[R any] struct {
	global  int
	grace   time.Duration
	deliver func(Completion[R])
	clock   clock.WithDelayedExecution
	budget  *membudget.Budget
	// kicked is set while a pump for freed bytes is on its way (kick); unkick stops the budget's calls of kick.
	kicked atomic.Bool
	unkick func()

	// runCtx is the parent of every Run's context; cancelled when the grace is over.
	runCtx     context.Context
	cancelRuns context.CancelFunc
	running    sync.WaitGroup

	mu       sync.Mutex
	started  bool
	stopping bool
	inFlight int
	dests    map[string]*destQueue[R]
	// flows holds, per namespace with queued jobs, the destinations they are queued on; ring the same namespaces
	// in service order: each free global slot goes to the one of them with the fewest sends in flight that can
	// start one (pumpLocked; DESIGN rule 13: fair over namespaces, not over destinations).
	flows map[string]*flow[R]
	ring  []*flow[R]
	// nsInFlight counts each namespace's sends in flight, over all destinations.
	nsInFlight map[string]int
	keys       map[types.NamespacedName]*job[R]
}

// flow is one namespace's share of the dispatcher: the destinations it has jobs queued on, served in turn.
type flow[R any] struct {
	ns     string
	dests  []*destQueue[R]
	inRing bool
}

var (
	_ manager.Runnable               = &Dispatcher[int]{}
	_ manager.LeaderElectionRunnable = &Dispatcher[int]{}
)

type jobState int

const (
	stateQueued jobState = iota
	stateRunning
	stateDone
)

type job[R any] struct {
	Job[R]
	dq       *destQueue[R]
	nsq      *nsQueue[R]
	elem     *list.Element
	timer    clock.Timer
	queuedAt time.Time
	state    jobState
	// release gives back the job's Bytes, taken when it started.
	release func()
}

// destQueue is the queue and in-flight count of one destination.
type destQueue[R any] struct {
	id       string
	limit    int
	inFlight int
	queued   int
	byNS     map[string]*nsQueue[R]
	// ring holds the namespaces with queued jobs, in service order.
	ring []*nsQueue[R]
}

type nsQueue[R any] struct {
	ns     string
	jobs   list.List // of *job[R]
	inRing bool
}

// New returns a Dispatcher. It fails without Options.Deliver.
func New[R any](opts Options[R]) (*Dispatcher[R], error) {
	if opts.Deliver == nil {
		return nil, errors.New("dispatch: Options.Deliver is required")
	}
	d := &Dispatcher[R]{
		global: opts.MaxInFlight, grace: opts.ShutdownGrace, deliver: opts.Deliver, clock: opts.Clock, budget: opts.Budget,
		dests: map[string]*destQueue[R]{}, keys: map[types.NamespacedName]*job[R]{}, flows: map[string]*flow[R]{},
		nsInFlight: map[string]int{},
	}
	if d.global <= 0 {
		d.global = DefaultGlobalMaxInFlight
	}
	if d.grace <= 0 {
		d.grace = DefaultShutdownGrace
	}
	if d.clock == nil {
		d.clock = clock.RealClock{}
	}
	d.runCtx, d.cancelRuns = context.WithCancel(context.Background()) //nolint:gosec // G118: cancelRuns is called when the grace ends (Start)
	if d.budget != nil {
		d.unkick = d.budget.OnFree(d.kick)
	}
	return d, nil
}

// kick starts the jobs that waited for bytes once bytes were given back (membudget.Budget.OnFree): in a goroutine
// of its own, since the bytes may be given back under a lock of the caller's; one at a time.
func (d *Dispatcher[R]) kick() {
	if !d.kicked.CompareAndSwap(false, true) {
		return
	}
	go func() {
		d.kicked.Store(false)
		d.mu.Lock()
		start, dropped := d.pumpLocked(d.clock.Now())
		d.mu.Unlock()
		d.launch(start)
		d.finish(dropped)
	}()
}

// Submit queues job and starts it when its destination and the global pool have a free slot. It never
// blocks on a send. Errors: ErrStopped once the stop began, ErrAlreadyQueued (wrapped) when the key is
// queued or running, and an error for a job without Destination, Key, Deadline or Run. Every job Submit
// accepts is handed to Deliver exactly once.
func (d *Dispatcher[R]) Submit(jb Job[R]) error {
	if jb.Destination == "" || jb.Key.Name == "" || jb.Deadline.IsZero() || jb.Run == nil {
		return fmt.Errorf("dispatch: job %s attempt %d needs Destination, Key, Deadline and Run", jb.Key, jb.Attempt)
	}
	if jb.StartBy.IsZero() || jb.StartBy.After(jb.Deadline) {
		jb.StartBy = jb.Deadline
	}
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return ErrStopped
	}
	if _, ok := d.keys[jb.Key]; ok {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrAlreadyQueued, jb.Key)
	}
	dq := d.dests[jb.Destination]
	if dq == nil {
		dq = &destQueue[R]{id: jb.Destination, byNS: map[string]*nsQueue[R]{}}
		d.dests[jb.Destination] = dq
	}
	dq.limit = d.clampLimit(jb.MaxInFlight)
	now := d.clock.Now()
	j := &job[R]{Job: jb, dq: dq, queuedAt: now}
	d.keys[jb.Key] = j
	dq.push(j)
	d.queuedOn(jb.Key.Namespace, dq)
	start, dropped := d.pumpLocked(now)
	if j.state == stateQueued {
		// Own goroutine: a fake clock runs AfterFunc callbacks under its lock.
		j.timer = d.clock.AfterFunc(jb.StartBy.Sub(now), func() { go d.expire(j) })
	}
	d.report(dq)
	d.mu.Unlock()
	d.launch(start)
	d.finish(dropped)
	return nil
}

// HasRoom reports whether a job of namespace for destination would be served within about one round of
// its sends: true when fewer jobs are queued on the destination than its limit, or none of namespace
// (so a tenant is never kept out by another's backlog), the byte budget has MinJobBytes free for namespace,
// and the stop has not begun. The controller asks before writing a claim; false means "wait for the
// destination (concurrency)".
func (d *Dispatcher[R]) HasRoom(destination, namespace string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping || d.budget != nil && !d.budget.Fits(namespace, MinJobBytes) {
		return false
	}
	dq := d.dests[destination]
	if dq == nil {
		return true
	}
	if dq.queued < dq.limit {
		return true
	}
	nsq := dq.byNS[namespace]
	return nsq == nil || nsq.jobs.Len() == 0
}

// Holds reports whether key has a job in the dispatcher: queued, running, or being delivered. While it
// does, Submit refuses the key, and the controller must neither claim nor send for it again: the outcome
// of the attempt it holds is on its way.
func (d *Dispatcher[R]) Holds(key types.NamespacedName) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.keys[key]
	return ok
}

// InFlight returns the number of sends of destination running now.
func (d *Dispatcher[R]) InFlight(destination string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dq := d.dests[destination]; dq != nil {
		return dq.inFlight
	}
	return 0
}

// Queued returns the number of jobs of destination waiting for a slot.
func (d *Dispatcher[R]) Queued(destination string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dq := d.dests[destination]; dq != nil {
		return dq.queued
	}
	return 0
}

// TotalInFlight returns the number of sends running now on all destinations.
func (d *Dispatcher[R]) TotalInFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inFlight
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: sends are made by the leader only, and
// losing leadership stops new sends at once.
func (d *Dispatcher[R]) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable. It blocks until ctx is done, then stops: queued jobs are handed
// back not started (ErrShutdown), running ones are awaited up to the shutdown grace, then their contexts
// are cancelled; it returns when every Run has returned and every completion was delivered. A second
// Start returns an error.
func (d *Dispatcher[R]) Start(ctx context.Context) error {
	d.mu.Lock()
	if d.started {
		d.mu.Unlock()
		return errors.New("dispatch: Start called twice")
	}
	d.started = true
	d.mu.Unlock()
	<-ctx.Done()
	d.stop()
	return nil
}

func (d *Dispatcher[R]) stop() {
	d.mu.Lock()
	d.stopping = true
	now := d.clock.Now()
	var dropped []completed[R]
	for _, dq := range d.dests {
		for _, nsq := range slices.Clone(dq.ring) { // dropping a namespace's last job takes it out of dq.ring
			for e := nsq.jobs.Front(); e != nil; {
				next := e.Next()
				dropped = append(dropped, d.dropLocked(e.Value.(*job[R]), ErrShutdown, now))
				e = next
			}
		}
	}
	for _, dq := range d.dests {
		d.report(dq)
	}
	d.mu.Unlock()
	d.finish(dropped)

	done := make(chan struct{})
	go func() { d.running.Wait(); close(done) }()
	t := d.clock.NewTimer(d.grace)
	select {
	case <-done:
		t.Stop()
	case <-t.C():
		d.cancelRuns()
		<-done
	}
	d.cancelRuns()
	if d.unkick != nil {
		d.unkick()
	}
}

// completed is a completion waiting to be delivered, with its job (whose key is released after delivery).
type completed[R any] struct {
	j *job[R]
	c Completion[R]
}

func (d *Dispatcher[R]) clampLimit(n int) int {
	if n <= 0 {
		n = DefaultMaxInFlight
	}
	return min(n, MaxMaxInFlight, d.global)
}

// queuedOn records that ns has jobs queued on dq, and puts ns in the ring.
func (d *Dispatcher[R]) queuedOn(ns string, dq *destQueue[R]) {
	f := d.flows[ns]
	if f == nil {
		f = &flow[R]{ns: ns}
		d.flows[ns] = f
	}
	if !slices.Contains(f.dests, dq) {
		f.dests = append(f.dests, dq)
	}
	if !f.inRing {
		f.inRing = true
		d.ring = append(d.ring, f)
	}
}

// pumpLocked starts queued jobs while global slots are free. Each slot goes to the namespace with the fewest
// sends in flight among those that can start one now (a job queued on a destination with a free slot of its
// own), the first in the ring among equals; that namespace goes to the end of the ring and starts its next job
// on the next of its destinations, in turn (max-min fair over namespaces, as fair queuing serves flows of
// equal-width requests; FIFO on one destination). Jobs past their StartBy are dropped instead. The returned
// jobs are counted in d.running and must be launched; the dropped ones delivered.
func (d *Dispatcher[R]) pumpLocked(now time.Time) (start []*job[R], dropped []completed[R]) {
	if d.stopping {
		return nil, nil
	}
	for d.inFlight < d.global {
		best := d.pick()
		if best < 0 {
			break
		}
		f := d.ring[best]
		d.ring = slices.Delete(d.ring, best, best+1)
		j := d.next(f, now, &dropped)
		if len(f.dests) > 0 {
			d.ring = append(d.ring, f)
		} else {
			f.inRing = false
			delete(d.flows, f.ns)
		}
		if j == nil {
			continue
		}
		if j.timer != nil {
			j.timer.Stop()
		}
		j.state = stateRunning
		j.dq.inFlight++
		d.inFlight++
		d.nsInFlight[f.ns]++
		d.running.Add(1)
		start = append(start, j)
		d.report(j.dq)
	}
	if len(d.ring) == 0 {
		d.ring = nil // let the backing array go
	}
	return start, dropped
}

// pick returns the index in the ring of the namespace to serve next (pumpLocked), or -1 when none can start a
// job now. Namespaces left with no job queued anywhere leave the ring on the way.
func (d *Dispatcher[R]) pick() int {
	best := -1
	kept := d.ring[:0]
	for _, f := range d.ring {
		ready := false
		f.dests = slices.DeleteFunc(f.dests, func(dq *destQueue[R]) bool {
			nsq := dq.byNS[f.ns]
			if nsq == nil || nsq.jobs.Len() == 0 {
				return true
			}
			ready = ready || dq.inFlight < dq.limit && d.fits(f.ns, nsq.jobs.Front().Value.(*job[R]))
			return false
		})
		if len(f.dests) == 0 {
			f.inRing = false
			delete(d.flows, f.ns)
			continue
		}
		kept = append(kept, f)
		if ready && (best < 0 || d.share(f.ns) < d.share(kept[best].ns)) {
			best = len(kept) - 1
		}
	}
	clear(d.ring[len(kept):])
	d.ring = kept
	return best
}

// next takes f's next job to start: on the first of f's destinations, in turn, that has a free slot and a job of
// f queued. A destination without jobs of f leaves f.dests; jobs past their StartBy are dropped into dropped.
// nil when none is left to start.
func (d *Dispatcher[R]) next(f *flow[R], now time.Time, dropped *[]completed[R]) *job[R] {
	for tries := len(f.dests); tries > 0 && len(f.dests) > 0; tries-- {
		dq := f.dests[0]
		f.dests = append(f.dests[1:], dq)
		nsq := dq.byNS[f.ns]
		for nsq != nil && nsq.jobs.Len() > 0 && dq.inFlight < dq.limit {
			j := nsq.jobs.Front().Value.(*job[R])
			if !now.Before(j.StartBy) {
				dq.popFrom(nsq)
				*dropped = append(*dropped, d.finishQueuedLocked(j, ErrStartDeadline, now))
				d.report(dq)
				continue
			}
			if !d.take(j) {
				break // its bytes do not fit: it waits, first of its namespace on dq
			}
			dq.popFrom(nsq)
			if nsq.jobs.Len() == 0 {
				f.dests = f.dests[:len(f.dests)-1] // dq is last after the rotation
			}
			return j
		}
		if nsq == nil || nsq.jobs.Len() == 0 {
			f.dests = f.dests[:len(f.dests)-1]
		}
	}
	return nil
}

// share is ns's dominant share (dominant resource fairness): the larger of its part of the global pool of sends
// and its part of the byte budget. The namespace with the smallest share starts the next job.
func (d *Dispatcher[R]) share(ns string) float64 {
	s := float64(d.nsInFlight[ns]) / float64(d.global)
	if d.budget != nil {
		s = max(s, float64(d.budget.Held(ns))/float64(d.budget.Total()))
	}
	return s
}

// fits reports whether j's bytes fit in the budget for ns now.
func (d *Dispatcher[R]) fits(ns string, j *job[R]) bool {
	return d.budget == nil || j.Bytes <= 0 || d.budget.Fits(ns, j.Bytes)
}

// take takes j's bytes from the budget; false when they do not fit now.
func (d *Dispatcher[R]) take(j *job[R]) bool {
	if d.budget == nil || j.Bytes <= 0 {
		return true
	}
	release, ok := d.budget.TryTake(j.Key.Namespace, j.Bytes)
	j.release = release
	return ok
}

// launch runs the started jobs, each in its own goroutine.
func (d *Dispatcher[R]) launch(start []*job[R]) {
	for _, j := range start {
		go d.run(j)
	}
}

func (d *Dispatcher[R]) run(j *job[R]) {
	defer d.running.Done()
	started := d.clock.Now()
	res, err := d.call(j)
	if j.release != nil {
		j.release()
	}
	d.mu.Lock()
	j.state = stateDone
	dq := j.dq
	dq.inFlight--
	d.inFlight--
	if d.nsInFlight[j.Key.Namespace]--; d.nsInFlight[j.Key.Namespace] <= 0 {
		delete(d.nsInFlight, j.Key.Namespace)
	}
	now := d.clock.Now()
	start, dropped := d.pumpLocked(now)
	draining := d.stopping
	d.report(dq)
	d.mu.Unlock()
	d.launch(start)
	d.finish(dropped)
	d.finish([]completed[R]{{j: j, c: Completion[R]{
		Destination: j.Destination, Key: j.Key, Attempt: j.Attempt, Started: true, Result: res, Err: err,
		Draining: draining, Waited: started.Sub(j.queuedAt),
	}}})
}

// call runs j.Run under its deadline, turning a panic into ErrRunPanicked.
func (d *Dispatcher[R]) call(j *job[R]) (res R, err error) {
	// Deadline is on d.clock: turn what is left of it into a context timeout.
	ctx, cancel := context.WithTimeout(d.runCtx, j.Deadline.Sub(d.clock.Now()))
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrRunPanicked, p)
			res = j.notRun(err)
		}
	}()
	return j.Run(ctx), nil
}

// notRun returns the job's result for a job whose Run was not called or panicked.
func (j *job[R]) notRun(err error) R {
	if j.NotRun == nil {
		var zero R
		return zero
	}
	return j.NotRun(err)
}

// expire hands back j if it is still queued (its StartBy timer fired).
func (d *Dispatcher[R]) expire(j *job[R]) {
	d.mu.Lock()
	if j.state != stateQueued {
		d.mu.Unlock()
		return
	}
	c := d.dropLocked(j, ErrStartDeadline, d.clock.Now())
	d.report(j.dq)
	d.mu.Unlock()
	d.finish([]completed[R]{c})
}

// dropLocked removes the queued job j and returns its not-started completion.
func (d *Dispatcher[R]) dropLocked(j *job[R], why error, now time.Time) completed[R] {
	j.dq.remove(j)
	return d.finishQueuedLocked(j, why, now)
}

// finishQueuedLocked returns the not-started completion of j, already out of its queue.
func (d *Dispatcher[R]) finishQueuedLocked(j *job[R], why error, now time.Time) completed[R] {
	if j.timer != nil {
		j.timer.Stop()
	}
	j.state = stateDone
	return completed[R]{j: j, c: Completion[R]{
		Destination: j.Destination, Key: j.Key, Attempt: j.Attempt, Result: j.notRun(why), Err: why, Draining: d.stopping,
		Waited: now.Sub(j.queuedAt),
	}}
}

// finish delivers the completions, then releases their keys and forgets idle destinations.
func (d *Dispatcher[R]) finish(cs []completed[R]) {
	for _, c := range cs {
		d.deliver(c.c)
		d.mu.Lock()
		if d.keys[c.j.Key] == c.j {
			delete(d.keys, c.j.Key)
		}
		d.report(c.j.dq)
		d.mu.Unlock()
	}
}

// report publishes dq's gauges, or forgets dq (and deletes its series) when it is idle.
func (d *Dispatcher[R]) report(dq *destQueue[R]) {
	if dq.inFlight == 0 && dq.queued == 0 {
		if d.dests[dq.id] == dq {
			delete(d.dests, dq.id)
			metrics.InFlightSends.DeleteLabelValues(dq.id)
			metrics.QueuedSends.DeleteLabelValues(dq.id)
		}
		return
	}
	if d.dests[dq.id] != dq {
		return
	}
	metrics.InFlightSends.WithLabelValues(dq.id).Set(float64(dq.inFlight))
	metrics.QueuedSends.WithLabelValues(dq.id).Set(float64(dq.queued))
}

// push queues j at the end of its namespace's FIFO.
func (dq *destQueue[R]) push(j *job[R]) {
	nsq := dq.byNS[j.Key.Namespace]
	if nsq == nil {
		nsq = &nsQueue[R]{ns: j.Key.Namespace}
		dq.byNS[nsq.ns] = nsq
	}
	if !nsq.inRing {
		nsq.inRing = true
		dq.ring = append(dq.ring, nsq)
	}
	j.nsq = nsq
	j.elem = nsq.jobs.PushBack(j)
	dq.queued++
}

// popFrom takes the first job of nsq, one of dq's namespaces with a job queued.
func (dq *destQueue[R]) popFrom(nsq *nsQueue[R]) *job[R] {
	j := nsq.jobs.Remove(nsq.jobs.Front()).(*job[R])
	j.elem = nil
	dq.queued--
	dq.forgetEmpty(nsq)
	return j
}

// remove takes the queued job j out of its namespace's FIFO.
func (dq *destQueue[R]) remove(j *job[R]) {
	if j.elem == nil {
		return
	}
	j.nsq.jobs.Remove(j.elem)
	j.elem = nil
	dq.queued--
	dq.forgetEmpty(j.nsq)
}

// forgetEmpty drops nsq from dq when it has no job left.
func (dq *destQueue[R]) forgetEmpty(nsq *nsQueue[R]) {
	if nsq.jobs.Len() > 0 || !nsq.inRing {
		return
	}
	nsq.inRing = false
	delete(dq.byNS, nsq.ns)
	if i := slices.Index(dq.ring, nsq); i >= 0 {
		dq.ring = slices.Delete(dq.ring, i, i+1)
	}
}
