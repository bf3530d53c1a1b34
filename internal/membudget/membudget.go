// Package membudget is the one budget of the bytes that tenants' traffic makes the manager hold (DESIGN rule
// 13): the bodies of responses being read and the copies made of them (decoded, redacted, the view the
// expressions read), and the windows of the decoders of compressed answers. Every such byte is taken from one
// Budget before it is allocated, charged to a flow (the tenant: the action's namespace), and given back when it
// is freed. The heap of expression evaluations is bounded apart, by the evaluation slots times expr.HeapBound,
// and set aside from the process budget before this Budget is made (Split).
//
// A Budget never waits: TryTake says whether the bytes fit now. Who waits is the caller: the dispatcher keeps a
// send queued until its bytes fit (so a send that cannot get its bytes waits before it is sent, never fails
// after), and a decoder whose window does not fit is not opened (the body is recorded undecoded). Fairness is the
// callers' too: the dispatcher serves the namespace with the smallest dominant share of sends and bytes first
// (dominant resource fairness), so a freed byte goes to the tenant that holds the least.
//
// Borrowing: a flow may take any bytes that are free, up to FlowCap (half the budget), so one tenant alone can
// use most of the budget, and any other tenant still finds half of it out of that tenant's reach; what a tenant
// borrowed comes back as its sends end (each bounded by its destination's timeout), and goes first to the
// tenants that hold less. This is API Priority and Fairness's borrowing (a level lends the seats it does not
// use, up to a limit, and gets them back as requests finish, never by preemption) applied to bytes.
package membudget

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// Process budget defaults and bounds, in bytes.
const (
	// DefaultTotal is the process budget when the container's memory limit is unknown (256 MiB).
	DefaultTotal = 256 << 20
	// MinTotal is the least process budget derived from a memory limit (48 MiB).
	MinTotal = 48 << 20
	// LimitShare is the part of the container's memory limit that the process budget is (1/LimitShare): the rest
	// holds the manager's own heap (informer caches, the workqueue, status writes) and the garbage collector's
	// headroom (GOGC=100 lets the heap grow to twice what is live).
	LimitShare = 4
	// FlowShare is the part of a Budget one flow may hold at once (1/FlowShare).
	FlowShare = 2
)

// Budget is a process-wide budget of bytes, charged per flow. The zero value is not usable: call New. Safe for
// concurrent use.
type Budget struct {
	mu     sync.Mutex
	total  int64
	used   int64
	byFlow map[string]int64
	// freed are called (outside the lock) after bytes were given back, by the id OnFree gave them.
	freed  map[int]func()
	nextID int
}

// New returns a Budget of total bytes (at least 1).
func New(total int64) *Budget {
	return &Budget{total: max(total, 1), byFlow: map[string]int64{}}
}

// TotalFromMemoryLimit is the process budget: a quarter (LimitShare) of the container's memory limit (cgroup v2
// memory.max, or v1 memory.limit_in_bytes), at least MinTotal; DefaultTotal (256 MiB) without a limit. With the
// chart's 512 MiB limit: 128 MiB.
func TotalFromMemoryLimit() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f) //nolint:gosec // G304: fixed paths
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<50 { // "max", or v1's "no limit" (a huge number)
			return DefaultTotal
		}
		return max(n/LimitShare, MinTotal)
	}
	return DefaultTotal
}

// Split divides a process budget of total bytes between the evaluations and everything else: evaluations get
// slots × heapBound (each slot holds at most one evaluation, whose heap is at most heapBound), at most half of
// total; slots is cut to what that half holds (at least 1). It returns the slots kept and the bytes left for the
// Budget of bodies and windows.
func Split(total int64, slots int, heapBound int64) (keptSlots int, rest int64) {
	keptSlots = max(slots, 1)
	if heapBound > 0 {
		keptSlots = int(max(min(int64(keptSlots), total/2/heapBound), 1))
	}
	return keptSlots, max(total-int64(keptSlots)*heapBound, 1)
}

// OnFree has f called after bytes are given back (outside the Budget's lock, from the goroutine that gave them
// back; f must not block): a waiter may fit now. The returned function stops the calls.
func (b *Budget) OnFree(f func()) (stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed == nil {
		b.freed = map[int]func(){}
	}
	id := b.nextID
	b.nextID++
	b.freed[id] = f
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.freed, id)
	}
}

// Total returns the bytes of the budget.
func (b *Budget) Total() int64 { return b.total }

// FlowCap returns the bytes one flow may hold at once: half the budget (FlowShare).
func (b *Budget) FlowCap() int64 { return b.total / FlowShare }

// Used returns the bytes held now, by every flow.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Held returns the bytes flow holds now.
func (b *Budget) Held(flow string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byFlow[flow]
}

// Fits reports whether TryTake(flow, n) would take the bytes now.
func (b *Budget) Fits(flow string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fitsLocked(flow, n)
}

func (b *Budget) fitsLocked(flow string, n int64) bool {
	return n >= 0 && b.used+n <= b.total && b.byFlow[flow]+n <= b.FlowCap()
}

// TryTake charges n bytes to flow when they fit: in the budget, and in the flow's cap (FlowCap). ok false:
// nothing was charged. release gives the bytes back; calling it again does nothing.
func (b *Budget) TryTake(flow string, n int64) (release func(), ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.fitsLocked(flow, n) {
		return nil, false
	}
	b.used += n
	b.byFlow[flow] += n
	var once sync.Once
	return func() { once.Do(func() { b.give(flow, n) }) }, true
}

func (b *Budget) give(flow string, n int64) {
	b.mu.Lock()
	b.used -= n
	if b.byFlow[flow] -= n; b.byFlow[flow] <= 0 {
		delete(b.byFlow, flow)
	}
	fs := make([]func(), 0, len(b.freed))
	for _, f := range b.freed {
		fs = append(fs, f)
	}
	b.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
