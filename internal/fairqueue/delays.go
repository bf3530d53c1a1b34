package fairqueue

import (
	"container/heap"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// delay is a request's delayed add: when it is due and at which priority.
type delay struct {
	it    reconcile.Request
	at    time.Time
	prio  int
	index int // in delays
}

// delays holds the delayed adds not yet due, one per request, earliest first (a container/heap min-heap on at):
// one timer serves them all, as the priority queue's waiting tree does, so a manager with many finished
// actions waiting for their expiry holds one small entry each, not a runtime timer each.
type delays struct {
	byReq map[reconcile.Request]*delay
	heap  delayHeap
}

func newDelays() delays { return delays{byReq: map[reconcile.Request]*delay{}} }

// get is it's pending delayed add, or nil.
func (ds *delays) get(it reconcile.Request) *delay { return ds.byReq[it] }

// put records it's delayed add at at, priority prio, replacing a pending one; it reports whether this add is now
// the earliest (the timer must be set to it).
func (ds *delays) put(it reconcile.Request, at time.Time, prio int) bool {
	if d := ds.byReq[it]; d != nil {
		d.at, d.prio = at, prio
		heap.Fix(&ds.heap, d.index)
		return d.index == 0
	}
	d := &delay{it: it, at: at, prio: prio}
	ds.byReq[it] = d
	heap.Push(&ds.heap, d)
	return d.index == 0
}

// drop forgets it's pending delayed add, if any.
func (ds *delays) drop(it reconcile.Request) {
	if d := ds.byReq[it]; d != nil {
		heap.Remove(&ds.heap, d.index)
		delete(ds.byReq, it)
	}
}

// due removes and returns the delayed adds due at now, and how long until the next one (0: none left).
func (ds *delays) due(now time.Time) ([]*delay, time.Duration) {
	var out []*delay
	for len(ds.heap) > 0 {
		d := ds.heap[0]
		if d.at.After(now) {
			return out, d.at.Sub(now)
		}
		heap.Pop(&ds.heap)
		delete(ds.byReq, d.it)
		out = append(out, d)
	}
	return out, 0
}

func (ds *delays) len() int { return len(ds.byReq) }

func (ds *delays) clear() {
	clear(ds.byReq)
	ds.heap = nil
}

// delayHeap is heap.Interface over delays, earliest first.
type delayHeap []*delay

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h delayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *delayHeap) Push(x any) {
	d := x.(*delay) //nolint:forcetypeassert // only *delay is pushed
	d.index = len(*h)
	*h = append(*h, d)
}

func (h *delayHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}
