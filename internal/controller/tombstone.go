package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/tombstone"
)

// errTombstoneStore marks a lookup the tombstone store could not answer: the first send waits
// (waitOnTombstoneStore), it never takes the key for new.
type errTombstoneStore struct {
	store string
	err   error
}

func (e *errTombstoneStore) Error() string {
	return fmt.Sprintf("tombstone store %s: %v", e.store, e.err)
}

func (e *errTombstoneStore) Unwrap() error { return e.err }

// checkTombstone looks up the key's tombstone in the tombstone store (for ActionTombstone objects: proven
// absent by the tombstone index (objects.Index) without a read when it can, else read live). done=true means step decides the
// action. A lookup the store cannot answer is an *errTombstoneStore: unknown, never absent.
func (r *ExternalActionReconciler) checkTombstone(ctx context.Context, xa *actionsv1alpha1.ExternalAction, key, fp string,
	env ledger.Env) (ledger.Step, bool, error) {
	store := r.parts.store
	rec, err := store.Lookup(ctx, xa)
	if err := r.storeResult(ctx, xa, "lookup", err); err != nil {
		return ledger.Step{}, false, err
	}
	if rec == nil {
		return ledger.Step{}, false, nil
	}
	ts := &rec.Spec
	if !env.Now.Before(ts.ExpiresAt.Time) {
		// Past the replay horizon the same key is a new action (docs/retention.md).
		return ledger.Step{}, false, nil
	}
	if ts.Fingerprint != fp {
		metrics.FingerprintConflicts.Inc()
		msg := conflictMessage(xa, ts.Fingerprint, fp, fmt.Sprintf("the tombstone of an earlier object (uid %s, %s)", ts.UID, ts.Phase))
		st := xa.Status.DeepCopy()
		st.IdempotencyKey = key
		st.Fingerprint = fp
		return ledger.Conflict(st, msg, env), true, nil
	}
	if !ts.Phase.Terminal() {
		// The earlier object went before it finished; nothing it did can have applied unprovably (the finalizer
		// waits for open claims), so this object continues the action under the same key.
		return ledger.Step{}, false, nil
	}
	metrics.Replays.Inc()
	return ledger.Replay(&xa.Status, key, fp, ledger.Tombstone{
		UID: ts.UID, Phase: ts.Phase, StatusCode: ts.StatusCode, CompletedAt: ts.CompletedAt,
		Response: ts.Response,
	}, env), true, nil
}

// Bounds of the wait of a first send whose tombstone lookup could not be answered: the recheck grows with the
// time already waited, from tombstoneRecheckMin to tombstoneRecheckMax.
const (
	tombstoneRecheckMin = time.Second
	tombstoneRecheckMax = 30 * time.Second
)

// waitOnTombstoneStore keeps a first send waiting while its tombstone lookup cannot be answered: Reconciling
// True with reason TombstoneStoreUnavailable (written and announced once), rechecked after a jittered delay
// that grows with the time waited. The store's error goes to the log only (it may name the database host).
func (r *ExternalActionReconciler) waitOnTombstoneStore(ctx context.Context, xa *actionsv1alpha1.ExternalAction,
	err *errTombstoneStore, env ledger.Env) *wait {
	waited := time.Duration(0)
	if c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling); c != nil &&
		c.Reason == actionsv1alpha1.ReasonTombstoneStoreUnavailable {
		waited = env.Now.Sub(c.LastTransitionTime.Time)
	}
	after := storeRecheck(waited, env.Rand)
	msg := fmt.Sprintf("the tombstone store (%s) did not answer whether this key was used before; nothing is sent "+
		"until it does (manager log, metric actionledger_tombstone_store_up)", err.store)
	step := ledger.Delayed(&xa.Status, actionsv1alpha1.ReasonTombstoneStoreUnavailable, msg, env.Now.Add(after), env)
	logger := log.FromContext(ctx)
	if step.Status != nil {
		step.Event = &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonTombstoneStoreUnavailable, Message: msg}
		logger.V(1).Info("tombstone lookup not answered; the first send waits", "store", err.store, "err", err.err.Error())
	} else {
		logger.V(1).Info("tombstone lookup still not answered", "store", err.store, "err", err.err.Error(), "recheckIn", after)
	}
	return &wait{step: step, after: after}
}

