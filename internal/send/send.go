// Package send performs one claimed attempt or one post-check against a resolved destination and classifies
// what came back. It is what the dispatcher runs (DESIGN rule 10): it never writes status, and every string
// it returns that a destination supplied has the destination's Secret values redacted (DESIGN rule 11): each
// response is redacted once into a redact.View, and the record, successWhen, the post-check's expressions and
// the outputs (Sender.Succeeded) all take the response from it.
package send

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/redact"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/internal/tracing"
)

const (
	// MaxRequestBodyBytes caps an action's serialized request body (RFC 8785 form), in bytes.
	MaxRequestBodyBytes = 64 << 10
	// MaxResponseBodyBytes caps the response body kept in status.response.body, in bytes.
	MaxResponseBodyBytes = actionsv1alpha1.MaxResponseBodyLength
	// minUsefulSend is the least time a send may be given: a job that cannot start that long before its
	// deadline is handed back not sent (dispatch.ErrStartDeadline) instead of being sent with no time to answer.
	minUsefulSend = time.Second
)

// selectedHeaders are the response headers kept in status.response.headers (CONTRACT).
var selectedHeaders = []string{"Location", "Content-Type", "Idempotent-Replayed", "Retry-After"}

// Result is the result of one claimed attempt or post-check, from the dispatcher or a failed write, until it
// is written (DESIGN rule 2).
type Result struct {
	Attempt int32
	Outcome ledger.Outcome
	// Env is the decision's environment with Now at the outcome's FinishedAt.
	Env ledger.Env
	// ClaimedAt is when the attempt was claimed (attempt duration metric).
	ClaimedAt time.Time
	// PauseCap bounds a Retry-After pause of the destination (its deadline).
	PauseCap time.Duration
	// Check is set for a post-check's answer (then Outcome is unused).
	Check *CheckResult
	// Unclaimed is the status the attempt was decided on, holding its claim in memory only, for an attempt sent
	// without a claim (ledger.Step.Unclaimed): its outcome is recorded with ledger.RecordUnclaimed. nil for a
	// claimed attempt.
	Unclaimed *actionsv1alpha1.ExternalActionStatus
	// Abandoned: the send was cut because the shutdown grace ended (not by its own deadline). Its outcome is
	// not recorded: the claim is left open and follows DESIGN rule 3 after a restart.
	Abandoned bool
	// Span is the context of the attempt's span (tracing.Attempt), for the span of its record; empty when the
	// attempt was not traced.
	Span trace.SpanContext
	// DeadLetter: the result of a delivery attempt of the action's dead-letter record (internal/deadletter),
	// recorded in status.deadLetter and never as an attempt of the action.
	DeadLetter bool
}

// CheckResult is a post-check's answer.
type CheckResult struct {
	Verdict ledger.Verdict
	Rec     *actionsv1alpha1.ResponseRecord
	// Skipped: the check was never sent (the manager stopped, or no slot in time): nothing to record, ask again.
	Skipped bool
	// Why says why an inconclusive answer proved nothing when an expression failed to evaluate on it; never a
	// response value (a CEL error may quote one, so its text is not kept).
	Why string
}

// Sender sends attempts and post-checks.
type Sender struct {
	Executor httpexec.Executor
	Exprs    *expr.Cache
	Clock    clock.PassiveClock
	// Succeeded runs on the redacted view of the response of a successful attempt of an action with
	// spec.outputs (the outputs hold their values from it).
	Succeeded func(ctx context.Context, xa *actionsv1alpha1.ExternalAction, view *redact.View)
}

