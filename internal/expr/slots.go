package expr

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// Evaluation slots: the seats of the one CPU budget that every tenant's expressions share (DESIGN rule 13). An
// evaluation is CPU-bound, so the process runs at most Slots() of them at once; the others wait, at most
// SlotWait, before they run, never after they started. The waiters are served as API Priority and Fairness
// serves requests of one priority level (k8s.io/apiserver pkg/util/flowcontrol/fairqueuing/queueset): each
// flow, here a namespace (WithFlow), has its own FIFO queue, and a freed slot goes to the waiting flow that has
// used the least slot time, measured as each evaluation ends (APF's virtual time, corrected by the real
// execution time: start-time fair queuing). Counting evaluations instead would not be fair: one tenant's
// admitted expressions take 0.1 s and more of CPU each, another's `response.statusCode == 201` microseconds,
// and with turns per evaluation the cheap tenant gets one evaluation per expensive one (issue 40 item 6: team-b's
// 20 verdicts a second queued behind team-a's few and waited up to SlotWait). With slot time, a tenant whose
// admitted expressions fill every slot delays another's next evaluation by at most the time one of them has left
// (EvalTimeout), and the other's evaluations then run back to back for as long as they used less.
//
// A flow that starts waiting after it was idle starts at the virtual time of the last grant (the slot time it
// did not use while idle is not credited); one idle with more charged than that keeps its charge until the others
// catch up.

// HeapBound is the heap, in bytes, that one evaluation is counted to hold at most (16 MiB) when the manager's
// memory budget is divided (membudget.Split: slots × HeapBound are set aside for evaluations). The cost limit
// bounds the values an evaluation makes (a unit a byte, about 1 MB); with the parsed input, the program and the
// runtime's own bookkeeping the worst admitted evaluations measured held 1.6 to 4.1 MB (docs/security.md,
// BenchmarkBombHeap), so 16 MiB leaves room for what was not found.
const HeapBound = 16 << 20

// DefaultSlots is the number of evaluation slots when SetSlots was not called: half of GOMAXPROCS (at least 1),
// which since Go 1.25 follows the container's CPU limit (and is the node's core count when none is set). Tenants'
// slotted expressions so get at most half of the manager's CPU, and the other half serves what every tenant
// needs: the reconciles, the status writes, the sends and the quick verdicts (QuickCost). With every core a
// slot, one tenant's admitted expressions took both cores of a 2-core node, and another tenant's p99 from create
// to Succeeded, alone 84 to 96 ms, was 182 and 735 ms beside them; with half, 134 to 444 ms (issue 40 item 6,
// docs/benchmarks.md). The slots' evaluations run on threads at background priority (evalThreads), so that the
// half they take is given back first when the rest needs it.
func DefaultSlots() int { return max(runtime.GOMAXPROCS(0)/2, 1) }

var slots = newFairSlots(DefaultSlots())

// SetSlots sets the number of evaluation slots (the manager's --evaluation-slots; n < 1 means DefaultSlots).
// Call it before any evaluation.
func SetSlots(n int) {
	if n < 1 {
		n = DefaultSlots()
	}
	slots = newFairSlots(n)
}

// Slots returns the number of evaluation slots.
func Slots() int { return slots.size }

type flowKey struct{}

// WithFlow returns ctx naming the flow (the tenant: the action's namespace) whose evaluations it carries; an
// evaluation without one is served in the flow "".
func WithFlow(ctx context.Context, flow string) context.Context {
	return context.WithValue(ctx, flowKey{}, flow)
}

func flowOf(ctx context.Context) string {
	f, _ := ctx.Value(flowKey{}).(string)
	return f
}

// fairSlots is a counting semaphore of size seats whose waiters are served to the flow that has used the least
// slot time (start-time fair queuing over flows, FIFO inside a flow).
type fairSlots struct {
	mu   sync.Mutex
	size int
	used int
	// flows holds every flow that waits, holds a slot, or was charged more than vnow; waiting counts the waiters
	// of all of them.
	flows   map[string]*flowState
	waiting int
	// vnow is the virtual time: the charge of the flow served last when it was served. A flow that starts
	// waiting after it was idle is charged at least this.
	vnow time.Duration
	// seq orders the waiters: among flows charged alike the one whose head waits longest is served first.
	seq uint64
	now func() time.Time
	// asked holds the waiters of HoldSlot by key, until their turn comes; granted the slots given to them, held
	// for their reconcile until it takes them or HoldGrace passes.
	asked   map[string]*waiter
	granted map[string]*grant
	grace   time.Duration // HoldGrace
	// cpu is the evaluation CPU budget the slots' evaluations spend (the package's, set by SetCores).
	cpu *cpuBudget
}

