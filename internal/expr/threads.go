package expr

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Evaluation threads: where the slotted evaluations run (issue 40 item 6). A slot bounds how many of the tenants'
// expensive evaluations run at once; these threads decide what they give way to. Each runs on an OS thread of its
// own (runtime.LockOSThread, never unlocked, so the thread is never given back to the Go runtime for other work)
// whose scheduling priority is lowered to nice SlotNice (Linux: setpriority(2) on the thread; elsewhere unchanged).
// The kernel then runs them on whatever CPU the rest does not use, and takes it back from them first: the
// reconciles, the status writes and the sends, which every tenant needs, and, on a node whose processes share one
// cgroup, the API server those writes go to. An evaluation on an idle node runs as fast as before; beside work at
// the normal priority a nice 10 thread gets about a tenth of a contended core (the kernel's weights: 110 against
// 1024). Traced in the noisy neighbour before this change: one slot running team-a's admitted expressions back to
// back (the trickled outputs, then its predicates) for 2.6 s took 0.5 to 0.7 of the 2 cores, and every one of
// team-b's slow actions fell in those seconds, their create calls and claim writes slowed at the API server.
//
// The runtime starts its new OS threads from a known-good thread, never by cloning a locked one (runtime.newm), so
// the lowered priority stays on these threads.
//
// The slots (fairSlots) still decide who runs; the threads only run it. Quick evaluations (QuickCost) run in the
// caller's goroutine at the normal priority: they are a part of the send that needs them.

// SlotNice is the nice value (Linux: 0 normal, 19 lowest) of the threads that run slotted evaluations.
const SlotNice = 10

// evalThreads runs functions on background threads: as many threads as were ever asked for at once, each started
// when first needed. A caller waits for a free one; with at most Slots() slotted evaluations at once none waits.
var evalThreads = &threads{work: make(chan func())}

type threads struct {
	mu      sync.Mutex
	started int
	busy    int
	work    chan func()
	// runs counts the functions run on the threads (for tests).
	runs atomic.Int64
}

// run calls f on a background thread and returns when f returns. A panic in f is raised again here, in the
// caller's goroutine (where EvalContext and EvalString recover it).
func (t *threads) run(f func()) {
	t.mu.Lock()
	if t.busy++; t.busy > t.started {
		t.started++
		go t.loop()
	}
	t.mu.Unlock()
	var rec any
	done := make(chan struct{})
	t.work <- func() {
		defer close(done)
		defer func() { rec = recover() }()
		defer charge(time.Now())()
		f()
	}
	<-done
	t.runs.Add(1)
	t.mu.Lock()
	t.busy--
	t.mu.Unlock()
	if rec != nil {
		panic(rec)
	}
}

// loop is one background thread: locked to its goroutine for good, its priority lowered, it runs what it is given.
func (t *threads) loop() {
	runtime.LockOSThread() // never unlocked: the thread ends with the process, its lowered priority with it
	lowerPriority(SlotNice)
	for f := range t.work {
		f()
	}
}

// charge returns a function that charges the evaluation CPU budget (cpu) with the CPU time the calling thread used
// since: read from the thread's clock where it can be, the wall time since began where not. It is deferred on an
// evaluation thread around one evaluation, so that a panic is charged too.
func charge(began time.Time) func() {
	t0, ok := threadCPU()
	return func() {
		if t1, ok1 := threadCPU(); ok && ok1 {
			cpu.spend(t1 - t0)
			return
		}
		cpu.spend(time.Since(began))
	}
}
