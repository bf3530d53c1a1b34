package controller

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// CollectPriority is the workqueue priority of collection: the delete of a finished action past its expiresAt and
// the finalization of a finished action being deleted (its tombstone and the finalizer's removal). It is below
// everything else the controller queues: events and sends have priority 0, and the objects of an informer's
// (re)list have handler.LowPriority (-100), so a restart sends what is pending before it collects. The
// controller's workqueue is controller-runtime's priority queue (the default since v0.23): a ready item of a
// higher priority is always handed to a worker first, so collection runs on what sends leave and never delays
// one (docs/retention.md#collection).
const CollectPriority = 2 * handler.LowPriority

// DefaultCollectionRate is the default of Options.CollectionRate (--collection-rate): collections a second that
// take their turn among waiting sends.
const DefaultCollectionRate = 10.0

// collectBusy is how long a collection waits when maxCollecting collections are already under way (their API
// requests take a few milliseconds each).
const collectBusy = 50 * time.Millisecond

// collector gives collection its turn. A reconcile that finds collection work (a finished action past its
// expiresAt, or a finished action being deleted) does it at once only while the collection rate allows (a token
// bucket of Options.CollectionRate a second): those collections take their place in line with the sends, so
// collection is not starved while sends wait, and bounded to that rate. Beyond the rate the object is handed to
// CollectPriority (arm), and the next reconcile, dequeued behind every waiting send, does the work. At most a
// quarter of the workers collect at once, so that a send arriving during a wave of collection finds a worker and
// the API server is not flooded with deletes.
type collector struct {
	mu     sync.Mutex
	armed  map[types.NamespacedName]struct{}
	slots  chan struct{}
	inLine *rate.Limiter
}

// newCollector returns a collector letting max(1, workers/4) collections run at once and perSecond of them
// (burst: one second's worth, rounded up) go in line with sends; perSecond 0 sends every collection to
// CollectPriority.
func newCollector(workers int, perSecond float64) *collector {
	return &collector{armed: map[types.NamespacedName]struct{}{}, slots: make(chan struct{}, max(1, workers/4)),
		inLine: rate.NewLimiter(rate.Limit(perSecond), int(math.Ceil(perSecond)))}
}

// take reports whether nn's previous reconcile handed it to CollectPriority, and forgets it: every reconcile
// takes it first, so an object reconciled for another reason in between (an event raises its priority) is
// handed back to CollectPriority before it is collected, unless the rate lets it go in line.
func (c *collector) take(nn types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.armed[nn]
	delete(c.armed, nn)
	return ok
}

func (c *collector) arm(nn types.NamespacedName) {
	c.mu.Lock()
	c.armed[nn] = struct{}{}
	c.mu.Unlock()
}

// turn decides whether the collection of nn runs now: when the reconcile was dequeued at CollectPriority (armed)
// or the rate lets it go in line, and a slot is free. Otherwise nn is armed and requeued at CollectPriority (after
// collectBusy when only the slots were missing). release gives the slot back after the work.
func (c *collector) turn(nn types.NamespacedName, armed bool) (release func(), res ctrl.Result, ok bool) {
	if !armed && !c.inLine.Allow() {
		c.arm(nn)
		return nil, collectAfter(time.Millisecond), false
	}
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots }, ctrl.Result{}, true
	default:
		c.arm(nn)
		return nil, collectAfter(collectBusy), false
	}
}

// dueAt requeues a finished action for its expiresAt at priority 0: that reconcile only reads the cache and
// decides (turn) whether the collection goes in line or behind the sends.
func dueAt(left time.Duration) ctrl.Result {
	p := 0
	return ctrl.Result{RequeueAfter: left, Priority: &p}
}

// collectAfter requeues at CollectPriority after d.
func collectAfter(d time.Duration) ctrl.Result {
	p := CollectPriority
	return ctrl.Result{RequeueAfter: d, Priority: &p}
}

// finishedDeletion reports whether xa is a finished action being deleted (collected, or deleted by a person
// after it finished): its finalization is collection work. An action deleted with an open claim, or before it
// finished, is finalized at its own priority.
func finishedDeletion(xa *actionsv1alpha1.ExternalAction) bool {
	return !xa.DeletionTimestamp.IsZero() && xa.Status.Phase.Terminal() && xa.Status.Claim == nil &&
		controllerutil.ContainsFinalizer(xa, actionsv1alpha1.Finalizer)
}
