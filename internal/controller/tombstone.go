package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
)

// checkTombstone looks up the key's tombstone. r.Tombstones answers "absent" without a read when it can prove
// it (TombstoneIndex); otherwise the tombstone is read live (never from the informer cache: a tombstone written a
// moment ago by the previous object's finalizer must be seen). done=true means step decides the action.
func (r *ExternalActionReconciler) checkTombstone(ctx context.Context, xa *actionsv1alpha1.ExternalAction, key, fp string,
	env ledger.Env) (ledger.Step, bool, error) {
	if r.Tombstones != nil {
		absent, err := r.Tombstones.Absent(ctx, xa)
		if err != nil {
			log.FromContext(ctx).V(1).Info("tombstone index unavailable; reading the tombstone live", "err", err.Error())
		}
		if absent {
			metrics.TombstoneLookups.WithLabelValues("index").Inc()
			return ledger.Step{}, false, nil
		}
	}
	metrics.TombstoneLookups.WithLabelValues("live").Inc()
	ts := &actionsv1alpha1.ActionTombstone{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(xa), ts)
	if apierrors.IsNotFound(err) {
		return ledger.Step{}, false, nil
	}
	if err != nil {
		return ledger.Step{}, false, fmt.Errorf("reading the tombstone of %s: %w", key, err)
	}
	if !env.Now.Before(ts.Spec.ExpiresAt.Time) {
		// Past the replay horizon the same key is a new action (docs/retention.md).
		return ledger.Step{}, false, nil
	}
	if ts.Spec.Fingerprint != fp {
		metrics.FingerprintConflicts.Inc()
		msg := conflictMessage(xa, ts.Spec.Fingerprint, fp, fmt.Sprintf("the tombstone of an earlier object (uid %s, %s)", ts.Spec.UID, ts.Spec.Phase))
		st := xa.Status.DeepCopy()
		st.IdempotencyKey = key
		st.Fingerprint = fp
		return ledger.Conflict(st, msg, env), true, nil
	}
	if !ts.Spec.Phase.Terminal() {
		// The earlier object went before it finished; nothing it did can have applied unprovably (the finalizer
		// waits for open claims), so this object continues the action under the same key.
		return ledger.Step{}, false, nil
	}
	metrics.Replays.Inc()
	return ledger.Replay(&xa.Status, key, fp, ledger.Tombstone{
		UID: ts.Spec.UID, Phase: ts.Spec.Phase, StatusCode: ts.Spec.StatusCode, CompletedAt: ts.Spec.CompletedAt,
		Response: ts.Spec.Response,
	}, env), true, nil
}