// grant is a slot given to a HoldSlot waiter whose reconcile has not taken it yet.
type grant struct {
	free  func()
	timer *time.Timer
}

// flowState is one flow's queue and charge.
type flowState struct {
	queue   []*waiter
	running int
	// charged is the slot time this flow's evaluations used (its virtual time).
	charged time.Duration
}

func (f *flowState) idle() bool { return len(f.queue) == 0 && f.running == 0 }

type waiter struct {
	ch      chan struct{}
	granted bool
	free    func() // the granted slot's release, set before ch is closed
	seq     uint64
	// key and wake are a HoldSlot waiter's (ch is nil): its turn holds the slot for key and calls wake.
	key  string
	wake func()
}

func newFairSlots(n int) *fairSlots {
	return &fairSlots{size: n, flows: map[string]*flowState{}, now: time.Now, asked: map[string]*waiter{},
		granted: map[string]*grant{}, grace: HoldGrace, cpu: cpu}
}

// flow returns name's state, made or woken: an idle flow is charged at least the virtual time.
func (s *fairSlots) flow(name string) *flowState {
	f := s.flows[name]
	if f == nil {
		f = &flowState{}
		s.flows[name] = f
	}
	if f.idle() {
		f.charged = max(f.charged, s.vnow)
	}
	return f
}

// grantLocked gives a slot to f and returns its release, which charges f the slot time it held. When the
// evaluation CPU budget (cpu) is owed, the slot stays taken until it is not (cpuBudget.owed), and that time is
// charged to f as slot time too.
func (s *fairSlots) grantLocked(name string, f *flowState) func() {
	f.running++
	s.vnow = max(s.vnow, f.charged)
	began := s.now()
	var once sync.Once
	return func() {
		once.Do(func() {
			if owed := s.cpu.owed(); owed > 0 {
				time.AfterFunc(owed, func() { s.release(name, f, began) })
				return
			}
			s.release(name, f, began)
		})
	}
}

