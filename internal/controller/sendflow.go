package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/retry"
)

// How a send flows (DESIGN rule 10): claimAndSend asks the dispatcher for room, writes the claim (rule 1),
// submits a job and returns. The dispatcher runs the job's send when the destination has a free slot; the
// job's result (a pendingOutcome) comes back through deliver, which stores it in r.pending and wakes the
// controller through r.outcomes. The next Reconcile of the object records it first (rule 2).

const (
	// minUsefulSend is the least time a send may be given: a job that cannot start that long before its
	// deadline is handed back not sent (ErrStartDeadline) instead of being sent with no time to answer.
	minUsefulSend = time.Second
	// roomRecheck is about how often an action waiting for room at its destination looks again, jittered
	// by up to half of it (no hot loop: the ConcurrencyLimited status is written once, when the reason changes).
	roomRecheck = 300 * time.Millisecond
	// drainRecordTimeout bounds the direct record of an outcome handed back while the manager stops.
	drainRecordTimeout = 5 * time.Second
	// outcomeBuffer is the capacity of r.outcomes.
	outcomeBuffer = 1024
)

// pendingOutcome is the result of one claimed attempt, from the dispatcher or a failed write, until it is
// written (DESIGN rule 2).
type pendingOutcome struct {
	attempt int32
	outcome ledger.Outcome
	// env is the decision's environment with Now at the outcome's FinishedAt.
	env ledger.Env
	// claimedAt is when the attempt was claimed (attempt duration metric).
	claimedAt time.Time
	// pauseCap bounds a Retry-After pause of the destination (its deadline).
	pauseCap time.Duration
	// check is set for a post-check's answer (then outcome is unused).
	check *checkResult
	// abandoned: the send was cut because the shutdown grace ended (not by its own deadline). Its outcome
	// is not recorded: the claim is left open and follows DESIGN rule 3 after a restart.
	abandoned bool
}

// waitForRoom marks the action as waiting for room at its destination (reason ConcurrencyLimited; written
// only when the reason changes) and looks again shortly. No token is taken and no claim written.
func (r *ExternalActionReconciler) waitForRoom(ctx context.Context, xa *actionsv1alpha1.ExternalAction,
	dest *resolvedDestination, env ledger.Env) (ctrl.Result, error) {
	metrics.Delayed.WithLabelValues(dest.ID, actionsv1alpha1.ReasonConcurrencyLimited).Inc()
	wait := roomRecheck/2 + time.Duration(env.Rand()*float64(roomRecheck))
	until := env.Now.Add(wait)
	msg := fmt.Sprintf("waiting for destination %s (concurrency): %d request(s) in flight and %d queued",
		dest.ID, r.Dispatcher.InFlight(dest.ID), r.Dispatcher.Queued(dest.ID))
	return r.apply(ctx, xa, ledger.Delayed(&xa.Status, actionsv1alpha1.ReasonConcurrencyLimited, msg, until, env), dest.ID)
}

// sendJob is the dispatcher job of the claimed attempt: Run sends once and classifies; NotRun gives the
// not-sent (or, after a panic, uncertain) outcome of a job whose Run was never called or did not return.
func (r *ExternalActionReconciler) sendJob(claimed *actionsv1alpha1.ExternalAction, dest *resolvedDestination,
	target string, body []byte, env ledger.Env) dispatch.Job[*pendingOutcome] {
	attempt := claimed.Status.Claim.Attempt
	deadline := claimed.Status.Claim.ExpiresAt.Add(-r.claimMargin())
	result := func(o ledger.Outcome) *pendingOutcome {
		e := env
		e.Now = o.FinishedAt
		return &pendingOutcome{attempt: attempt, outcome: o, env: e, claimedAt: env.Now, pauseCap: dest.DeadlineDur}
	}
	return dispatch.Job[*pendingOutcome]{
		Destination: dest.ID,
		Key:         types.NamespacedName{Namespace: claimed.Namespace, Name: claimed.Name},
		Attempt:     attempt,
		MaxInFlight: dest.MaxInFlight,
		Deadline:    deadline,
		StartBy:     deadline.Add(-min(minUsefulSend, dest.Timeout/2)),
		Run: func(ctx context.Context) *pendingOutcome {
			// The attempt ends before its claim expires (minus the margin to record it): otherwise another
			// holder could treat a request still in flight as abandoned.
			timeout := dest.Timeout
			if dl, ok := ctx.Deadline(); ok {
				timeout = min(timeout, time.Until(dl))
			}
			if timeout <= 0 {
				return result(notSent(r.Clock.Now(), "ClaimExpired", "the claim had too little time left to send; nothing was sent"))
			}
			p := result(r.send(ctx, claimed, dest, target, body, timeout, env))
			// The dispatcher cancels (rather than lets expire) only the sends still running when the
			// shutdown grace ends.
			p.abandoned = errors.Is(ctx.Err(), context.Canceled)
			return p
		},
		NotRun: func(err error) *pendingOutcome { return result(notRunOutcome(err, r.Clock.Now())) },
	}
}