// writeTombstone records the action's key binding and outcome before its object goes (DESIGN rules 7 and 8).
// It is idempotent: an existing tombstone for the same fingerprint is kept.
func (r *ExternalActionReconciler) writeTombstone(ctx context.Context, xa *actionsv1alpha1.ExternalAction) error {
	if IsTrimmed(xa) && r.APIReader != nil {
		// The cached copy of a finished action lacks its response (TrimFinished); the tombstone keeps it, so it
		// is written from a fresh copy.
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
	ttl := DefaultTombstoneTTL
	if dest, err := r.resolveDestination(ctx, xa); err == nil {
		ttl = dest.TombstoneTTL
	}
	now := r.Clock.Now()
	ts := &actionsv1alpha1.ActionTombstone{
		ObjectMeta: metav1.ObjectMeta{Namespace: xa.Namespace, Name: xa.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "actionledger"}},
		Spec: actionsv1alpha1.ActionTombstoneSpec{
			Key: st.IdempotencyKey, Fingerprint: st.Fingerprint, Phase: st.Phase,
			CompletedAt: st.CompletedAt, UID: string(xa.UID), ExpiresAt: metav1.NewTime(now.Add(ttl)),
		},
	}
	if st.ReplayedFrom != nil && st.ReplayedFrom.UID != "" {
		// A replayed object stands for the original action: keep its identity and completion time.
		ts.Spec.UID = st.ReplayedFrom.UID
		if st.ReplayedFrom.CompletedAt != nil {
			ts.Spec.CompletedAt = st.ReplayedFrom.CompletedAt
		}
	}
	if st.Response != nil {
		// The response as status held it: already redacted and bounded (boundStatus), so a replay gets it back.
		ts.Spec.StatusCode, ts.Spec.Response = st.Response.StatusCode, st.Response.DeepCopy()
	}
	err := r.Create(ctx, ts)
	if apierrors.IsAlreadyExists(err) {
		cur := &actionsv1alpha1.ActionTombstone{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ts), cur); err != nil {
			return fmt.Errorf("reading the existing tombstone of %s/%s: %w", xa.Namespace, xa.Name, err)
		}
		same := cur.Spec.Fingerprint == ts.Spec.Fingerprint && cur.Spec.Phase == ts.Spec.Phase && cur.Spec.UID == ts.Spec.UID &&
			cur.Spec.StatusCode == ts.Spec.StatusCode && cur.Spec.CompletedAt.Equal(ts.Spec.CompletedAt) &&
			equality.Semantic.DeepEqual(cur.Spec.Response, ts.Spec.Response)
		// The horizon runs from when the last object holding the key went: a replayed copy going extends it, so a
		// manifest that GitOps keeps re-creating stays bound (docs/retention.md). The object's own second write
		// (collect, then finalize) does not.
		extend := string(xa.UID) != cur.Spec.UID && cur.Spec.ExpiresAt.Add(time.Second).Before(ts.Spec.ExpiresAt.Time)
		if same && !extend {
			return nil
		}
		cur.Spec = ts.Spec
		if err := r.Update(ctx, cur); err != nil {
			return fmt.Errorf("updating the tombstone of %s/%s: %w", xa.Namespace, xa.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the tombstone of %s/%s: %w", xa.Namespace, xa.Name, err)
	}
	return nil
}

// finalize runs when an action is being deleted: an open claim is waited for (DESIGN rule 8), then the
// tombstone is written, then the finalizer goes.
func (r *ExternalActionReconciler) finalize(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(xa, actionsv1alpha1.Finalizer) {
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	if c := xa.Status.Claim; c != nil && now.Before(c.ExpiresAt.Time) {
		log.FromContext(ctx).V(1).Info("deletion waits for the open attempt", "attempt", c.Attempt, "until", c.ExpiresAt)
		return ctrl.Result{RequeueAfter: c.ExpiresAt.Sub(now)}, nil
	}
	if c := xa.Status.Claim; c != nil {
		// The claim expired without an outcome: settle it as the ledger would, so the tombstone records the
		// truth (a repeat-safe action was not finished; otherwise the outcome is unknown).
		xa = xa.DeepCopy()
		if dest, err := r.resolveDestination(ctx, xa); err == nil && repeatSafe(dest, xa) {
			xa.Status.Phase = actionsv1alpha1.PhaseInProgress
		} else {
			xa.Status.Phase = actionsv1alpha1.PhaseOutcomeUnknown
		}
	}
	if err := r.writeTombstone(ctx, xa); err != nil {
		if !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return ctrl.Result{}, err
		}
		// The namespace is being deleted: nothing can be created in it, and its tombstones go with it. Holding the
		// finalizer would hang the namespace in Terminating forever (docs/retention.md).
		log.FromContext(ctx).Info("namespace is terminating; the action goes without a tombstone", "phase", xa.Status.Phase)
	}
	r.Limiter.Forget(destinationID(xa), xa.Namespace+"/"+xa.Name)
	// The deleted (or collected) holder gives its subject up, whatever its phase: its claim is settled above.
	if err := r.releaseSubject(ctx, xa); err != nil {
		return ctrl.Result{}, err
	}
	patch := client.MergeFromWithOptions(xa.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(xa, actionsv1alpha1.Finalizer)
	if err := r.Patch(ctx, xa, patch); err != nil {
		if apierrors.IsConflict(err) {
			// Not finalized yet: look again (an outcome parked in memory waits for this, finalizeWithOutcome).
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// collect deletes a finished action past its expiresAt; the finalizer then writes its tombstone.
func (r *ExternalActionReconciler) collect(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	if err := r.writeTombstone(ctx, xa); err != nil {
		return ctrl.Result{}, err
	}
	// Preconditions: only the version the expiry was decided on is collected (a newer one brings its own event).
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
			return ctrl.Result{RequeueAfter: time.Second}, nil
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
		WithOptions(controller.Options{SkipNameValidation: &r.SkipNameValidation}).Complete(r)
}