// writeTombstone records the action's key binding and outcome in the tombstone store before its object goes
// (DESIGN rules 7 and 8). It is idempotent: an existing tombstone for the same fingerprint is kept
// (tombstone.NeedsWrite).
func (r *ExternalActionReconciler) writeTombstone(ctx context.Context, xa *actionsv1alpha1.ExternalAction) error {
	if IsTrimmed(xa) {
		// The cached copy of a finished action lacks its response (TrimFinished); the tombstone keeps it, so it
		// is written from a fresh copy. Not reached by finalize, its only caller: an action being deleted is
		// cached whole (TrimFinished keeps it); kept so that no tombstone is ever written without its response.
		fresh := &actionsv1alpha1.ExternalAction{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(xa), fresh); err != nil {
			return fmt.Errorf("reading %s/%s whole for its tombstone: %w", xa.Namespace, xa.Name, err)
		}
		xa = fresh
	}
	st := &xa.Status
	if st.Fingerprint == "" || st.Phase == actionsv1alpha1.PhaseConflict || (st.Attempts == 0 && st.ReplayedFrom == nil) {
		return nil // nothing was bound or sent under this object
	}
	ttl := destination.DefaultTombstoneTTL
	if dest, err := r.parts.resolver.Resolve(ctx, xa); err == nil {
		ttl = dest.TombstoneTTL
	}
	now := r.Clock.Now()
	rec := &tombstone.Record{Namespace: xa.Namespace, Name: xa.Name, Spec: actionsv1alpha1.ActionTombstoneSpec{
		Key: st.IdempotencyKey, Fingerprint: st.Fingerprint, Phase: st.Phase,
		CompletedAt: st.CompletedAt, UID: string(xa.UID), ExpiresAt: metav1.NewTime(now.Add(ttl)),
	}}
	if st.ReplayedFrom != nil && st.ReplayedFrom.UID != "" {
		// A replayed object stands for the original action: keep its identity and completion time.
		rec.Spec.UID = st.ReplayedFrom.UID
		if st.ReplayedFrom.CompletedAt != nil {
			rec.Spec.CompletedAt = st.ReplayedFrom.CompletedAt
		}
	}
	if st.Response != nil {
		// The response as status held it: already redacted and bounded (status.Bound), so a replay gets it back.
		rec.Spec.StatusCode, rec.Spec.Response = st.Response.StatusCode, st.Response.DeepCopy()
	}
	return r.storeResult(ctx, xa, "write", r.parts.store.Write(ctx, rec, xa.UID))
}

// storeResult records the answer of the tombstone store's op ("lookup" or "write") for xa in the metrics and the
// store's health (two log lines per outage), and returns a failure as an *errTombstoneStore. A create refused
// because the action's namespace is terminating is an answer, not an outage: finalize lets the action go
// without a tombstone, and the store stays up (counting it as down left actionledger_tombstone_store_up at 0
// after every namespace deletion until the next tombstone operation, enough for ActionledgerTombstoneStoreDown
// to fire on a quiet cluster).
func (r *ExternalActionReconciler) storeResult(ctx context.Context, xa *actionsv1alpha1.ExternalAction, op string, err error) error {
	store := r.parts.store.Name()
	if err != nil && !namespaceTerminating(err) {
		metrics.TombstoneStoreResult(store, op, err)
		r.parts.health.failed(ctx, store, client.ObjectKeyFromObject(xa), err, r.Clock.Now())
		return &errTombstoneStore{store: store, err: err}
	}
	metrics.TombstoneStoreResult(store, op, nil)
	r.parts.health.answered(ctx, store, r.Clock.Now())
	if err != nil {
		return &errTombstoneStore{store: store, err: err}
	}
	return nil
}

// namespaceTerminating reports whether err is the API server's refusal to create in a terminating namespace.
func namespaceTerminating(err error) bool {
	var s *apierrors.StatusError
	return errors.As(err, &s) && apierrors.HasStatusCause(s, corev1.NamespaceTerminatingCause)
}

