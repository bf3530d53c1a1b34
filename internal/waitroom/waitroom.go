// Package waitroom is where every request to a destination waits for the destination's capacity, and what
// wakes it when that capacity frees, as the Job controller refills a Job when one of its pods ends (an event,
// never a poll). There are two kinds of capacity:
//
//   - a slot (Park): room in the dispatcher under the destination's maxInFlight. Its end cannot be predicted,
//     so each completion at the destination wakes the next waiter (Wake), in round-robin order over namespaces
//     (FIFO inside one), so that a tenant with many waiters does not push another's to the back;
//   - a time (ParkUntil): a token of the destination's rate limit, its retry budget, the end of a Retry-After
//     pause, or this shard's share of its limits. The limiter says when each key's turn comes (its reservations
//     already keep the fair order across namespaces), so the room wakes the key at that time, one timer for the
//     whole room (the earliest time), never a requeue per waiter.
//
// A key waits in one place at a time: parking it elsewhere moves it. A waiter keeps a safety-net requeue of its
// own: a wake that finds no capacity again only parks it again.
//
// The wait for a subject (spec.subject, internal/subject) is the same mechanism over another capacity: the action
// waits with its reason in status, the holder's terminal write or deletion wakes the actions on its subject
// through a watch (subject.Changed, Lock.ActionsOnSameSubject), and a 30 s requeue is only its safety net. It is
// not kept here because that capacity is an API object that any manager may free, which only a watch sees.
//
// The room knows nothing of the ledger: it holds object keys per destination and hands back, or wakes, the ones
// whose capacity came.
package waitroom

import (
	"container/heap"
	"container/list"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/actionledger/actionledger/internal/metrics"
)

// Room is the waiting room of every destination. The zero value is not usable: call New. Safe for concurrent use.
type Room struct {
	mu    sync.Mutex
	dests map[string]*queue
	// at is where each parked key waits: its destination and its place there.
	at map[types.NamespacedName]place
	// since is when each key began to wait (Since), kept across wakes until it Leaves.
	since map[types.NamespacedName]time.Time
	// sooner holds, for keys not parked, a destination and a time to wake them at (Sooner) if their next ParkUntil
	// there asks for a later one: the limiter may hand a key over between its refusal and its ParkUntil.
	sooner map[types.NamespacedName]place
	// count is how many keys wait at each destination, for a slot ([0]) and for a time ([1]):
	// actionledger_waiting_requests.
	count map[string]*[2]int

	// timed holds the keys that wait for a time (ParkUntil), earliest first; an entry whose key has since left
	// or moved (its seq is no longer the key's) is dropped when it reaches the top.
	timed timeHeap
	seq   uint64
	// clock runs the one timer (timer, set for timerAt) that wakes the earliest timed waiters through wake.
	clock   clock.WithDelayedExecution
	wake    func(types.NamespacedName)
	timer   clock.Timer
	timerAt time.Time
	// gen numbers the timers: a timer stopped too late to keep it from firing does not clear its successor.
	gen uint64
	// firing counts the wakes on their way (fire runs on a goroutine of its own, never inside the clock's
	// callback: a fake clock calls it holding its lock), so that a test can wait for them.
	firing sync.WaitGroup
}

// place is where a key waits: at dest, in a slot queue (elem) or until a time (seq names its timed entry).
type place struct {
	dest  string
	elem  *list.Element
	until time.Time
	seq   uint64
}

// timed is a key waiting for a time.
type timed struct {
	until time.Time
	key   types.NamespacedName
	seq   uint64
}

// timeHeap is a min-heap of timed waiters by until (container/heap).
type timeHeap []timed

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(timed)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// queue is one destination's waiters: a FIFO per namespace and the namespaces with waiters in serving order.
type queue struct {
	byNS map[string]*list.List // of types.NamespacedName
	ring []string
}

// New returns an empty Room. Keys parked for a time are woken only once Wakes has given it a way to wake them.
func New() *Room {
	return &Room{dests: map[string]*queue{}, at: map[types.NamespacedName]place{}, since: map[types.NamespacedName]time.Time{},
		sooner: map[types.NamespacedName]place{}, count: map[string]*[2]int{}}
}

// Wakes sets how the room wakes a key whose time came (the manager's dispatcher puts it on the controller's
// queue) and the clock that times it (nil: the real clock). Keys parked for a time before it is called are
// woken from the next ParkUntil on; until then only their own safety-net requeue looks at them.
func (r *Room) Wakes(clk clock.WithDelayedExecution, wake func(types.NamespacedName)) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock, r.wake = clk, wake
	r.armLocked()
}

// Since returns how long key has waited at now: since its first look without room (recorded now if it has none),
// across wakes that found no room again, until it Leaves. The controller shows a wait in status only once it has
// lasted (a wait that ends soon costs no status write).
func (r *Room) Since(key types.NamespacedName, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.since[key]
	if !ok {
		r.since[key] = now
		return 0
	}
	return now.Sub(t)
}