// Job is the dispatcher job of the claimed attempt of claimed: Run sends once to target (the checked
// httpexec.JoinURL of the destination's url and the action's path) and classifies; NotRun gives the not-sent
// (or, after a panic, uncertain) outcome of a job whose Run was never called or did not return. margin is
// the claim margin: the attempt ends that long before its claim expires, to record it.
func (s *Sender) Job(claimed *actionsv1alpha1.ExternalAction, dest *destination.Resolved, target string, body []byte,
	env ledger.Env, margin time.Duration) dispatch.Job[*Result] {
	attempt := claimed.Status.Claim.Attempt
	deadline := claimed.Status.Claim.ExpiresAt.Add(-margin)
	result := func(o ledger.Outcome) *Result {
		e := env
		e.Now = o.FinishedAt
		return &Result{Attempt: attempt, Outcome: o, Env: e, ClaimedAt: env.Now, PauseCap: dest.DeadlineDur}
	}
	return dispatch.Job[*Result]{
		Destination: dest.ID,
		Key:         types.NamespacedName{Namespace: claimed.Namespace, Name: claimed.Name},
		Attempt:     attempt,
		MaxInFlight: dest.MaxInFlight,
		Deadline:    deadline,
		StartBy:     deadline.Add(-min(minUsefulSend, dest.Timeout/2)),
		Run: func(ctx context.Context) *Result {
			// The attempt ends before its claim expires (minus the margin to record it): otherwise another
			// holder could treat a request still in flight as abandoned.
			timeout := dest.Timeout
			if dl, ok := ctx.Deadline(); ok {
				timeout = min(timeout, time.Until(dl))
			}
			if timeout <= 0 {
				return result(NotSent(s.Clock.Now(), "ClaimExpired", "the claim had too little time left to send; nothing was sent"))
			}
			p := result(s.send(ctx, claimed, dest, target, body, timeout, env))
			// The dispatcher cancels (rather than lets expire) only the sends still running when the
			// shutdown grace ends.
			p.Abandoned = errors.Is(ctx.Err(), context.Canceled)
			return p
		},
		NotRun: func(err error) *Result { return result(NotRunOutcome(err, s.Clock.Now())) },
	}
}

// Traced is tracing.Attempt's done for an attempt's job: it keeps the attempt span's context with p (its trace
// id goes into the attempt's history entry) and sets the outcome's attributes on the span.
func Traced(p *Result, span trace.Span) {
	sc := span.SpanContext()
	if p == nil || !sc.IsValid() {
		return
	}
	p.Span, p.Outcome.TraceID = sc, sc.TraceID().String()
	tracing.Outcome(span, p.Outcome.StatusCode, p.Outcome.ErrorClass, string(p.Outcome.Class))
}

// UnclaimedJob is Job for an attempt sent without a claim (ledger.Step.Unclaimed): sent is the action with the
// attempt's claim in its status, in memory only; every result carries that status (Result.Unclaimed).
func (s *Sender) UnclaimedJob(sent *actionsv1alpha1.ExternalAction, dest *destination.Resolved, target string, body []byte,
	env ledger.Env, margin time.Duration) dispatch.Job[*Result] {
	job := s.Job(sent, dest, target, body, env, margin)
	run, notRun := job.Run, job.NotRun
	mark := func(p *Result) *Result {
		p.Unclaimed = sent.Status.DeepCopy()
		return p
	}
	job.Run = func(ctx context.Context) *Result { return mark(run(ctx)) }
	job.NotRun = func(err error) *Result { return mark(notRun(err)) }
	return job
}

// NotRunOutcome is the outcome of a job the dispatcher handed back without a result of Run.
func NotRunOutcome(err error, now time.Time) ledger.Outcome {
	switch {
	case errors.Is(err, dispatch.ErrRunPanicked):
		// Run was called: the request may have left (DESIGN rule 3).
		return ledger.Outcome{Class: retry.ClassUncertain, FinishedAt: now, ErrorClass: "SendPanicked",
			Error: "the send panicked; the request may have left"}
	case errors.Is(err, dispatch.ErrStartDeadline):
		return NotSent(now, "ClaimExpired", "no in-flight slot of the destination became free while the claim had time "+
			"left to send; nothing was sent")
	default: // dispatch.ErrShutdown, dispatch.ErrStopped
		return NotSent(now, "ShutdownBeforeSend", "the manager stopped before the attempt was sent; nothing was sent")
	}
}

// NotSent is the outcome of an attempt that did not leave: errorClass class, message msg.
func NotSent(now time.Time, class, msg string) ledger.Outcome {
	return ledger.Outcome{Class: retry.ClassNotSent, FinishedAt: now, ErrorClass: class, Error: msg}
}

