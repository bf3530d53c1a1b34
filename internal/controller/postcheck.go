package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
)

// checkResult is a post-check's answer, the dispatcher's second kind of result (pendingOutcome.check).
type checkResult struct {
	verdict ledger.Verdict
	rec     *actionsv1alpha1.ResponseRecord
	// skipped: the check was never sent (the manager stopped, or no slot in time): nothing to record, ask again.
	skipped bool
}

// postCheck asks the destination's reconciliation post-check about an uncertain attempt (DESIGN rule 3). The
// request goes through the dispatcher like a send (it holds no reconcile worker and counts against the
// destination's maxInFlight); its verdict comes back through deliver and is recorded by recordCheck.
func (r *ExternalActionReconciler) postCheck(ctx context.Context, xa *actionsv1alpha1.ExternalAction, dest *resolvedDestination,
	step ledger.Step, env ledger.Env) (ctrl.Result, error) {
	if step.Status != nil {
		upd := xa.DeepCopy()
		upd.Status = *step.Status
		if err := r.writeStep(ctx, upd); err != nil {
			return ctrl.Result{}, err
		}
		r.afterWrite(ctx, xa.Status.Phase, upd, step, dest.ID)
		xa = upd
	}
	attempt := xa.Status.Claim.Attempt
	path := strings.NewReplacer("{key}", url.QueryEscape(xa.Status.IdempotencyKey),
		"{namespace}", url.PathEscape(xa.Namespace), "{name}", url.PathEscape(xa.Name)).Replace(dest.Spec.Reconciliation.Path)
	// The filled-in path is checked again: an escaped key may hold "%2F", never a dot segment.
	target, joinErr := httpexec.JoinURLEscapedValues(dest.Spec.URL, path)
	if joinErr != nil {
		// Nothing is sent; the check counts as inconclusive, so the action ends OutcomeUnknown (DESIGN rule 3).
		log.FromContext(ctx).Info("post-check not sent: its path leaves the destination's base path", "attempt", attempt,
			"reason", actionsv1alpha1.ReasonPathOutsideBase, "error", joinErr.Error())
		env.Now = r.Clock.Now()
		return r.recordCheck(ctx, xa, &pendingOutcome{attempt: attempt, env: env, check: &checkResult{verdict: ledger.VerdictInconclusive}})
	}
	if wait, ok := r.takeShare(dest, env.Now); !ok {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if r.Dispatcher != nil && !r.Dispatcher.HasRoom(dest.ID, xa.Namespace) {
		return ctrl.Result{RequeueAfter: roomRecheck}, nil
	}
	if err := r.loadCredentials(ctx, dest); err != nil {
		return r.waitOnDestination(ctx, xa, err, env)
	}
	if ok, wait, reason := r.Limiter.Admit(dest.ID, dest.Limits, xa.Namespace, xa.Namespace+"/"+xa.Name, true, env.Now); !ok {
		metrics.Delayed.WithLabelValues(dest.ID, limiterReason(reason)).Inc()
		return ctrl.Result{RequeueAfter: r.shareRecheck(dest, wait)}, nil
	}
	return r.dispatchCheck(ctx, xa, r.checkJob(xa, dest, target, env))
}

// checkJob is the dispatcher job of one post-check request: Run asks and evaluates applied/notApplied.
func (r *ExternalActionReconciler) checkJob(xa *actionsv1alpha1.ExternalAction, dest *resolvedDestination, target string,
	env ledger.Env) dispatch.Job[*pendingOutcome] {
	attempt := xa.Status.Claim.Attempt
	deadline := r.Clock.Now().Add(dest.Timeout)
	idemKey := xa.Status.IdempotencyKey
	return dispatch.Job[*pendingOutcome]{
		Destination: dest.ID, Key: types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name}, Attempt: attempt,
		MaxInFlight: dest.MaxInFlight, Deadline: deadline, StartBy: deadline.Add(-min(minUsefulSend, dest.Timeout/2)),
		Run: func(ctx context.Context) *pendingOutcome {
			res, red := r.askCheck(ctx, dest, target, idemKey)
			return &pendingOutcome{attempt: attempt, env: env, check: r.verdict(dest, res, red)}
		},
		NotRun: func(error) *pendingOutcome {
			return &pendingOutcome{attempt: attempt, env: env, check: &checkResult{skipped: true}}
		},
	}
}

