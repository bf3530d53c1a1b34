package controller

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/internal/send"
	"github.com/actionledger/actionledger/internal/tracing"
)

// settle records a result held in the mailbox: an attempt's outcome (record), a post-check's verdict
// (recordCheck) or a dead-letter delivery's outcome (internal/deadletter).
func (r *ExternalActionReconciler) settle(ctx context.Context, xa *actionsv1alpha1.ExternalAction, p *send.Result) (ctrl.Result, error) {
	if p.Check != nil {
		p.Env.Now = r.Clock.Now()
		return r.recordCheck(ctx, xa, p)
	}
	if p.DeadLetter { // a delivery of the action's dead-letter record (internal/deadletter), not an attempt
		res, err := r.parts.deadletter.Record(ctx, xa, p)
		if err == nil {
			r.parts.mailbox.drop(client.ObjectKeyFromObject(xa))
		}
		return res, err
	}
	return r.record(ctx, xa, p)
}

// record writes the outcome of attempt p.Attempt (DESIGN rule 2) with the status writer's SettleClaimed: over
// cur, or, when cur does not show the claim yet, over the copy the claim write returned (p.Claimed), and only
// after a Conflict there over a fresh read. It never sends. The outcome stays in the mailbox until it is written, or the API server shows the attempt settled
// elsewhere or the object gone; after the backoff's last step the error is returned and the workqueue retries.
// An outcome the API server refuses even without the destination's values is dropped with a Warning Event
// rather than retried forever. An object being deleted is finalized with the outcome in memory when it cannot
// be written, so its tombstone carries it (DESIGN rules 2 and 8). Once a success of an action with
// spec.outputs is recorded, its outputs are written (recorded first, then the outputs).
func (r *ExternalActionReconciler) record(ctx context.Context, cur *actionsv1alpha1.ExternalAction, p *send.Result) (ctrl.Result, error) {
	nn := client.ObjectKeyFromObject(cur)
	r.parts.mailbox.store(nn, p)
	attempt, outcome := p.Attempt, p.Outcome
	ctx, span := tracing.StartFrom(ctx, p.Span, "record", attempt) // a child of the attempt span (tracing.go)
	defer span.End()
	s := r.parts.writer.SettleClaimed(ctx, cur, p.Claimed, func(st *actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
		if p.Unclaimed != nil {
			return ledger.RecordUnclaimed(st, p.Unclaimed, outcome, p.Env)
		}
		return ledger.Record(st, attempt, outcome, p.Env)
	})
	switch {
	case s.Written != nil:
		r.parts.mailbox.drop(nn)
		if p.Unclaimed != nil {
			r.parts.mailbox.wrote(s.Written)
		}
		logOutcome(ctx, s.From, attempt, outcome)
		upd := s.Written
		if upd.Spec.Outputs != nil && upd.Status.Phase == actionsv1alpha1.PhaseSucceeded && upd.Status.Outputs == nil &&
			upd.DeletionTimestamp.IsZero() {
			return r.parts.outputs.Settle(ctx, upd)
		}
		return requeue.At(s.Step.At, r.Clock.Now()), nil
	case s.Closed:
		r.parts.mailbox.drop(nn)
		r.parts.outputs.Forget(nn)
		log.FromContext(ctx).Info("outcome dropped: the attempt is no longer open (resolved elsewhere)", "attempt", attempt, "result", outcome.Class)
		if p.Unclaimed != nil {
			r.unclaimedDiffers(s.From, outcome)
		}
		return ctrl.Result{}, nil
	case s.Gone:
		r.parts.mailbox.drop(nn)
		return ctrl.Result{}, nil
	case s.Refused != nil:
		log.FromContext(ctx).Error(s.Refused, "the outcome cannot be recorded; dropping it from memory", "attempt", attempt, "result", outcome.Class)
		r.parts.writer.Event(s.From, &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonStatusRefused, Message: fmt.Sprintf(
			"the outcome of attempt %d (%s) cannot be recorded: %v. The open claim is settled by the rules for an "+
				"uncertain attempt once it expires", attempt, outcome.Class, s.Refused)})
		if !s.From.DeletionTimestamp.IsZero() {
			return r.finalizeWithOutcome(ctx, s.Unwritten)
		}
		r.parts.mailbox.drop(nn)
		if c := s.From.Status.Claim; c != nil {
			return requeue.At(c.ExpiresAt.Time, r.Clock.Now()), nil
		}
		return ctrl.Result{}, nil
	case s.Stuck:
		log.FromContext(ctx).Info("deleting: the outcome could not be written; finalizing with it", "attempt", attempt, "error", s.Err.Error())
		return r.finalizeWithOutcome(ctx, s.Unwritten)
	}
	return ctrl.Result{}, fmt.Errorf("recording the outcome of attempt %d (kept in memory, will retry the write): %w", attempt, s.Err)
}

