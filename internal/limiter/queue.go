package limiter

import (
	"cmp"
	"container/heap"
	"slices"
	"time"
)

// entry is the reservation of one waiting key on one destination.
type entry struct {
	key string
	ns  string
	// tag is the start tag (virtual time) of the reservation; seq breaks ties by
	// arrival order.
	tag int64
	seq int64
	// expires is the instant after which an unclaimed reservation is dropped:
	// the time the key was told to come back plus the grace period.
	expires time.Time
	// told is when the key was told to come back (the retry budget's queue: a key told a later time than its
	// capacity comes is woken early, see destination.wakeups).
	told time.Time
	// lateSince is when the reservation first went late (zero: never). Its place is kept for lateKeep from then,
	// however often it comes back and goes late again: a key that never uses its place loses it.
	lateSince time.Time
	// hidx is the index of the entry in the expiry heap.
	hidx int
}

// serviceOrder orders reservations by service: by tag, then by arrival.
func serviceOrder(a, b *entry) int {
	if c := cmp.Compare(a.tag, b.tag); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// nsQueue holds the waiting keys of one namespace, in service (and arrival)
// order: tags are strictly increasing.
type nsQueue struct {
	entries []*entry
	// next is one past the tag of the namespace's last admitted key (the finish
	// tag of start-time fair queuing): its next key starts no earlier.
	next int64
}

// fairQueue is the start-time fair queue of one destination (see the package
// documentation).
type fairQueue struct {
	byKey map[string]*entry
	byNS  map[string]*nsQueue
	exp   expiryHeap
	// vt is the virtual clock: the largest tag admitted so far.
	vt  int64
	seq int64
	// ver counts the changes of who waits (push, remove, reinsert).
	ver uint64
	// late holds the reservations whose key did not ask again before they expired, by key: they are not counted
	// ahead of anyone, but a key that comes back takes its place again (revive), so that a key slower than the
	// grace (a busy workqueue) is neither put at the back nor holding capacity for others meanwhile. Each is
	// dropped lateKeep after it first went late (its expires).
	late      map[string]*entry
	lateSweep time.Time
}

// lateKeep is how long a late reservation keeps its place for its key (30 s).
const lateKeep = 30 * time.Second

func newFairQueue() fairQueue {
	return fairQueue{byKey: map[string]*entry{}, byNS: map[string]*nsQueue{}, late: map[string]*entry{}}
}

// len returns the number of waiting keys.
func (q *fairQueue) len() int { return len(q.byKey) }

// get returns the reservation of key, or nil.
func (q *fairQueue) get(key string) *entry { return q.byKey[key] }

// push starts a reservation for key of namespace ns, expiring at expires.
func (q *fairQueue) push(ns, key string, expires time.Time) *entry {
	nq := q.byNS[ns]
	if nq == nil {
		nq = &nsQueue{}
		q.byNS[ns] = nq
	}
	tag := max(q.vt, nq.next)
	if n := len(nq.entries); n > 0 {
		tag = max(tag, nq.entries[n-1].tag+1)
	}
	q.seq++
	q.ver++
	e := &entry{key: key, ns: ns, tag: tag, seq: q.seq, expires: expires}
	nq.entries = append(nq.entries, e)
	q.byKey[key] = e
	heap.Push(&q.exp, e)
	return e
}

// position returns the number of waiting keys served before e.
func (q *fairQueue) position(e *entry) int {
	p := 0
	for _, nq := range q.byNS {
		i, _ := slices.BinarySearchFunc(nq.entries, e, serviceOrder)
		p += i
	}
	return p
}

// first returns the first n waiting keys in service order (all of them when fewer wait): a merge of the
// namespaces' queues by (tag, arrival). O(namespaces + n log namespaces).
func (q *fairQueue) first(n int) []*entry {
	n = min(n, len(q.byKey))
	if n <= 0 {
		return nil
	}
	out := make([]*entry, 0, n)
	q.each(func(e *entry) bool {
		out = append(out, e)
		return len(out) < n
	})
	return out
}

// each calls fn with the waiting keys in service order until it returns false: a merge of the namespaces' queues
// by (tag, arrival). O(namespaces + k log namespaces) for k calls.
func (q *fairQueue) each(fn func(*entry) bool) {
	h := make(headHeap, 0, len(q.byNS))
	for _, nq := range q.byNS {
		if len(nq.entries) > 0 {
			h = append(h, head{nq: nq})
		}
	}
	heap.Init(&h)
	for len(h) > 0 {
		top := &h[0]
		if !fn(top.nq.entries[top.i]) {
			return
		}
		if top.i++; top.i < len(top.nq.entries) {
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
}

// head is the next entry (index i) of one namespace's queue in a merge.
type head struct {
	nq *nsQueue
	i  int
}

// headHeap orders namespace heads by service order (container/heap).
type headHeap []head

func (h headHeap) Len() int { return len(h) }
func (h headHeap) Less(i, j int) bool {
	return serviceOrder(h[i].nq.entries[h[i].i], h[j].nq.entries[h[j].i]) < 0
}
func (h headHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *headHeap) Push(x any)   { *h = append(*h, x.(head)) }
func (h *headHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// reinsert puts back e, a reservation taken out earlier (remove) whose key asks again, at its old place: its tag
// and arrival keep it where it was in the service order, expiring at expires.
func (q *fairQueue) reinsert(e *entry, expires time.Time) {
	nq := q.byNS[e.ns]
	if nq == nil {
		nq = &nsQueue{}
		q.byNS[e.ns] = nq
	}
	i, _ := slices.BinarySearchFunc(nq.entries, e, serviceOrder)
	nq.entries = slices.Insert(nq.entries, i, e)
	q.byKey[e.key] = e
	q.ver++
	e.expires = expires
	heap.Push(&q.exp, e)
}

// remove drops the reservation e.
func (q *fairQueue) remove(e *entry) {
	if q.byKey[e.key] != e {
		return
	}
	delete(q.byKey, e.key)
	q.ver++
	heap.Remove(&q.exp, e.hidx)
	nq := q.byNS[e.ns]
	if i, found := slices.BinarySearchFunc(nq.entries, e, serviceOrder); found {
		nq.entries = slices.Delete(nq.entries, i, i+1)
	}
	q.dropIdle(e.ns, nq)
}

// dropIdle forgets namespace ns when it has no waiting key and its next key
// would start at the virtual clock anyway: an idle namespace has neither
// credit nor debt.
func (q *fairQueue) dropIdle(ns string, nq *nsQueue) {
	if len(nq.entries) == 0 && nq.next <= q.vt {
		delete(q.byNS, ns)
	}
}

// admitted drops the reservation e after it was served and advances the
// virtual clock and the namespace's finish tag.
func (q *fairQueue) admitted(e *entry) {
	if q.byKey[e.key] != e {
		return
	}
	q.vt = max(q.vt, e.tag)
	nq := q.byNS[e.ns]
	nq.next = max(nq.next, e.tag+1)
	q.remove(e)
}

// namespaces returns the number of namespaces with waiting keys.
func (q *fairQueue) namespaces() int {
	n := 0
	for _, nq := range q.byNS {
		if len(nq.entries) > 0 {
			n++
		}
	}
	return n
}

// sweep forgets the idle namespaces the virtual clock has passed.
func (q *fairQueue) sweep() {
	for ns, nq := range q.byNS {
		q.dropIdle(ns, nq)
	}
}

// setExpires moves the expiry of e.
func (q *fairQueue) setExpires(e *entry, t time.Time) {
	e.expires = t
	heap.Fix(&q.exp, e.hidx)
}

// expire makes late every reservation that expired before now, and drops the late ones whose place is older
// than lateKeep (at most once a second). A reservation's lateKeep counts from the first time it went late, not
// the last: a key that comes back (revive), is told a new time and misses it again keeps its place only for what
// is left of lateKeep, so no key holds the head of the queue indefinitely without being admitted.
func (q *fairQueue) expire(now time.Time) {
	for len(q.exp) > 0 && q.exp[0].expires.Before(now) {
		e := q.exp[0]
		q.remove(e)
		if e.lateSince.IsZero() {
			e.lateSince = now
		}
		e.expires = e.lateSince.Add(lateKeep)
		if !e.expires.After(now) {
			continue // its place is spent
		}
		q.late[e.key] = e
	}
	if len(q.late) == 0 || now.Before(q.lateSweep) {
		return
	}
	q.lateSweep = now.Add(time.Second)
	for k, e := range q.late {
		if e.expires.Before(now) {
			delete(q.late, k)
		}
	}
}

// revive puts key's late reservation back at its place (reinsert), expiring at expires, and returns it; nil when
// key has none.
func (q *fairQueue) revive(key string, expires time.Time) *entry {
	e := q.late[key]
	if e == nil {
		return nil
	}
	delete(q.late, key)
	q.reinsert(e, expires)
	return e
}

// forget drops key's reservation, waiting or late.
func (q *fairQueue) forget(key string) {
	if e := q.byKey[key]; e != nil {
		q.remove(e)
	}
	delete(q.late, key)
}

// expiryHeap is a min-heap of reservations by expiry.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx = i
	h[j].hidx = j
}

func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.hidx = len(*h)
	*h = append(*h, e)
}

func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	e.hidx = -1
	return e
}