// askCheck sends the post-check request (method default GET) with the destination's auth, signature and the
// key, and returns its result with the request's redactor. Without an OAuth2 token nothing is sent (the
// result is a TokenUnavailable error: inconclusive).
func (r *ExternalActionReconciler) askCheck(ctx context.Context, dest *resolvedDestination, target, idemKey string) (httpexec.Result, *redactor) {
	timeout := dest.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	h := http.Header{}
	for k, vs := range dest.AuthHeader {
		h[k] = append([]string(nil), vs...)
	}
	h.Set(dest.KeyHeader, idemKey)
	m := dest.Spec.Reconciliation.Method
	if m == "" {
		m = http.MethodGet
	}
	red, token, err := r.authorize(ctx, dest, h, nil, idemKey)
	if err != nil {
		return httpexec.Result{Err: err, ErrorClass: authorizeClass(err)}, red
	}
	res := r.Executor.Execute(ctx, httpexec.Request{Method: m, URL: target, Header: h, Timeout: timeout, TLS: dest.TLS},
		keepBytes(red))
	r.dropRefusedToken(dest, token, res)
	if token != "" && res.Response != nil && res.Response.StatusCode == http.StatusUnauthorized {
		// A refused token says nothing about the effect: inconclusive, whatever applied/notApplied would make of
		// a 401 (a broad notApplied such as statusCode >= 400 would otherwise allow a re-send).
		return httpexec.Result{Err: errors.New("the post-check's OAuth2 access token was refused (401); a new one is fetched for the next check"),
			ErrorClass: httpexec.ClassTokenUnavailable}, red
	}
	return res, red
}

// verdict evaluates the post-check's applied and notApplied expressions on its response; a failed request
// or a response neither proves is inconclusive.
func (r *ExternalActionReconciler) verdict(dest *resolvedDestination, res httpexec.Result, red *redactor) *checkResult {
	out := &checkResult{verdict: ledger.VerdictInconclusive}
	if res.Err != nil || res.Response == nil {
		return out
	}
	rc := dest.Spec.Reconciliation
	out.rec = responseRecord(res.Response, red)
	in := exprResponse(res.Response)
	if p, err := r.Exprs.Get(rc.Applied); err == nil {
		if ok, _ := p.Eval(in); ok {
			out.verdict = ledger.VerdictApplied
			return out
		}
	}
	if p, err := r.Exprs.Get(rc.NotApplied); err == nil {
		if ok, _ := p.Eval(in); ok {
			out.verdict = ledger.VerdictNotApplied
		}
	}
	return out
}

// dispatchCheck hands the post-check to the dispatcher (or runs it inline without one).
func (r *ExternalActionReconciler) dispatchCheck(ctx context.Context, xa *actionsv1alpha1.ExternalAction,
	job dispatch.Job[*pendingOutcome]) (ctrl.Result, error) {
	if r.Dispatcher == nil {
		p := r.runInline(ctx, job)
		p.env.Now = r.Clock.Now()
		return r.recordCheck(ctx, xa, p)
	}
	if err := r.Dispatcher.Submit(job); err != nil {
		// Stopping, or already held: nothing was asked; the next reconcile decides again.
		log.FromContext(ctx).V(1).Info("post-check not dispatched; asking again later", "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: job.Deadline.Sub(r.Clock.Now()) + time.Second}, nil
}

// recordCheck writes a post-check's verdict with statusWriteBackoff, re-reading on a Conflict. Only a
// post-check's answer is recorded here: asking again is a read, so a verdict that cannot be written is
// dropped after the backoff and the check is asked again later.
func (r *ExternalActionReconciler) recordCheck(ctx context.Context, xa *actionsv1alpha1.ExternalAction, p *pendingOutcome) (ctrl.Result, error) {
	nn := client.ObjectKeyFromObject(xa)
	defer r.pending.Delete(nn)
	if p.check.skipped {
		return ctrl.Result{RequeueAfter: roomRecheck}, nil
	}
	log.FromContext(ctx).V(1).Info("post-check", "attempt", p.attempt, "verdict", p.check.verdict)
	backoff := statusWriteBackoff
	for fresh := false; backoff.Steps > 0; fresh = true {
		next, ok := ledger.RecordCheck(&xa.Status, p.attempt, p.check.verdict, p.check.rec, p.env)
		if !ok && fresh {
			return ctrl.Result{}, nil
		}
		var err error
		if ok {
			upd := xa.DeepCopy()
			upd.Status = *next.Status
			if err = r.updateStatus(ctx, upd); err == nil {
				r.afterWrite(ctx, xa.Status.Phase, upd, next, destinationID(upd))
				return requeueAt(next.At, r.Clock.Now()), nil
			}
			switch {
			case errors.Is(err, errStatusRefused):
				// Asking again would only repeat the post-check; a person must look (the event says why).
				return ctrl.Result{}, r.refused(xa, fmt.Sprintf("the post-check verdict %s", p.check.verdict), err)
			case apierrors.IsNotFound(err):
				return ctrl.Result{}, nil
			case apierrors.IsConflict(err):
				backoff.Steps--
			default:
				if serr := sleepStep(ctx, &backoff); serr != nil {
					return ctrl.Result{}, fmt.Errorf("recording the post-check verdict %s: %w", p.check.verdict, err)
				}
			}
		}
		cur := &actionsv1alpha1.ExternalAction{}
		if err := r.APIReader.Get(ctx, nn, cur); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		xa = cur
	}
	return ctrl.Result{RequeueAfter: time.Second}, nil
}
