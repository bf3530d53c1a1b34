// Package waitroom parks actions that wait for capacity at a destination and wakes them when capacity frees,
// as the Job controller refills a Job when one of its pods ends (an event, never a timer): a send that finds no
// room in the dispatcher (its destination's maxInFlight) parks here, and each completion at that destination
// wakes the next waiter, in round-robin order over namespaces (FIFO inside one), so that free capacity never
// waits for a poll and a tenant with many waiters does not push another's to the back. A waiter also keeps a
// safety-net requeue of its own: a wake that finds no room again only parks it again.
//
// The room knows nothing of the ledger: it holds object keys per destination and hands back the ones to wake.
package waitroom

import (
	"container/list"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Room is the waiting room of every destination. The zero value is not usable: call New. Safe for concurrent use.
type Room struct {
	mu    sync.Mutex
	dests map[string]*queue
	// at is where each parked key waits: its destination and its place there.
	at map[types.NamespacedName]place
	// since is when each key began to wait (Since), kept across wakes until it Leaves.
	since map[types.NamespacedName]time.Time
}

type place struct {
	dest string
	elem *list.Element
}

// queue is one destination's waiters: a FIFO per namespace and the namespaces with waiters in serving order.
type queue struct {
	byNS map[string]*list.List // of types.NamespacedName
	ring []string
}

// New returns an empty Room.
func New() *Room {
	return &Room{dests: map[string]*queue{}, at: map[types.NamespacedName]place{}, since: map[types.NamespacedName]time.Time{}}
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

// Park puts key in dest's waiting room (at the end of its namespace's queue). A key already parked at dest keeps
// its place; one parked at another destination moves.
func (r *Room) Park(dest string, key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.at[key]; ok {
		if p.dest == dest {
			return
		}
		r.leaveLocked(key, p)
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
}

// Leave takes key out of the room (it found room, or is gone) and forgets when it began to wait; a key not
// parked is ignored.
func (r *Room) Leave(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.since, key)
	if p, ok := r.at[key]; ok {
		r.leaveLocked(key, p)
	}
}

func (r *Room) leaveLocked(key types.NamespacedName, p place) {
	delete(r.at, key)
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

// Wake takes up to n waiters of dest out of the room, one per namespace in turn (each served namespace goes to
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

// Waiting returns the number of keys parked at dest.
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
