// Package send is the one way out for every request to a destination (DESIGN rule 10): the
// claimed attempt of an action, the post-check of an uncertain one and the delivery of its dead-letter record are
// each a kind of job (job.go), built, authorized (the OAuth2 token, the signature, the drop of a token refused
// with a 401), executed, redacted and classified by one function, so that a rule added there holds for all
// three. Admit (admit.go) is the admission each of them passes before its claim (the destination's rate limit
// and retry budget), and Account what each of their results pays (the attempt metrics, the destination's
// Retry-After pause).
//
// It is what the dispatcher runs: it never writes status, and every string it returns that a destination
// supplied has the destination's Secret values redacted (DESIGN rule 11): each response is redacted once into a
// redact.View, and the record, successWhen, the post-check's expressions and the outputs (Sender.Succeeded) all
// take the response from it.
package send

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
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
	// Claimed is the action as the write of this attempt's claim returned it (Sender.Job), for recording the
	// outcome over it when the cache does not show the claim yet (status.Writer.SettleClaimed); never changed.
	// nil for every other kind of result.
	Claimed *actionsv1alpha1.ExternalAction
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

// SuccessWhen evaluates spec.successWhen (default: a 2xx status) on view, the redacted view of the response.
// An evaluation error names the kind of failure, never a response value (expr.EvalError).
func SuccessWhen(exprs *expr.Cache, xa *actionsv1alpha1.ExternalAction, view *redact.View) (bool, error) {
	if xa.Spec.SuccessWhen == "" {
		return expr.DefaultSuccess(view.StatusCode), nil
	}
	return successOn(context.Background(), exprs, xa, exprResponse(view))
}

// successOn evaluates spec.successWhen (default: a 2xx status) on in, the expression's input. ctx carries only
// values (an evaluation slot the reconcile holds: expr.HoldSlot), never its cancellation: the evaluation has its
// own time (expr.EvalTimeout).
func successOn(ctx context.Context, exprs *expr.Cache, xa *actionsv1alpha1.ExternalAction, in expr.Response) (bool, error) {
	if xa.Spec.SuccessWhen == "" {
		return expr.DefaultSuccess(in.StatusCode), nil
	}
	p, err := SuccessProgram(exprs, xa)
	if err != nil {
		return false, err
	}
	// The action's namespace is its flow: evaluation slots are shared fairly between namespaces (expr.WithFlow).
	return p.EvalContext(expr.WithFlow(context.WithoutCancel(ctx), xa.Namespace), in)
}

// successOn is successOn with the sender's expression cache.
func (s *Sender) successOn(ctx context.Context, xa *actionsv1alpha1.ExternalAction, in expr.Response) (bool, error) {
	return successOn(ctx, s.Exprs, xa, in)
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
