package expr

import (
	"sync"
	"time"
)

// The evaluation CPU budget (issue 40 item 6): how much CPU the tenants' slotted evaluations may use, on average,
// in cores. The slots bound how many evaluations run at once; this bounds what they take of the node over time. A
// slot held by evaluations that used CPU beyond the budget stays taken, after they end, until the budget has
// accrued again (a token bucket of CPU time, refilled at Cores() a second, at most CPUBurst banked): a tenant whose
// admitted expressions run back to back gets Cores() of CPU, not a whole core per slot.
//
// Why a budget and not only a lower priority: the slots' threads run at nice 10 (evalThreads), which orders them
// only against threads in the same cgroup. On a Kubernetes node the API server, etcd and the manager are pods of
// their own, so there a slot running one tenant's worst predicates back to back took a whole core of a 2-core
// node beside the API server (the real-cluster noisy neighbour: the node 2.00 of 2 cores busy, kube-apiserver 0.83,
// the manager 0.80, 85 % of the manager's CPU in CEL), and every other tenant's create and status writes waited
// for the API server. A budget in CPU time is the same everywhere.
//
// The CPU an evaluation used is read from its thread's own clock (CLOCK_THREAD_CPUTIME_ID; the evaluation
// threads are locked to their goroutines), so time spent waiting for a core is not charged. Outside Linux the wall
// time is charged. Quick evaluations (QuickCost) take no slot and are not charged: they are microseconds, part of
// the send that needs them.

// CPUBurst (250 ms) is the most CPU time the budget banks while the evaluations are idle: after a pause, the
// first quarter second of evaluation runs at once.
const CPUBurst = 250 * time.Millisecond

// DefaultCores is the evaluation CPU budget, in cores, when SetCores was not given one: half a core per evaluation
// slot (Slots), so that each slot runs evaluations at most half the time on average. On a 2-core node (1 slot) that
// is 500m, 4 cores on a 16-core one (8 slots). A quarter of a core per slot was tried in the noisy-neighbour bench:
// team-b's p99 ratio was no better (a median of 4.8x in six runs, 3.6x for the six runs without a budget
// interleaved with them), and a quarter of a core judges 0.8 to 2.5 of team-a's worst admitted predicates a
// second (0.1 to 0.3 s of CPU each), fewer than the 4 a second it sends.
func DefaultCores() float64 { return float64(Slots()) / 2 }

var cpu = newCPUBudget(float64(DefaultSlots()) / 2)

// SetCores sets the evaluation CPU budget in cores (the manager's --evaluation-cpu); cores <= 0 means DefaultCores.
// Call it before any evaluation.
func SetCores(cores float64) {
	if cores <= 0 {
		cores = DefaultCores()
	}
	cpu = newCPUBudget(cores)
	slots.cpu = cpu
}

// Cores returns the evaluation CPU budget in cores.
func Cores() float64 { return cpu.cores }

// cpuBudget is a token bucket of CPU time: cores CPU-seconds accrue a second, at most burst banked; an evaluation
// spends what it used, and a negative balance is owed.
type cpuBudget struct {
	mu     sync.Mutex
	cores  float64
	burst  time.Duration
	tokens time.Duration
	last   time.Time
	now    func() time.Time
}

func newCPUBudget(cores float64) *cpuBudget {
	return &cpuBudget{cores: cores, burst: CPUBurst, tokens: CPUBurst, now: time.Now}
}

func (b *cpuBudget) refillLocked() {
	now := b.now()
	if !b.last.IsZero() {
		b.tokens = min(b.tokens+time.Duration(float64(now.Sub(b.last))*b.cores), b.burst)
	}
	b.last = now
}

// spend charges used CPU time.
func (b *cpuBudget) spend(used time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	b.tokens -= max(used, 0)
}

// owed is how long from now until the balance is back at zero (0 when it is not negative): how long a slot freed
// now stays taken.
func (b *cpuBudget) owed() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(float64(-b.tokens) / b.cores)
}