// Park puts key in dest's waiting room for a slot (at the end of its namespace's queue), to be woken by a
// completion there (Wake). A key already waiting for a slot at dest keeps its place; one waiting elsewhere, or
// for a time, moves.
func (r *Room) Park(dest string, key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sooner, key)
	if p, ok := r.at[key]; ok {
		if p.dest == dest && p.elem != nil {
			return
		}
		r.leaveLocked(key, p)
		if p.elem == nil {
			r.armLocked() // it waited for a time: the timer may be for it
		}
	}
	q := r.dests[dest]
	if q == nil {
		q = &queue{byNS: map[string]*list.List{}}
		r.dests[dest] = q
	}
	l := q.byNS[key.Namespace]
	if l == nil {
		l = list.New()
		q.byNS[key.Namespace] = l
		q.ring = append(q.ring, key.Namespace)
	}
	r.at[key] = place{dest: dest, elem: l.PushBack(key)}
	r.countLocked(dest, 0, 1)
}

// countLocked adds n to the keys waiting at dest for a slot (kind 0) or a time (kind 1) and shows the count
// (actionledger_waiting_requests; a count back at 0 deletes its series).
func (r *Room) countLocked(dest string, kind, n int) {
	c := r.count[dest]
	if c == nil {
		c = &[2]int{}
		r.count[dest] = c
	}
	c[kind] += n
	label := [2]string{"slot", "time"}[kind]
	if c[kind] == 0 {
		metrics.WaitingRequests.DeleteLabelValues(dest, label)
	} else {
		metrics.WaitingRequests.WithLabelValues(dest, label).Set(float64(c[kind]))
	}
	if c[0] == 0 && c[1] == 0 {
		delete(r.count, dest)
	}
}

// ParkUntil puts key in dest's waiting room until until (a rate-limit token, the retry budget, a pause or this
// shard's share comes then): the room wakes it at that time (Wakes). A key already waiting for the same time at
// dest is left as it is; one waiting elsewhere, or for a slot, moves. A key given an earlier time (Sooner) on its
// way here waits until that time instead.
func (r *Room) ParkUntil(dest string, key types.NamespacedName, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sooner[key]; ok {
		delete(r.sooner, key)
		if s.dest == dest && s.until.Before(until) {
			until = s.until
		}
	}
	if p, ok := r.at[key]; ok {
		if p.dest == dest && p.elem == nil && p.until.Equal(until) {
			return
		}
		r.leaveLocked(key, p)
	}
	r.seq++
	r.at[key] = place{dest: dest, until: until, seq: r.seq}
	heap.Push(&r.timed, timed{until: until, key: key, seq: r.seq})
	r.countLocked(dest, 1, 1)
	r.armLocked()
}

// armLocked sets the timer for the earliest timed waiter still parked (dropping the entries of keys that left
// or moved), or stops it when there is none.
func (r *Room) armLocked() {
	for len(r.timed) > 0 {
		top := r.timed[0]
		if p, ok := r.at[top.key]; ok && p.elem == nil && p.seq == top.seq {
			break
		}
		heap.Pop(&r.timed)
	}
	if r.wake == nil {
		return
	}
	if len(r.timed) == 0 {
		if r.timer != nil {
			r.timer.Stop()
			r.timer, r.timerAt = nil, time.Time{}
		}
		return
	}
	next := r.timed[0].until
	if r.timer != nil && r.timerAt.Equal(next) {
		return
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	r.gen++
	gen := r.gen
	r.timerAt = next
	r.timer = r.clock.AfterFunc(max(next.Sub(r.clock.Now()), 0), func() { r.firing.Go(func() { r.fire(gen) }) })
}

// fire wakes every timed waiter whose time has come and sets the timer for the next; gen is the timer's.
func (r *Room) fire(gen uint64) {
	r.mu.Lock()
	now := r.clock.Now()
	var due []types.NamespacedName
	for len(r.timed) > 0 && !r.timed[0].until.After(now) {
		e := heap.Pop(&r.timed).(timed)
		if p, ok := r.at[e.key]; ok && p.elem == nil && p.seq == e.seq {
			delete(r.at, e.key)
			r.countLocked(p.dest, 1, -1)
			due = append(due, e.key)
		}
	}
	if gen == r.gen {
		r.timer, r.timerAt = nil, time.Time{}
	}
	r.armLocked()
	wake := r.wake
	r.mu.Unlock()
	for _, key := range due {
		wake(key)
	}
}

// Leave takes key out of the room (it found room, or is gone) and forgets when it began to wait; a key not
// parked is ignored.
func (r *Room) Leave(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.since, key)
	delete(r.sooner, key)
	if p, ok := r.at[key]; ok {
		r.leaveLocked(key, p)
		if p.elem == nil {
			r.armLocked()
		}
	}
}

