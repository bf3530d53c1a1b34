// Package writeseats bounds how many ExternalAction status writes one namespace has at the API server at once
// while other namespaces are writing too: its seats. A write takes one of its namespace's seats before it is
// sent and gives it back when the API server has answered. While another namespace has written within the last
// Window, a namespace holds at most Per seats, and a write that finds them all taken waits, first come first
// served, for one to be given back. A namespace writing alone is not bounded: one tenant's burst keeps the
// API server as busy as it can be, and nothing is lost to the bound when no one else needs the API server.
//
// Why. The API server serves the manager's concurrent requests side by side on the same cores (processor
// sharing): a write's latency grows with every other write in flight, whoever it is for. One tenant's burst (a
// destination's waiting room waking its waiters together when stalled sends time out, each a claim and later an
// outcome) put up to 16 of its status writes (one per reconcile worker) at the API server together, and another
// tenant's claim and outcome waited behind them there: in the noisy-neighbour benchmark, team-b's p99 went from
// about 90 ms alone to 250-500 ms when such a burst fell in its run (docs/benchmarks.md, "The noisy neighbour").
// The fair workqueue (internal/fairqueue) gives the other tenant the next worker, but not a fast API server.
// With Per seats the burst reaches the API server Per writes at a time, and the other tenant's write meets at
// most those there.
//
// It is the client-side half of what API Priority and Fairness does inside the API server (KEP-1040), where
// seats bound what a flow has executing at once and a level's idle seats are lent to a busy one: here a lone
// namespace has them all, and the bound applies while others write.
package writeseats

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"

	"github.com/actionledger/actionledger/internal/contention"
)

// DefaultPerNamespace is the manager's default seats of a namespace while others write (--status-write-seats).
const DefaultPerNamespace = 4

// Seats are the status-write seats of every namespace. The zero value and a nil *Seats bound nothing.
type Seats struct {
	// Per is the seats of one namespace while another namespace writes (at least 1 when set; 0 bounds nothing).
	Per int
	// Window is how long after its last write another namespace still counts as writing (0:
	// contention.DefaultWindow).
	Window time.Duration
	// Now reads the clock (nil: time.Now).
	Now func() time.Time

	mu     sync.Mutex
	ns     map[string]*flow
	recent contention.Recent // the latest writes, to tell whether another namespace writes
	onWait func()            // test hook: runs when a write starts waiting
}

// flow is one namespace's seats held and its writes waiting, first first (its entry goes when both are none).
type flow struct {
	held    int
	waiting *list.List // of chan struct{}, closed when the seat is given
}

// New returns seats bounding each namespace to per writes in flight while another writes (per < 1: no bound).
func New(per int) *Seats { return &Seats{Per: max(per, 0)} }

// Take takes one of ns's seats, waiting first come first served while ns is at its bound, and returns the
// function that gives it back (call it once the API server has answered; later calls do nothing). It fails
// only with ctx's error, and then holds nothing.
func (s *Seats) Take(ctx context.Context, ns string) (release func(), err error) {
	if s == nil || s.Per < 1 {
		return func() {}, nil
	}
	s.mu.Lock()
	now := s.now()
	s.recent.Mark(ns, now)
	f := s.flow(ns)
	if f.waiting.Len() == 0 && f.held < s.limit(ns, now) {
		f.held++
		s.mu.Unlock()
		return s.releaser(ns, f), nil
	}
	given := make(chan struct{})
	el := f.waiting.PushBack(given)
	hook := s.onWait
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	select {
	case <-given:
		return s.releaser(ns, f), nil
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-given: // given just as ctx ended: give it back
			s.mu.Unlock()
			s.releaser(ns, f)()
		default:
			f.waiting.Remove(el)
			s.drop(ns, f)
			s.mu.Unlock()
		}
		return nil, ctx.Err()
	}
}

// releaser gives one seat of ns back, once: the next waiters take it while ns is under its bound.
func (s *Seats) releaser(ns string, f *flow) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			f.held--
			now := s.now()
			for f.waiting.Len() > 0 && f.held < s.limit(ns, now) {
				f.held++
				close(f.waiting.Remove(f.waiting.Front()).(chan struct{}))
			}
			s.drop(ns, f)
		})
	}
}

// limit is ns's bound at now: Per while another namespace has written within the window, else none.
func (s *Seats) limit(ns string, now time.Time) int {
	if s.recent.Others(ns, now, s.Window) {
		return s.Per
	}
	return math.MaxInt
}

func (s *Seats) flow(ns string) *flow {
	if s.ns == nil {
		s.ns = map[string]*flow{}
	}
	f := s.ns[ns]
	if f == nil {
		f = &flow{waiting: list.New()}
		s.ns[ns] = f
	}
	return f
}

// drop forgets ns's flow once it holds and awaits nothing.
func (s *Seats) drop(ns string, f *flow) {
	if f.held == 0 && f.waiting.Len() == 0 && s.ns[ns] == f {
		delete(s.ns, ns)
	}
}

func (s *Seats) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Waiting is how many writes wait for a seat now, in every namespace.
func (s *Seats) Waiting() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.ns {
		n += f.waiting.Len()
	}
	return n
}

// Namespaces is how many namespaces hold or wait for a seat now (idle ones are forgotten).
func (s *Seats) Namespaces() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ns)
}
