package expr

import (
	"context"
	"runtime"
	"sync"
)

// Evaluation slots: the seats of the one CPU budget that every tenant's expressions share (DESIGN rule 13). An
// evaluation is CPU-bound, so the process runs at most Slots() of them at once; the others wait, at most
// SlotWait, before they run, never after they started. The waiters are served as API Priority and Fairness
// serves requests of one priority level (k8s.io/apiserver pkg/util/flowcontrol/fairqueuing/queueset): each
// flow, here a namespace (WithFlow), has its own FIFO queue, and a freed slot goes to the head of the next queue
// in round-robin order over the flows that are waiting. Every evaluation is bounded alike (CostLimit,
// EvalTimeout), so one grant per turn is fair queuing of equal-width requests: a tenant with a thousand waiting
// evaluations delays another tenant's one by at most one evaluation per flow waiting, never by its whole queue.

// HeapBound is the heap, in bytes, that one evaluation is counted to hold at most (16 MiB) when the manager's
// memory budget is divided (membudget.Split: slots × HeapBound are set aside for evaluations). The cost limit
// bounds the values an evaluation makes (a unit a byte, about 1 MB); with the parsed input, the program and the
// runtime's own bookkeeping the worst admitted evaluations measured held 1.6 to 4.1 MB (docs/security.md,
// BenchmarkBombHeap), so 16 MiB leaves room for what was not found.
const HeapBound = 16 << 20

// DefaultSlots is the number of evaluation slots when SetSlots was not called: GOMAXPROCS, which since Go 1.25
// follows the container's CPU limit (and is the node's core count when none is set).
func DefaultSlots() int { return max(runtime.GOMAXPROCS(0), 1) }

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

// fairSlots is a counting semaphore of size seats whose waiters are served round-robin over their flows.
type fairSlots struct {
	mu   sync.Mutex
	size int
	used int
	// queues holds the waiters of each flow that has any, FIFO; ring the flows with waiters, in serving order.
	queues map[string][]*waiter
	ring   []string
}

type waiter struct {
	ch      chan struct{}
	granted bool
}

func newFairSlots(n int) *fairSlots {
	return &fairSlots{size: n, queues: map[string][]*waiter{}}
}

// acquire takes a slot for flow, waiting behind the flows served before it, or returns ctx's error.
func (s *fairSlots) acquire(ctx context.Context, flow string) (func(), error) {
	s.mu.Lock()
	if s.used < s.size && len(s.ring) == 0 {
		s.used++
		s.mu.Unlock()
		return s.release, nil
	}
	w := &waiter{ch: make(chan struct{})}
	if len(s.queues[flow]) == 0 {
		s.ring = append(s.ring, flow)
	}
	s.queues[flow] = append(s.queues[flow], w)
	s.mu.Unlock()
	select {
	case <-w.ch:
		return s.release, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.granted { // granted while ctx ended: give the slot on
		s.mu.Unlock()
		s.release()
		return nil, ctx.Err()
	}
	s.remove(flow, w)
	s.mu.Unlock()
	return nil, ctx.Err()
}

// release frees a slot: it goes to the head of the next waiting flow's queue (that flow then goes to the end of
// the ring), or back to the pool.
func (s *fairSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ring) == 0 {
		s.used--
		return
	}
	flow := s.ring[0]
	s.ring = s.ring[1:]
	q := s.queues[flow]
	w := q[0]
	if len(q) == 1 {
		delete(s.queues, flow)
	} else {
		s.queues[flow] = q[1:]
		s.ring = append(s.ring, flow)
	}
	w.granted = true
	close(w.ch)
}

// remove drops w, which gave up waiting, from flow's queue (and flow from the ring when that empties it).
func (s *fairSlots) remove(flow string, w *waiter) {
	q := s.queues[flow]
	for i, x := range q {
		if x == w {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) > 0 {
		s.queues[flow] = q
		return
	}
	delete(s.queues, flow)
	for i, f := range s.ring {
		if f == flow {
			s.ring = append(s.ring[:i:i], s.ring[i+1:]...)
			break
		}
	}
}

// acquire takes an evaluation slot in ctx's flow (WithFlow), or returns ctx's error.
func acquire(ctx context.Context) (func(), error) { return slots.acquire(ctx, flowOf(ctx)) }

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