// Account counts the attempt of p at destID and pauses the destination on a 429 or 503 with Retry-After
// (RFC 9110 section 10.2.3), never longer than the destination's deadline (p.PauseCap).
func Account(l *limiter.Registry, destID string, p *Result) {
	o := p.Outcome
	metrics.Attempts.WithLabelValues(destID, string(o.Class)).Inc()
	metrics.AttemptDuration.WithLabelValues(destID).Observe(max(o.FinishedAt.Sub(p.ClaimedAt).Seconds(), 0))
	if o.RetryAfter != "" && (o.StatusCode == 429 || o.StatusCode == 503) {
		if d, ok := retry.ParseRetryAfter(o.RetryAfter, o.FinishedAt); ok {
			// One answer pauses the whole destination, but never longer than the destination's deadline: an
			// action never waits past its deadline anyway, and a hostile Retry-After must not stop a
			// destination for a year.
			l.Pause(destID, o.FinishedAt.Add(min(d, p.PauseCap)))
		}
	}
}

// RequestBody returns the RFC 8785 canonical bytes of spec.request.body (nil without a body), refusing bodies
// over MaxRequestBodyBytes.
func RequestBody(xa *actionsv1alpha1.ExternalAction) ([]byte, error) {
	b := xa.Spec.Request.Body
	if b == nil || len(b.Raw) == 0 || string(b.Raw) == "null" {
		return nil, nil
	}
	out, err := fingerprint.CanonicalBody(b.Raw)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxRequestBodyBytes {
		return nil, fmt.Errorf("spec.request.body is %d bytes in canonical form; the limit is %d bytes", len(out), MaxRequestBodyBytes)
	}
	return out, nil
}

// SuccessProgram compiles spec.successWhen (nil without one); an error is an InvalidSpec.
func SuccessProgram(exprs *expr.Cache, xa *actionsv1alpha1.ExternalAction) (*expr.Program, error) {
	if xa.Spec.SuccessWhen == "" {
		return nil, nil
	}
	p, err := exprs.Get(xa.Spec.SuccessWhen)
	if err != nil {
		return nil, fmt.Errorf("spec.successWhen: %w", err)
	}
	return p, nil
}

// send performs one attempt to target and classifies it. The request is rebuilt identically from the spec
// each time.
func (s *Sender) send(ctx context.Context, xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved,
	target string, body []byte, timeout time.Duration, env ledger.Env) ledger.Outcome {
	h := http.Header{}
	for k, v := range xa.Spec.Request.Headers {
		h.Set(k, string(v))
	}
	if body != nil && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	for k, vs := range dest.AuthHeader {
		h[k] = append([]string(nil), vs...)
	}
	h.Set(dest.KeyHeader, xa.Status.IdempotencyKey)
	tracing.Inject(ctx, h, dest.Spec.TraceContext) // the attempt span's traceparent, beside the key (never from it)
	red, token, err := dest.Authorize(ctx, h, body, xa.Status.IdempotencyKey)
	if err != nil {
		// Nothing was sent to the destination: retried within the policy like a refused dial, not before a
		// token endpoint's Retry-After (429 or 503).
		o := NotSent(s.Clock.Now(), string(destination.ErrorClass(err)), red.String(err.Error())+"; nothing was sent")
		o.RetryAfter = red.String(httpexec.TokenRetryAfter(err))
		return o
	}
	keep := keepBytes(red)
	if xa.Spec.Outputs != nil {
		keep = max(keep, actionsv1alpha1.MaxOutputResponseBytes+red.Longest())
	}
	res := s.Executor.Execute(ctx, httpexec.Request{
		Method: destination.Method(xa), URL: target, Header: h, Body: body,
		Timeout: timeout, TLS: dest.TLS,
	}, keep)
	dest.Refused(token, res)
	view := red.View(res.Response)
	o := s.classify(xa, res, view, env, red, token != "")
	if o.Class == retry.ClassSuccess && xa.Spec.Outputs != nil && view != nil && s.Succeeded != nil {
		// Only a success holds outputs: never a failed, retried or uncertain attempt.
		s.Succeeded(context.WithoutCancel(ctx), xa, view)
	}
	return o
}

// keepBytes is how much of a response body the executor keeps: the status cap plus the longest Secret value,
// so that a value straddling the cap is seen whole and redacted (redact.Redactor.Body).
func keepBytes(red *redact.Redactor) int {
	return MaxResponseBodyBytes + red.Longest()
}