// acquire takes a slot for flow, waiting behind the flows that used less slot time, or returns ctx's error.
func (s *fairSlots) acquire(ctx context.Context, flow string) (func(), error) {
	s.mu.Lock()
	w := &waiter{ch: make(chan struct{})}
	if free := s.takeOrQueueLocked(flow, w); free != nil {
		s.mu.Unlock()
		return free, nil
	}
	f := s.flows[flow]
	s.mu.Unlock()
	select {
	case <-w.ch:
		return w.free, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.granted { // granted while ctx ended: give the slot on
		free := w.free
		s.mu.Unlock()
		free()
		return nil, ctx.Err()
	}
	s.remove(flow, f, w)
	s.mu.Unlock()
	return nil, ctx.Err()
}

// release frees the slot flow f held since began: f is charged the time, and the slot goes to the head of the
// waiting flow charged least (the one waiting longest among equals), or back to the pool.
func (s *fairSlots) release(name string, f *flowState, began time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.running--
	f.charged += max(s.now().Sub(began), 0)
	var next *flowState
	var nextName string
	for n, g := range s.flows {
		if len(g.queue) == 0 {
			continue
		}
		if next == nil || g.charged < next.charged || (g.charged == next.charged && g.queue[0].seq < next.queue[0].seq) {
			next, nextName = g, n
		}
	}
	if next == nil {
		s.used--
	} else {
		w := next.queue[0]
		next.queue = next.queue[1:]
		s.waiting--
		w.granted = true
		w.free = s.grantLocked(nextName, next)
		if w.ch == nil {
			s.holdForLocked(w)
		} else {
			close(w.ch)
		}
	}
	s.forget(name, f)
}

// holdForLocked holds the slot granted to w, a HoldSlot waiter, for its key's reconcile, for HoldGrace at most,
// and wakes that reconcile.
func (s *fairSlots) holdForLocked(w *waiter) {
	delete(s.asked, w.key)
	g := &grant{free: w.free}
	g.timer = time.AfterFunc(s.grace, func() {
		s.mu.Lock()
		mine := s.granted[w.key] == g
		if mine {
			delete(s.granted, w.key)
		}
		s.mu.Unlock()
		if mine {
			g.free()
		}
	})
	s.granted[w.key] = g
	go w.wake()
}

// hold is HoldSlot on s.
func (s *fairSlots) hold(flow, key string, wake func()) (func(), bool) {
	s.mu.Lock()
	if g := s.granted[key]; g != nil {
		delete(s.granted, key)
		s.mu.Unlock()
		g.timer.Stop()
		return g.free, true
	}
	if s.asked[key] != nil {
		s.mu.Unlock()
		return nil, false
	}
	w := &waiter{key: key, wake: wake}
	if free := s.takeOrQueueLocked(flow, w); free != nil {
		s.mu.Unlock()
		return free, true
	}
	s.asked[key] = w
	s.mu.Unlock()
	return nil, false
}

// takeOrQueueLocked gives flow a free slot when nobody waits for one (its release), or queues w at the end of
// flow's queue (nil).
func (s *fairSlots) takeOrQueueLocked(flow string, w *waiter) func() {
	f := s.flow(flow)
	if s.used < s.size && s.waiting == 0 {
		s.used++
		return s.grantLocked(flow, f)
	}
	s.seq++
	w.seq = s.seq
	f.queue = append(f.queue, w)
	s.waiting++
	return nil
}

// drop is DropSlot on s.
func (s *fairSlots) drop(flow, key string) {
	s.mu.Lock()
	if w := s.asked[key]; w != nil {
		delete(s.asked, key)
		if f := s.flows[flow]; f != nil {
			s.remove(flow, f, w)
		}
	}
	g := s.granted[key]
	delete(s.granted, key)
	s.mu.Unlock()
	if g != nil {
		g.timer.Stop()
		g.free()
	}
}

// forget drops flow f when it is idle and charged no more than the virtual time (it would be charged that when
// it comes back anyway).
func (s *fairSlots) forget(name string, f *flowState) {
	if f.idle() && f.charged <= s.vnow && s.flows[name] == f {
		delete(s.flows, name)
	}
	if len(s.flows) > 4*s.size+64 { // idle flows kept for their charge, now caught up with
		for n, g := range s.flows {
			if g.idle() && g.charged <= s.vnow {
				delete(s.flows, n)
			}
		}
	}
}

// remove drops w, which gave up waiting, from flow's queue.
func (s *fairSlots) remove(name string, f *flowState, w *waiter) {
	for i, x := range f.queue {
		if x == w {
			f.queue = append(f.queue[:i:i], f.queue[i+1:]...)
			s.waiting--
			break
		}
	}
	s.forget(name, f)
}

// acquire takes an evaluation slot in ctx's flow (WithFlow), or returns ctx's error. Under a slot held by the
// reconcile (HoldSlot) it takes nothing more: that reconcile's evaluations run one after the other in it.
func acquire(ctx context.Context) (func(), error) {
	if held, _ := ctx.Value(heldKey{}).(bool); held {
		return func() {}, nil
	}
	return slots.acquire(ctx, flowOf(ctx))
}

type heldKey struct{}

// HoldGrace (2 s) is how long a slot given to a HoldSlot waiter is kept for its reconcile, which the wake
// enqueued, before it goes to the next waiter.
const HoldGrace = 2 * time.Second

// HoldSlot takes an evaluation slot for the reconcile of key (namespace/name) in flow (its namespace) without
// waiting for one, so that the reconcile worker is never held behind other tenants' evaluations (issue 40 item
// 6: a worker waiting up to SlotWait for a slot is a worker that serves no other tenant). ok: the returned ctx
// runs every evaluation under the slot (acquire takes nothing more) until release is called. Otherwise key
// waits in ctx's flow's queue like any evaluation, in the same fair order (the slot time each flow used), and
// when its turn comes the slot is held for it for HoldGrace and wake is called (on a goroutine of its own): the
// next HoldSlot for key gets that slot. A second HoldSlot while key waits only reports !ok. DropSlot gives up.
func HoldSlot(ctx context.Context, flow, key string, wake func()) (held context.Context, release func(), ok bool) {
	free, ok := slots.hold(flow, key, wake)
	if !ok {
		return ctx, nil, false
	}
	return context.WithValue(WithFlow(ctx, flow), heldKey{}, true), free, true
}

// DropSlot gives up key's place in flow's queue, or the slot held for it (the action is gone, or finished).
func DropSlot(flow, key string) { slots.drop(flow, key) }

// Occupy takes every evaluation slot and holds them until release is called: what another tenant's admitted
// expressions, each running for seconds, do to the others. For tests and benchmarks of DESIGN rule 12 (an
// evaluation that waits for a slot and does not get one decides nothing); it blocks until every slot is taken.
func Occupy() (release func()) {
	s := slots
	frees := make([]func(), 0, s.size)
	for range s.size {
		free, _ := s.acquire(context.Background(), "\x00occupy")
		frees = append(frees, free)
	}
	return func() {
		for _, free := range frees {
			free()
		}
	}
}
