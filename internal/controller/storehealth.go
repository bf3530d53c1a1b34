package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// storeHealth turns the tombstone store's answers into two log lines per outage: one Info line when an
// operation first fails ("unreachable"), one when an operation is answered again ("reachable again", with the
// number of actions that waited and for how long). In between, each action that waits logs at V(1) only; the
// Reconciling condition (TombstoneStoreUnavailable) and actionledger_tombstone_store_up carry the outage. It
// also paces the waits of collections and deletions (storeRecheck). Safe for concurrent use.
type storeHealth struct {
	mu      sync.Mutex
	down    bool
	since   time.Time                         // when the store went down
	waiting map[types.NamespacedName]struct{} // the actions that waited on it since
}

// failed records that the store did not answer an operation of nn at now; the first failure of an outage is
// logged at Info with the error (no stack trace: the wait is expected, docs/tombstones.md).
func (h *storeHealth) failed(ctx context.Context, store string, nn types.NamespacedName, err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		h.down, h.since, h.waiting = true, now, map[types.NamespacedName]struct{}{}
		log.FromContext(ctx).Info("Tombstone store became unreachable; first sends, collections and deletions wait",
			"store", store, "err", err.Error())
	}
	h.waiting[nn] = struct{}{}
}

// answered records that the store answered an operation at now; the first answer after an outage is logged
// at Info with the number of actions that waited.
func (h *storeHealth) answered(ctx context.Context, store string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return
	}
	log.FromContext(ctx).Info("Tombstone store is reachable again; waiting actions go on", "store", store,
		"waitingActions", len(h.waiting), "downFor", now.Sub(h.since).Round(time.Millisecond).String())
	h.down, h.waiting = false, nil
}

// downFor is how long the store has been down at now (0 when it is up).
func (h *storeHealth) downFor(now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return 0
	}
	return now.Sub(h.since)
}

// storeRecheck is when to look again at an action whose tombstone could not be written: half the time the store
// has been down, from tombstoneRecheckMin to tombstoneRecheckMax, jittered to [after/2, 3*after/2).
func storeRecheck(down time.Duration, rand func() float64) time.Duration {
	after := min(max(down/2, tombstoneRecheckMin), tombstoneRecheckMax)
	return after/2 + time.Duration(rand()*float64(after))
}

// waitOnTombstoneWrite turns a tombstone write the store could not answer (a collection or a deletion) into
// a requeue without an error: an expected wait, logged at V(1) (the store's two Info lines say the rest). Any
// other error is returned for the workqueue; ok is false then.
func (r *ExternalActionReconciler) waitOnTombstoneWrite(ctx context.Context, err error) (ctrl.Result, bool) {
	unknown := (*errTombstoneStore)(nil)
	if !errors.As(err, &unknown) || namespaceTerminating(err) {
		return ctrl.Result{}, false
	}
	after := storeRecheck(r.parts.health.downFor(r.Clock.Now()), r.Options.rand())
	log.FromContext(ctx).V(1).Info("Tombstone not written; the object keeps its finalizer until it is", "store", unknown.store,
		"err", unknown.err.Error(), "recheckIn", after)
	return ctrl.Result{RequeueAfter: after}, true
}