// classify turns an attempt's result, with view the redacted view of its response (nil without one), into an
// outcome. Every destination-supplied string in it (error text, Retry-After, the kept response) comes from
// the view or has the destination's Secret values redacted, and successWhen sees the view too: an expression
// over a Secret value sees only redact.Redacted (DESIGN rule 11). The retry decision reads the status code and
// the headers as received (Retry-After is a delay, not a value that is kept).
//
// renewed says that the request carried an OAuth2 token, which a 401 has dropped (Resolved.Refused): the
// 401 is then retried with a new token.
func (s *Sender) classify(xa *actionsv1alpha1.ExternalAction, res httpexec.Result, view *redact.View, env ledger.Env,
	red *redact.Redactor, renewed bool) ledger.Outcome {
	o := ledger.Outcome{FinishedAt: s.Clock.Now()}
	obs := retry.Observation{Err: res.Err, Written: res.Written, RenewedCredential: renewed}
	if res.Err != nil {
		o.ErrorClass = string(res.ErrorClass)
		o.Error = red.String(res.Err.Error())
	}
	if resp := res.Response; resp != nil {
		o.StatusCode = resp.StatusCode
		o.RetryAfter = view.RetryAfter
		o.Response = ResponseRecord(view)
		obs.StatusCode = resp.StatusCode
		obs.Header = resp.Header
		ok, err := SuccessWhen(s.Exprs, xa, view)
		if err != nil {
			// The error names the kind of failure, never a value (expr.EvalError).
			o.Error = red.String("spec.successWhen: " + err.Error() + view.NotExposed())
		}
		obs.Succeeded = ok
	}
	o.Class = retry.Classify(obs, env.Policy, env.RepeatSafe, env.KeySupported)
	return o
}

// SuccessWhen evaluates spec.successWhen (default: a 2xx status) on view, the redacted view of the response.
// An evaluation error names the kind of failure, never a response value (expr.EvalError).
func SuccessWhen(exprs *expr.Cache, xa *actionsv1alpha1.ExternalAction, view *redact.View) (bool, error) {
	if xa.Spec.SuccessWhen == "" {
		return expr.DefaultSuccess(view.StatusCode), nil
	}
	p, err := SuccessProgram(exprs, xa)
	if err != nil {
		return false, err
	}
	return p.Eval(exprResponse(view))
}

// exprResponse is the response as CEL sees it (successWhen, post-check): the redacted view, with the body cut
// at MaxResponseBodyBytes whatever the executor kept beyond it for redaction.
func exprResponse(view *redact.View) expr.Response {
	body, _ := view.Cut(MaxResponseBodyBytes)
	return expr.Response{StatusCode: view.StatusCode, Header: view.Header, Body: []byte(body)}
}

// ResponseRecord is the response as status keeps it, taken from view (the redacted view): the body cut to
// MaxResponseBodyBytes after redaction (so a value at the cut leaves nothing behind) and the selected headers,
// each cut to its bound on a UTF-8 boundary. bodySHA256 stays the hash of the body as the destination sent it.
func ResponseRecord(view *redact.View) *actionsv1alpha1.ResponseRecord {
	body, truncated := view.Cut(MaxResponseBodyBytes)
	rec := &actionsv1alpha1.ResponseRecord{
		StatusCode:    int32(view.StatusCode), //nolint:gosec // G115: HTTP status codes are three digits
		Body:          body,
		BodyTruncated: truncated,
		BodySHA256:    view.BodySHA256,
	}
	for _, name := range selectedHeaders {
		if v := view.Header.Get(name); v != "" {
			if rec.Headers == nil {
				rec.Headers = map[string]string{}
			}
			rec.Headers[name] = redact.CutUTF8(v, actionsv1alpha1.MaxResponseHeaderValueLength)
		}
	}
	return rec
}