// notRunOutcome is the outcome of a job the dispatcher handed back without a result of Run.
func notRunOutcome(err error, now time.Time) ledger.Outcome {
	switch {
	case errors.Is(err, dispatch.ErrRunPanicked):
		// Run was called: the request may have left (DESIGN rule 3).
		return ledger.Outcome{Class: retry.ClassUncertain, FinishedAt: now, ErrorClass: "SendPanicked",
			Error: "the send panicked; the request may have left"}
	case errors.Is(err, dispatch.ErrStartDeadline):
		return notSent(now, "ClaimExpired", "no in-flight slot of the destination became free while the claim had time "+
			"left to send; nothing was sent")
	default: // dispatch.ErrShutdown, dispatch.ErrStopped
		return notSent(now, "ShutdownBeforeSend", "the manager stopped before the attempt was sent; nothing was sent")
	}
}

func notSent(now time.Time, class, msg string) ledger.Outcome {
	return ledger.Outcome{Class: retry.ClassNotSent, FinishedAt: now, ErrorClass: class, Error: msg}
}

// dispatchSend hands the claimed attempt to the dispatcher and returns at once; the outcome comes back
// through deliver. Without a dispatcher the send runs inline and is recorded here.
func (r *ExternalActionReconciler) dispatchSend(ctx context.Context, claimed *actionsv1alpha1.ExternalAction,
	job dispatch.Job[*pendingOutcome]) (ctrl.Result, error) {
	if r.Dispatcher == nil {
		p := r.runInline(ctx, job)
		r.account(job.Destination, p)
		r.pending.Store(job.Key, p)
		return r.record(ctx, claimed, p.attempt, p.outcome, p.env)
	}
	err := r.Dispatcher.Submit(job)
	switch {
	case err == nil:
		// Safety net: look again when the claim expires, should the outcome never come back.
		return requeueAt(claimed.Status.Claim.ExpiresAt.Time, r.Clock.Now()), nil
	case errors.Is(err, dispatch.ErrAlreadyQueued):
		// Not reached (reconcileActive waits while the dispatcher holds the key); the claim just written
		// then follows DESIGN rule 3 when it expires. Nothing is sent twice.
		log.FromContext(ctx).Info("an attempt of this action is still in the dispatcher; not sent again", "attempt", job.Attempt)
		return ctrl.Result{}, nil
	default: // dispatch.ErrStopped, or a job the dispatcher refuses: nothing was sent
		p := job.NotRun(err)
		r.pending.Store(job.Key, p)
		return r.record(ctx, claimed, p.attempt, p.outcome, p.env)
	}
}

// runInline runs job in the calling goroutine, as the dispatcher would (tests that drive Reconcile directly).
func (r *ExternalActionReconciler) runInline(ctx context.Context, job dispatch.Job[*pendingOutcome]) *pendingOutcome {
	left := job.Deadline.Sub(r.Clock.Now())
	if !r.Clock.Now().Before(job.StartBy) {
		return job.NotRun(dispatch.ErrStartDeadline)
	}
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	return job.Run(ctx)
}

// account counts the attempt and pauses the destination on a 429 or 503 with Retry-After.
func (r *ExternalActionReconciler) account(destID string, p *pendingOutcome) {
	o := p.outcome
	metrics.Attempts.WithLabelValues(destID, string(o.Class)).Inc()
	metrics.AttemptDuration.WithLabelValues(destID).Observe(max(o.FinishedAt.Sub(p.claimedAt).Seconds(), 0))
	if o.RetryAfter != "" && (o.StatusCode == 429 || o.StatusCode == 503) {
		if d, ok := retry.ParseRetryAfter(o.RetryAfter, o.FinishedAt); ok {
			// One answer pauses the whole destination, but never longer than the destination's deadline:
			// an action never waits past its deadline anyway, and a hostile Retry-After must not stop a
			// destination for a year.
			r.Limiter.Pause(destID, o.FinishedAt.Add(min(d, p.pauseCap)))
		}
	}
}