// unclaimedDiffers warns (UnclaimedOutcomeDiffers) when the dropped outcome of an unclaimed first attempt and
// the outcome recorded first disagree on success: two sends of the same key were answered differently, so
// the recorded phase may not match the destination's effect. Without a claim such sends can overlap (two
// managers, or a restart between a send and its record); the first record stays.
func (r *ExternalActionReconciler) unclaimedDiffers(recorded *actionsv1alpha1.ExternalAction, dropped ledger.Outcome) {
	if recorded == nil || !recorded.Status.Phase.Terminal() ||
		(recorded.Status.Phase == actionsv1alpha1.PhaseSucceeded) == (dropped.Class == retry.ClassSuccess) {
		return
	}
	r.parts.writer.Event(recorded, &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonUnclaimedOutcomeDiffers,
		Message: fmt.Sprintf("another send of this key without a claim was answered %s (status %d), but %s was recorded first "+
			"and stays: the destination did not answer both sends alike; check whether its effect happened",
			dropped.Class, dropped.StatusCode, recorded.Status.Phase)})
}

// finalizeWithOutcome finalizes an object being deleted whose outcome, held in memory, could not be written:
// xa carries that outcome in its (unwritten) status, so the tombstone records it. The outcome stays in the
// mailbox until the finalizer is gone, so a failed attempt at it is retried with the same record.
func (r *ExternalActionReconciler) finalizeWithOutcome(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	res, err := r.finalize(ctx, xa)
	if err == nil && res.IsZero() {
		r.parts.mailbox.drop(client.ObjectKeyFromObject(xa))
	}
	return res, err
}

// recordCheck writes a post-check's verdict with the status writer's Settle. Only a post-check's answer is
// recorded here: asking again is a read, so a verdict that cannot be written is dropped after the backoff and
// the check is asked again later.
func (r *ExternalActionReconciler) recordCheck(ctx context.Context, xa *actionsv1alpha1.ExternalAction, p *send.Result) (ctrl.Result, error) {
	defer r.parts.mailbox.drop(client.ObjectKeyFromObject(xa))
	if p.Check.Skipped {
		return ctrl.Result{RequeueAfter: requeue.Skipped}, nil
	}
	log.FromContext(ctx).V(1).Info("post-check", "attempt", p.Attempt, "verdict", p.Check.Verdict)
	s := r.parts.writer.Settle(ctx, xa, func(st *actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
		return ledger.RecordCheck(st, p.Attempt, p.Check.Verdict, p.Check.Rec, p.Check.Why, p.Env)
	})
	switch {
	case s.Written != nil:
		return requeue.At(s.Step.At, r.Clock.Now()), nil
	case s.Closed, s.Gone:
		return ctrl.Result{}, nil
	case s.Refused != nil:
		// Asking again would only repeat the post-check; a person must look (the event says why).
		return ctrl.Result{}, r.parts.writer.Refused(xa, fmt.Sprintf("the post-check verdict %s", p.Check.Verdict), s.Refused)
	}
	log.FromContext(ctx).V(1).Info("post-check verdict not written; asking again later", "error", s.Err.Error())
	return ctrl.Result{RequeueAfter: requeue.NotDispatched}, nil
}

// logOutcome logs one attempt's recorded outcome at info level: the action (klog.KObj), the attempt, the
// destination, the result class, the status code or error class, and the attempt's duration. Never a
// header value or a body: a destination may echo a secret there (DESIGN rule 11).
func logOutcome(ctx context.Context, cur *actionsv1alpha1.ExternalAction, attempt int32, o ledger.Outcome) {
	kv := []any{"attempt", attempt, "destination", destination.ID(cur), "result", string(o.Class)}
	if o.StatusCode != 0 {
		kv = append(kv, "statusCode", o.StatusCode)
	}
	if o.ErrorClass != "" {
		kv = append(kv, "errorClass", o.ErrorClass)
	}
	if c := cur.Status.Claim; c != nil && c.Attempt == attempt && !o.FinishedAt.IsZero() {
		kv = append(kv, "duration", o.FinishedAt.Sub(c.StartedAt.Time).String())
	}
	log.FromContext(ctx).Info("attempt finished", kv...)
}