// CheckTarget is the URL of the post-check of xa's open claim: the destination's reconciliation.path with
// {key}, {namespace} and {name} filled in (escaped), joined under its url. An error means the filled-in path
// leaves the destination's base path: nothing may be asked.
func CheckTarget(xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved) (string, error) {
	path := strings.NewReplacer("{key}", url.QueryEscape(xa.Status.IdempotencyKey),
		"{namespace}", url.PathEscape(xa.Namespace), "{name}", url.PathEscape(xa.Name)).Replace(dest.Spec.Reconciliation.Path)
	// The filled-in path is checked again: an escaped key may hold "%2F", never a dot segment.
	return httpexec.JoinURLEscapedValues(dest.Spec.URL, path)
}

// CheckJob is the dispatcher job of one post-check request about xa's open claim: Run asks and evaluates
// applied/notApplied.
func (s *Sender) CheckJob(xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved, target string,
	env ledger.Env) dispatch.Job[*Result] {
	attempt := xa.Status.Claim.Attempt
	deadline := s.Clock.Now().Add(dest.Timeout)
	idemKey := xa.Status.IdempotencyKey
	return dispatch.Job[*Result]{
		Destination: dest.ID, Key: types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name}, Attempt: attempt,
		MaxInFlight: dest.MaxInFlight, Deadline: deadline, StartBy: deadline.Add(-min(minUsefulSend, dest.Timeout/2)),
		Run: func(ctx context.Context) *Result {
			res, red := s.askCheck(ctx, dest, target, idemKey)
			return &Result{Attempt: attempt, Env: env, Check: s.verdict(dest, res, red)}
		},
		NotRun: func(error) *Result {
			return &Result{Attempt: attempt, Env: env, Check: &CheckResult{Skipped: true}}
		},
	}
}

// askCheck sends the post-check request (method default GET) with the destination's auth, signature and the
// key, and returns its result with the request's redactor. Without an OAuth2 token nothing is sent (the
// result is a TokenUnavailable error: inconclusive).
func (s *Sender) askCheck(ctx context.Context, dest *destination.Resolved, target, idemKey string) (httpexec.Result, *redact.Redactor) {
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
	red, token, err := dest.Authorize(ctx, h, nil, idemKey)
	if err != nil {
		return httpexec.Result{Err: err, ErrorClass: destination.ErrorClass(err)}, red
	}
	res := s.Executor.Execute(ctx, httpexec.Request{Method: m, URL: target, Header: h, Timeout: timeout, TLS: dest.TLS},
		keepBytes(red))
	if dest.Refused(token, res) {
		// A refused token says nothing about the effect: inconclusive, whatever applied/notApplied would make of
		// a 401 (a broad notApplied such as statusCode >= 400 would otherwise allow a re-send).
		return httpexec.Result{Err: errors.New("the post-check's OAuth2 access token was refused (401); a new one is fetched for the next check"),
			ErrorClass: httpexec.ClassTokenUnavailable}, red
	}
	return res, red
}

// verdict evaluates the post-check's applied and notApplied expressions on its response; a failed request
// or a response neither proves is inconclusive.
func (s *Sender) verdict(dest *destination.Resolved, res httpexec.Result, red *redact.Redactor) *CheckResult {
	out := &CheckResult{Verdict: ledger.VerdictInconclusive}
	if res.Err != nil || res.Response == nil {
		return out
	}
	rc := dest.Spec.Reconciliation
	// The record goes into the action's status: the exposed view. applied and notApplied are the destination
	// admin's own expressions (on a ClusterDestination, beside its expose): they judge the whole view, and the
	// action learns only their verdict.
	out.Rec = ResponseRecord(red.View(res.Response))
	in := exprResponse(red.WholeView(res.Response))
	var failed []string
	for _, c := range []struct {
		field, src string
		verdict    ledger.Verdict
	}{{"applied", rc.Applied, ledger.VerdictApplied}, {"notApplied", rc.NotApplied, ledger.VerdictNotApplied}} {
		p, err := s.Exprs.Get(c.src)
		if err != nil {
			failed = append(failed, "spec.reconciliation."+c.field+" does not compile")
			continue
		}
		ok, err := p.Eval(in)
		if err != nil {
			failed = append(failed, "spec.reconciliation."+c.field+" failed to evaluate on the response")
			continue
		}
		if ok {
			out.Verdict = c.verdict
			return out
		}
	}
	out.Why = strings.Join(failed, "; ")
	return out
}
