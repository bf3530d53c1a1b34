package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/requeue"
)

// apply writes step with the status writer (Apply: a Conflict observes again) and requeues from the schedule.
func (r *ExternalActionReconciler) apply(ctx context.Context, xa *actionsv1alpha1.ExternalAction, step ledger.Step, destID string) (ctrl.Result, error) {
	if _, err := r.parts.writer.Apply(ctx, xa, step, destID); err != nil {
		return ctrl.Result{}, err
	}
	return requeue.At(step.At, r.Clock.Now()), nil
}

// hold carries out a gate's wait: its error for the workqueue, or its step written and the requeue it asks.
func (r *ExternalActionReconciler) hold(ctx context.Context, xa *actionsv1alpha1.ExternalAction, w *wait) (ctrl.Result, error) {
	if w.err != nil {
		return ctrl.Result{}, w.err
	}
	res, err := r.apply(ctx, xa, w.step, w.destID)
	if err != nil || w.after <= 0 {
		return res, err
	}
	return ctrl.Result{RequeueAfter: w.after}, nil
}

// env is the one ledger.Env builder. With dest nil (the destination is gone or not yet resolved) the env still
// carries the action's retention (spec.ttlSecondsAfterFinished, else DefaultTTLAfterFinished) and its stored
// deadline, so that whatever is decided without a destination keeps the object for its horizon.
func (r *ExternalActionReconciler) env(xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved, now time.Time) ledger.Env {
	env := ledger.Env{
		Now: now, Holder: r.Options.Holder, Generation: xa.Generation, Rand: r.Options.rand(), ClaimMargin: r.Options.ClaimMargin,
		Retention: destination.DefaultTTLAfterFinished, Outputs: xa.Spec.Outputs != nil, Created: xa.CreationTimestamp.Time,
	}
	var deadline time.Duration
	if dest != nil {
		env.Policy, deadline = dest.Policy, dest.DeadlineDur
		env.AttemptTimeout, env.Retention = dest.Timeout, dest.Retention
		env.RepeatSafe, env.KeySupported, env.PostCheck = dest.RepeatSafe(xa), dest.KeySupported, dest.Spec.Reconciliation != nil
		env.Claimless = dest.Claimless(xa)
		if rc := dest.Spec.Reconciliation; rc != nil && rc.MaxChecks != nil {
			env.MaxPostChecks = *rc.MaxChecks
		}
	}
	if xa.Status.Deadline != nil {
		env.Policy.Deadline = xa.Status.Deadline.Time
	} else {
		env.Policy.Deadline = ledger.EffectiveDeadline(xa.CreationTimestamp.Time, deadline)
	}
	if xa.Spec.TTLSecondsAfterFinished != nil {
		env.Retention = time.Duration(*xa.Spec.TTLSecondsAfterFinished) * time.Second
	}
	return env
}

// envOf is the environment of a decision on a finished action: with its destination's retention and (tightened)
// policy when the destination still resolves. It returns the destination's ID too ("" without it).
func (r *ExternalActionReconciler) envOf(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ledger.Env, string) {
	now := r.Clock.Now()
	dest, err := r.parts.resolver.Resolve(ctx, xa)
	if err != nil {
		return r.env(xa, nil, now), ""
	}
	if policy, dl, err := destination.Tighten(dest.Policy, dest.DeadlineDur, xa.Spec.RetryPolicy); err == nil {
		dest.Policy, dest.DeadlineDur = policy, dl
	}
	return r.env(xa, dest, now), dest.ID
}

// observeFinished observes a new generation of a finished action (ledger.ObserveFinished): the retention in
// force (spec.ttlSecondsAfterFinished, else the destination's, else the default) recomputes expiresAt from
// completedAt, and the conditions follow the generation. The decision is made on a copy read from the API
// server, not the cache, so that the write carries the whole recorded status.
func (r *ExternalActionReconciler) observeFinished(ctx context.Context, cached *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	xa := &actionsv1alpha1.ExternalAction{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), xa); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !xa.Status.Phase.Terminal() {
		return ctrl.Result{RequeueAfter: requeue.Now}, nil
	}
	env, destID := r.envOf(ctx, xa)
	st := ledger.ObserveFinished(&xa.Status, env)
	if st == nil {
		return ctrl.Result{RequeueAfter: requeue.Now}, nil
	}
	log.FromContext(ctx).Info("observed a new generation of a finished action", "generation", xa.Generation,
		"phase", st.Phase, "expiresAt", st.ExpiresAt)
	return r.apply(ctx, xa, ledger.Step{Kind: ledger.KindNone, Status: st, At: timeOf(st.ExpiresAt)}, destID)
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// resolve applies the resolve annotation, records the decision, then clears the annotation.
func (r *ExternalActionReconciler) resolve(ctx context.Context, xa *actionsv1alpha1.ExternalAction, decision string) (ctrl.Result, error) {
	env, destID := r.envOf(ctx, xa)
	step, err := ledger.Resolve(&xa.Status, decision, xa.Annotations[actionsv1alpha1.AnnotationResolveReason], env)
	if err != nil {
		// The status write of a decision is seen before the annotation's removal: that stale read is not a
		// new, invalid decision, so only the annotation is cleared, without a warning.
		if res := xa.Status.Resolution; res == nil || res.Decision != decision {
			r.Recorder.Eventf(xa, nil, corev1.EventTypeWarning, actionsv1alpha1.ReasonInvalidDecision, "Resolve", "ignored %s=%q: %v", actionsv1alpha1.AnnotationResolve, decision, err)
		}
	} else {
		upd, err := r.parts.writer.Apply(ctx, xa, step, destID)
		if err != nil || upd == nil {
			return ctrl.Result{}, err // a Conflict: the next reconcile decides again
		}
		metrics.ManualResolutions.WithLabelValues(decision).Inc()
		xa = upd
	}
	patch := client.MergeFrom(xa.DeepCopy())
	delete(xa.Annotations, actionsv1alpha1.AnnotationResolve)
	delete(xa.Annotations, actionsv1alpha1.AnnotationResolveReason)
	if err := r.Patch(ctx, xa, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{RequeueAfter: requeue.Now}, nil
}