// deliver receives every completion of the dispatcher: it stores the outcome (DESIGN rule 2) and wakes
// the controller for the object, or, once the manager stops, records it directly.
func (r *ExternalActionReconciler) deliver(c dispatch.Completion[*pendingOutcome]) {
	p := c.Result
	if p == nil { // every job has NotRun; kept for safety
		p = &pendingOutcome{attempt: c.Attempt, outcome: notRunOutcome(c.Err, r.Clock.Now())}
	}
	if p.check == nil {
		r.account(c.Destination, p)
	}
	if p.abandoned {
		log.Log.WithName("dispatch").Info("a send was still running at the end of the shutdown grace; its claim is left open "+
			"(DESIGN rule 3 after a restart)", "externalaction", c.Key, "attempt", c.Attempt)
		return
	}
	r.pending.Store(c.Key, p)
	if !c.Draining {
		ev := event.GenericEvent{Object: &actionsv1alpha1.ExternalAction{}}
		ev.Object.SetNamespace(c.Key.Namespace)
		ev.Object.SetName(c.Key.Name)
		select {
		case r.outcomes <- ev:
			return
		case <-r.stopped:
		}
	}
	r.recordDirectly(c.Key)
}

// recordDirectly records the pending outcome of key from a fresh read, outside the workqueue (the workers
// are stopping). What cannot be written in drainRecordTimeout stays an open claim: DESIGN rule 3 after a
// restart.
func (r *ExternalActionReconciler) recordDirectly(key types.NamespacedName) {
	v, ok := r.pending.Load(key)
	if !ok {
		return
	}
	p := v.(*pendingOutcome)
	ctx, cancel := context.WithTimeout(context.Background(), drainRecordTimeout)
	defer cancel()
	logger := log.FromContext(ctx).WithValues("externalaction", key, "attempt", p.attempt)
	ctx = log.IntoContext(ctx, logger)
	cur := &actionsv1alpha1.ExternalAction{}
	if err := r.APIReader.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			r.pending.Delete(key)
			return
		}
		logger.Error(err, "reading the action to record an outcome while stopping; its claim is left open")
		return
	}
	record := func() (ctrl.Result, error) { return r.record(ctx, cur, p.attempt, p.outcome, p.env) }
	if p.check != nil {
		p.env.Now = r.Clock.Now()
		record = func() (ctrl.Result, error) { return r.recordCheck(ctx, cur, p) }
	}
	if _, err := record(); err != nil {
		logger.Error(err, "recording an outcome while stopping failed; its claim is left open")
	}
}

// dispatcherRunnable starts the dispatcher with the manager and closes r.stopped when the stop begins.
type dispatcherRunnable struct{ r *ExternalActionReconciler }

func (d dispatcherRunnable) Start(ctx context.Context) error {
	go func() { <-ctx.Done(); close(d.r.stopped) }()
	return d.r.Dispatcher.Start(ctx)
}

// NeedLeaderElection: only the leader sends, and losing leadership stops new sends at once.
func (d dispatcherRunnable) NeedLeaderElection() bool { return true }

// newDispatcher creates the dispatcher on the reconciler's clock.
func (r *ExternalActionReconciler) newDispatcher() error {
	clk, ok := r.Clock.(clock.WithDelayedExecution)
	if !ok {
		clk = clock.RealClock{}
	}
	d, err := dispatch.New(dispatch.Options[*pendingOutcome]{
		MaxInFlight: r.MaxInFlight, ShutdownGrace: r.ShutdownGrace, Deliver: r.deliver, Clock: clk,
	})
	if err != nil {
		return fmt.Errorf("creating the dispatcher: %w", err)
	}
	r.Dispatcher = d
	r.outcomes = make(chan event.GenericEvent, outcomeBuffer)
	r.stopped = make(chan struct{})
	return nil
}

// claimMargin is the configured claim margin or its default.
func (r *ExternalActionReconciler) claimMargin() time.Duration {
	if r.ClaimMargin > 0 {
		return r.ClaimMargin
	}
	return ledger.DefaultClaimMargin
}