// finalize runs when an action is being deleted: an open claim is waited for (DESIGN rule 8), then a dead-letter
// record owed is delivered or given up (internal/deadletter), then the tombstone is written, then the finalizer
// goes.
func (r *ExternalActionReconciler) finalize(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(xa, actionsv1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	if c := xa.Status.Claim; c != nil && now.Before(c.ExpiresAt.Time) {
		log.FromContext(ctx).V(1).Info("deletion waits for the open attempt", "attempt", c.Attempt, "until", c.ExpiresAt)
		return ctrl.Result{RequeueAfter: c.ExpiresAt.Sub(now)}, nil
	}
	if res, held, err := r.parts.deadletter.Reconcile(ctx, xa); held {
		log.FromContext(ctx).V(1).Info("deletion waits for the dead-letter record owed", "sink", xa.Status.DeadLetter.Sink,
			"state", string(xa.Status.DeadLetter.State))
		return res, err
	}
	if c := xa.Status.Claim; c != nil {
		// The claim expired without an outcome: settle it as the ledger would, so the tombstone records the
		// truth (a repeat-safe action was not finished; otherwise the outcome is unknown).
		xa = xa.DeepCopy()
		if dest, err := r.parts.resolver.Resolve(ctx, xa); err == nil && dest.RepeatSafe(xa) {
			xa.Status.Phase = actionsv1alpha1.PhaseInProgress
		} else {
			xa.Status.Phase = actionsv1alpha1.PhaseOutcomeUnknown
		}
	}
	if err := r.writeTombstone(ctx, xa); err != nil {
		if res, ok := r.waitOnTombstoneWrite(ctx, err); ok {
			return res, nil
		}
		if !namespaceTerminating(err) {
			return ctrl.Result{}, err
		}
		// The namespace is being deleted: nothing can be created in it, and its tombstones go with it. Holding the
		// finalizer would hang the namespace in Terminating forever (docs/retention.md).
		log.FromContext(ctx).Info("namespace is terminating; the action goes without a tombstone", "phase", xa.Status.Phase)
	}
	r.Limiter.Forget(destination.ID(xa), xa.Namespace+"/"+xa.Name)
	// The deleted (or collected) holder gives its subject up, whatever its phase: its claim is settled above.
	if err := r.parts.subjects.Release(ctx, xa); err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFromWithOptions(xa.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(xa, actionsv1alpha1.Finalizer)
	if err := r.Patch(ctx, xa, patch); err != nil {
		if apierrors.IsConflict(err) {
			// Not finalized yet: look again (an outcome parked in memory waits for this, finalizeWithOutcome).
			return ctrl.Result{RequeueAfter: requeue.Conflict}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// collect deletes a finished action past its expiresAt, from the cached copy (trimmed: TrimFinished) without
// reading it again; the finalizer then writes its tombstone (finalize), from the copy the deletion's watch event
// brings whole (a deleting action is never trimmed). The object exists until that tombstone is written, so its
// key stays bound throughout (DESIGN rules 7 and 8), and the tombstone is written once. The delete carries
// preconditions on the UID and the resourceVersion the expiry was decided on: a stale cached copy never deletes
// a changed object (the API server answers Conflict, and the newer version brings its own event), nor a
// re-created one of the same name.
func (r *ExternalActionReconciler) collect(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	uid, rv := xa.UID, xa.ResourceVersion
	if err := r.Delete(ctx, xa, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("collecting finished action: %w", err)
	}
	log.FromContext(ctx).V(1).Info("collected finished action", "phase", xa.Status.Phase)
	return ctrl.Result{}, nil
}

// TombstoneReconciler deletes tombstones past their replay horizon, each requeued for its own expiry.
type TombstoneReconciler struct {
	client.Client
	Clock interface{ Now() time.Time }
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool
}

// Reconcile deletes one expired tombstone or requeues it for its expiry.
func (r *TombstoneReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ts := &actionsv1alpha1.ActionTombstone{}
	if err := r.Get(ctx, req.NamespacedName, ts); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if left := ts.Spec.ExpiresAt.Sub(r.Clock.Now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	// The resourceVersion precondition keeps a stale cache from deleting a tombstone that was just rewritten
	// (a new action under the key, or an extended horizon): the update keeps the tombstone's UID.
	uid, rv := ts.UID, ts.ResourceVersion
	if err := r.Delete(ctx, ts, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: requeue.TombstoneConflict}, nil
		}
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("deleting expired tombstone: %w", err)
		}
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the tombstone collector.
func (r *TombstoneReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&actionsv1alpha1.ActionTombstone{}).Named("actiontombstone").
		WithOptions(crcontroller.Options{SkipNameValidation: &r.SkipNameValidation}).Complete(r)
}