func (r *Room) leaveLocked(key types.NamespacedName, p place) {
	delete(r.at, key)
	if p.elem == nil { // a timed entry: dropped from the heap when it reaches the top (armLocked)
		r.countLocked(p.dest, 1, -1)
		return
	}
	r.countLocked(p.dest, 0, -1)
	q := r.dests[p.dest]
	l := q.byNS[key.Namespace]
	l.Remove(p.elem)
	if l.Len() == 0 {
		delete(q.byNS, key.Namespace)
		for i, ns := range q.ring {
			if ns == key.Namespace {
				q.ring = append(q.ring[:i:i], q.ring[i+1:]...)
				break
			}
		}
	}
	if len(q.ring) == 0 {
		delete(r.dests, p.dest)
	}
}

// Wake takes up to n slot waiters of dest out of the room, one per namespace in turn (each served namespace goes to
// the end of the ring), and returns them, to be woken by the caller.
func (r *Room) Wake(dest string, n int) []types.NamespacedName {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []types.NamespacedName
	for len(out) < n {
		q := r.dests[dest]
		if q == nil {
			break
		}
		ns := q.ring[0]
		key := q.byNS[ns].Front().Value.(types.NamespacedName)
		r.leaveLocked(key, r.at[key])
		if q.byNS[ns] != nil { // more waiters of ns: to the end of the ring
			q.ring = append(q.ring[1:], ns)
		}
		out = append(out, key)
	}
	return out
}

// Sooner moves key's wait for a time at dest to at, when at is earlier than the time it waits for (its capacity
// comes sooner than it was told: first attempts raised a retry budget, or the retries ahead of it went sooner;
// limiter.Registry.WakesEarly); at not after now wakes it at once, through the room's timer and wake (Wakes). A
// key not parked gets at for its next ParkUntil at dest (it was handed over between its refusal and its
// parking); Park, Leave and any other ParkUntil forget it. A key waiting for a slot, or at another destination,
// is left where it is, and so is every key before Wakes is called.
func (r *Room) Sooner(key types.NamespacedName, dest string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wake == nil { // nothing can wake it: its own requeue will
		return
	}
	p, ok := r.at[key]
	switch {
	case !ok:
		if s, marked := r.sooner[key]; !marked || s.dest != dest || at.Before(s.until) {
			r.pruneSoonerLocked(at)
			r.sooner[key] = place{dest: dest, until: at}
		}
		return
	case p.elem != nil || p.dest != dest || !at.Before(p.until):
		return
	}
	r.leaveLocked(key, p)
	r.seq++
	r.at[key] = place{dest: p.dest, until: at, seq: r.seq}
	heap.Push(&r.timed, timed{until: at, key: key, seq: r.seq})
	r.countLocked(p.dest, 1, 1)
	r.armLocked()
}

// Marks of Sooner for keys that never park (the object went between its refusal and its park, and Leave came
// before the mark) are dropped once soonerKeep older than the newest, when soonerPruneAt of them are held: a
// mark is used within a reconcile of its making, so the map stays bounded without a timer.
const (
	soonerKeep    = time.Minute
	soonerPruneAt = 1024
)

// pruneSoonerLocked drops the marks older than soonerKeep before at, when there are soonerPruneAt of them.
func (r *Room) pruneSoonerLocked(at time.Time) {
	if len(r.sooner) < soonerPruneAt {
		return
	}
	for k, s := range r.sooner {
		if s.until.Before(at.Add(-soonerKeep)) {
			delete(r.sooner, k)
		}
	}
}

// Settle waits for the wakes already on their way (the timer fired, its wakes not yet all made): a test's clock
// step followed by Settle sees every wake that step caused.
func (r *Room) Settle() { r.firing.Wait() }

// Until returns the time key waits for, if it waits for one (ParkUntil).
func (r *Room) Until(key types.NamespacedName) (time.Time, bool) {
	_, until, ok := r.ParkedUntil(key)
	return until, ok
}

// ParkedUntil returns the destination and the time key waits for there, if it waits for one (ParkUntil).
func (r *Room) ParkedUntil(key types.NamespacedName) (dest string, until time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.at[key]
	if !ok || p.elem != nil {
		return "", time.Time{}, false
	}
	return p.dest, p.until, true
}

// Later returns t, or the time key is parked until (ParkUntil) when that is later: a look at key before the room
// wakes it would find its capacity not come yet.
func (r *Room) Later(key types.NamespacedName, t time.Time) time.Time {
	if until, ok := r.Until(key); ok && until.After(t) {
		return until
	}
	return t
}

// Waiting returns the number of keys parked at dest for a slot.
func (r *Room) Waiting(dest string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	if q := r.dests[dest]; q != nil {
		for _, l := range q.byNS {
			n += l.Len()
		}
	}
	return n
}
