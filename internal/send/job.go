package send

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/types"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/redact"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/internal/tracing"
)

// kind is what a job sends: it decides how the answer is read (an outcome or a post-check verdict) and which
// Result fields carry it.
type kind int

const (
	// kindAttempt is an attempt of the action's own request: its outcome is an attempt of the action.
	kindAttempt kind = iota
	// kindCheck is a post-check about an uncertain attempt: its answer is a verdict (Result.Check).
	kindCheck
	// kindDeadLetter is a delivery attempt of the action's dead-letter record (Result.DeadLetter), recorded in
	// status.deadLetter.
	kindDeadLetter
)

// request is one job's request, with everything that differs between the kinds of job as data. What does not
// differ (the destination's auth headers, its key header, the OAuth2 token and the signature, the timeout, the
// executor, the drop of a refused token, the redacted view) is done by exchange alone.
type request struct {
	kind kind
	// xa is the action the job is for (the dispatcher's key); an attempt's successWhen and outputs are its.
	xa   *actionsv1alpha1.ExternalAction
	dest *destination.Resolved
	// method and target are the request line; header the kind's own headers (spec.request.headers, a record's
	// CloudEvent attributes), to which the destination's are added; body is nil without one.
	method, target string
	header         http.Header
	body           []byte
	// key is sent in the destination's key header and is the signature's message id.
	key string
	// keep is how much of the response body the executor keeps beyond the longest Secret value (0: nothing).
	keep int
	// success says whether a response is a success (an attempt's successWhen, else a 2xx); unused by a check.
	success func(*redact.View) (bool, error)
	// attempt, deadline and env are the job's attempt number, the time it must be over by, and its decision
	// environment (env.Now is when it was claimed).
	attempt  int32
	deadline time.Time
	env      ledger.Env
	// unclaimed is the status of an attempt sent without a claim, kept with each of its results.
	unclaimed *actionsv1alpha1.ExternalActionStatus
	// claimed is the action as its claim write returned it (Job only), kept with each of its results.
	claimed *actionsv1alpha1.ExternalAction
}

// Job is the dispatcher job of the claimed attempt of claimed: Run sends once to target (the checked
// httpexec.JoinURL of the destination's url and the action's path) and classifies; NotRun gives the not-sent
// (or, after a panic, uncertain) outcome of a job whose Run was never called or did not return. margin is
// the claim margin: the attempt ends that long before its claim expires, to record it.
func (s *Sender) Job(claimed *actionsv1alpha1.ExternalAction, dest *destination.Resolved, target string, body []byte,
	env ledger.Env, margin time.Duration) dispatch.Job[*Result] {
	r := s.attempt(claimed, dest, target, body, env, margin)
	r.claimed = claimed
	return s.job(r)
}

// UnclaimedJob is Job for an attempt sent without a claim (ledger.Step.Unclaimed): sent is the action with the
// attempt's claim in its status, in memory only; every result carries that status (Result.Unclaimed).
func (s *Sender) UnclaimedJob(sent *actionsv1alpha1.ExternalAction, dest *destination.Resolved, target string, body []byte,
	env ledger.Env, margin time.Duration) dispatch.Job[*Result] {
	r := s.attempt(sent, dest, target, body, env, margin)
	r.unclaimed = &sent.Status
	return s.job(r)
}

// CheckJob is the dispatcher job of one post-check request about xa's open claim: Run asks (method default GET,
// with the destination's auth, signature and the action's key) and evaluates applied/notApplied.
func (s *Sender) CheckJob(xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved, target string,
	env ledger.Env) dispatch.Job[*Result] {
	method := dest.Spec.Reconciliation.Method
	if method == "" {
		method = http.MethodGet
	}
	return s.job(request{kind: kindCheck, xa: xa, dest: dest, method: method, target: target, key: xa.Status.IdempotencyKey,
		keep: MaxResponseBodyBytes, attempt: xa.Status.Claim.Attempt, deadline: s.Clock.Now().Add(dest.Timeout), env: env})
}

// DeadLetterJob is the dispatcher job of the claimed delivery attempt of claimed's dead-letter record: one POST
// of the record (header and body, as internal/deadletter encoded it) to target under the record's key
// (status.deadLetter.idempotencyKey), with the sink's auth and signature, classified by the sink's retry rules
// (env: the sink's policy) with a 2xx as success. It ends env.Margin() before its claim expires.
func (s *Sender) DeadLetterJob(claimed *actionsv1alpha1.ExternalAction, sink *destination.Resolved, target string,
	header http.Header, body []byte, env ledger.Env) dispatch.Job[*Result] {
	dl := claimed.Status.DeadLetter
	return s.job(request{kind: kindDeadLetter, xa: claimed, dest: sink, method: http.MethodPost, target: target,
		header: header, body: body, key: dl.IdempotencyKey, success: defaultSuccess, attempt: dl.Claim.Attempt,
		deadline: dl.Claim.ExpiresAt.Add(-env.Margin()), env: env})
}

// attempt is the request of an attempt of xa's own request.
func (s *Sender) attempt(xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved, target string, body []byte,
	env ledger.Env, margin time.Duration) request {
	h := make(http.Header, len(xa.Spec.Request.Headers)+1)
	for k, v := range xa.Spec.Request.Headers {
		h.Set(k, string(v))
	}
	if body != nil && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	keep := MaxResponseBodyBytes
	if xa.Spec.Outputs != nil {
		keep = max(keep, actionsv1alpha1.MaxOutputResponseBytes)
	}
	return request{kind: kindAttempt, xa: xa, dest: dest, method: destination.Method(xa), target: target, header: h, body: body,
		key: xa.Status.IdempotencyKey, keep: keep, attempt: xa.Status.Claim.Attempt,
		deadline: xa.Status.Claim.ExpiresAt.Add(-margin), env: env,
		success: func(view *redact.View) (bool, error) { return SuccessWhen(s.Exprs, xa, view) }}
}

// defaultSuccess is the success of a request without successWhen: a 2xx status.
func defaultSuccess(view *redact.View) (bool, error) {
	return expr.DefaultSuccess(view.StatusCode), nil
}

// job is the dispatcher job of r: the one place where a job of any kind is made.
func (s *Sender) job(r request) dispatch.Job[*Result] {
	return dispatch.Job[*Result]{
		Destination: r.dest.ID,
		Key:         types.NamespacedName{Namespace: r.xa.Namespace, Name: r.xa.Name},
		Attempt:     r.attempt,
		Bytes:       r.bytes(),
		MaxInFlight: r.dest.MaxInFlight,
		Deadline:    r.deadline,
		StartBy:     r.deadline.Add(-min(minUsefulSend, r.dest.Timeout/2)),
		Run:         func(ctx context.Context) *Result { return s.run(ctx, r) },
		NotRun: func(err error) *Result {
			if r.kind == kindCheck {
				return r.checked(&CheckResult{Skipped: true})
			}
			return r.outcome(NotRunOutcome(err, s.Clock.Now()))
		},
	}
}

// Bytes a send is counted to hold besides its bodies: the connection's read and write buffers, a TLS record
// buffer, the hasher and the goroutines of the request (an estimate of net/http's and crypto/tls's own).
const connBytes = 64 << 10

// keptCopies is how many copies of the kept response body a send is counted to hold at once: as read, as
// decoded, redacted, and as the view its expressions and status read.
const keptCopies = 4

// bytes is what r is counted to hold while it runs (dispatch.Job.Bytes, taken from the process's byte budget
// before it is sent): its request body, keptCopies copies of the response body it keeps, and connBytes.
func (r request) bytes() int64 {
	return int64(len(r.body)) + keptCopies*int64(max(r.keep, 0)) + connBytes
}

// run sends r once and reads the answer. The request ends before the job's deadline (for a claimed job, the
// claim's expiry minus the margin to record it): otherwise another holder could treat a request still in
// flight as abandoned.
func (s *Sender) run(ctx context.Context, r request) *Result {
	timeout := r.dest.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		if r.kind == kindCheck {
			return r.checked(&CheckResult{Skipped: true}) // nothing was asked: ask again
		}
		return r.outcome(NotSent(s.Clock.Now(), "ClaimExpired", "the claim had too little time left to send; nothing was sent"))
	}
	ex := s.exchange(ctx, r, timeout)
	if r.kind == kindCheck {
		return r.checked(s.verdict(r.dest, ex.checkResult(), ex.red, r.xa.Namespace))
	}
	view := ex.red.View(ex.res.Response) // nil without a response
	p := r.outcome(s.classify(r, ex, view))
	if r.kind == kindAttempt && p.Outcome.Class == retry.ClassSuccess && r.xa.Spec.Outputs != nil && view != nil &&
		s.Succeeded != nil {
		// Only a success holds outputs: never a failed, retried or uncertain attempt.
		s.Succeeded(context.WithoutCancel(ctx), r.xa, view)
	}
	// The dispatcher cancels (rather than lets expire) only the sends still running when the shutdown grace ends.
	p.Abandoned = errors.Is(ctx.Err(), context.Canceled)
	return p
}

// exchanged is what one request came to: the executor's result and the request's redactor, or the Authorize
// error that kept it from leaving.
type exchanged struct {
	res httpexec.Result
	// red is the redactor of this request: the destination's Secret values and its token.
	red *redact.Redactor
	// renewed: the request carried an OAuth2 token, which a 401 has dropped (refused): the next request gets a
	// new one.
	renewed, refused bool
	authErr          error
}

// exchange builds r's request (the kind's headers, the destination's auth headers, the key, the traceparent),
// authorizes it (the OAuth2 token, the signature), sends it once through the executor (the one call site of
// every kind) and drops a token the destination refused with a 401 (destination.Resolved.Refused). Nothing is
// sent when Authorize fails. The answer is read only through red (a redact.View: run, verdict).
func (s *Sender) exchange(ctx context.Context, r request, timeout time.Duration) exchanged {
	dest := r.dest
	h := make(http.Header, len(r.header)+len(dest.AuthHeader)+2)
	for k, vs := range r.header {
		h[k] = append([]string(nil), vs...)
	}
	for k, vs := range dest.AuthHeader {
		h[k] = append([]string(nil), vs...)
	}
	h.Set(dest.KeyHeader, r.key)
	tracing.Inject(ctx, h, dest.Spec.TraceContext) // the job span's traceparent, beside the key (never from it)
	red, token, err := dest.Authorize(ctx, h, r.body, r.key)
	if err != nil {
		return exchanged{red: red, authErr: err}
	}
	keep := 0
	if r.keep > 0 {
		// The longest Secret value beyond the cap: a value straddling it is seen whole and redacted
		// (redact.Redactor.Body).
		keep = r.keep + red.Longest()
	}
	res := s.Executor.Execute(ctx, httpexec.Request{Method: r.method, URL: r.target, Header: h, Body: r.body,
		Timeout: timeout, TLS: dest.TLS, Flow: r.xa.Namespace}, keep)
	refused := dest.Refused(token, res)
	return exchanged{res: res, red: red, renewed: token != "", refused: refused}
}

// checkResult is the post-check's result of ex: the Authorize error, or a refused token, as an inconclusive
// failure (a refused token says nothing about the effect, whatever applied/notApplied would make of a 401: a
// broad notApplied such as statusCode >= 400 would otherwise allow a re-send).
func (ex exchanged) checkResult() httpexec.Result {
	switch {
	case ex.authErr != nil:
		return httpexec.Result{Err: ex.authErr, ErrorClass: destination.ErrorClass(ex.authErr)}
	case ex.refused:
		return httpexec.Result{Err: errors.New("the post-check's OAuth2 access token was refused (401); a new one is fetched for the next check"),
			ErrorClass: httpexec.ClassTokenUnavailable}
	}
	return ex.res
}

// outcome is the Result of an attempt or a delivery with outcome o.
func (r request) outcome(o ledger.Outcome) *Result {
	env := r.env
	env.Now = o.FinishedAt
	p := &Result{Attempt: r.attempt, Outcome: o, Env: env, ClaimedAt: r.env.Now, PauseCap: r.dest.DeadlineDur,
		DeadLetter: r.kind == kindDeadLetter, Claimed: r.claimed}
	if r.unclaimed != nil {
		p.Unclaimed = r.unclaimed.DeepCopy()
	}
	return p
}

// checked is the Result of a post-check with answer c.
func (r request) checked(c *CheckResult) *Result {
	return &Result{Attempt: r.attempt, Env: r.env, Check: c}
}

// classify turns an attempt's or a delivery's exchange, with view the redacted view of its response (nil
// without one), into an outcome. Every destination-supplied string in it
// (error text, Retry-After, the kept response) comes from the redacted view or has the destination's Secret
// values redacted, and successWhen sees the view too: an expression over a Secret value sees only
// redact.Redacted (DESIGN rule 11). The retry decision reads the status code and the headers as received
// (Retry-After is a delay, not a value that is kept). A request that carried an OAuth2 token, dropped on a 401,
// has that 401 retried with a new token. A request Authorize stopped is NotSent, retried within the policy
// like a refused dial, not before a token endpoint's Retry-After (429 or 503).
func (s *Sender) classify(r request, ex exchanged, view *redact.View) ledger.Outcome {
	red := ex.red
	if err := ex.authErr; err != nil {
		o := NotSent(s.Clock.Now(), string(destination.ErrorClass(err)), red.String(err.Error())+"; nothing was sent")
		o.RetryAfter = red.String(httpexec.TokenRetryAfter(err))
		return o
	}
	res := ex.res
	o := ledger.Outcome{FinishedAt: s.Clock.Now()}
	obs := retry.Observation{Err: res.Err, Written: res.Written, RenewedCredential: ex.renewed}
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
		ok, err := r.success(view)
		if err != nil {
			// The error names the kind of failure, never a value (expr.EvalError).
			o.Error = red.String("spec.successWhen: " + err.Error() + view.NotExposed())
		}
		obs.Succeeded = ok
		if unfinished(err) {
			// No verdict without an evaluation (DESIGN rule 12): the class should successWhen not hold is kept
			// for the later evaluation (Judge), with the input it must see again.
			obs.Succeeded = false
			return unjudged(o, exprResponse(view), retry.Classify(obs, r.env.Policy, r.env.RepeatSafe, r.env.KeySupported), err)
		}
	}
	o.Class = retry.Classify(obs, r.env.Policy, r.env.RepeatSafe, r.env.KeySupported)
	return o
}

// unfinished reports whether err, successWhen's evaluation error, drew no verdict: it did not finish
// (expr.Unfinished) or cannot (expr.NeverFinishes).
func unfinished(err error) bool { return expr.Unfinished(err) || expr.NeverFinishes(err) }

// unjudged is o, an attempt's outcome with a response, as ClassUnjudged: in is the expression's input, otherwise
// the class should successWhen not hold, err why the evaluation drew no verdict. The pending verdict keeps
// in's headers and digest (the status code and body are status.response's); an evaluation that can never
// finish (expr.NeverFinishes), or headers over MaxPendingVerdictHeaderBytes, make it Unjudgeable.
func unjudged(o ledger.Outcome, in expr.Response, otherwise retry.Class, err error) ledger.Outcome {
	o.Class = retry.ClassUnjudged
	headers := expr.Headers(in.Header)
	size := 0
	for k, v := range headers {
		size += len(k) + len(v)
	}
	kind := err.Error()
	if e, ok := errors.AsType[*expr.EvalError](err); ok {
		kind = e.Kind
	}
	switch {
	case expr.NeverFinishes(err):
		o.Unjudgeable = "spec.successWhen cannot be evaluated on this response (" + kind + ")"
	case size > actionsv1alpha1.MaxPendingVerdictHeaderBytes:
		o.Unjudgeable = fmt.Sprintf("spec.successWhen's evaluation did not finish (%s), and the response's headers "+
			"(%d bytes) are too large to keep for a later evaluation (limit %d bytes)", kind, size,
			actionsv1alpha1.MaxPendingVerdictHeaderBytes)
	}
	o.Verdict = &actionsv1alpha1.PendingVerdict{ReceivedAt: metav1.NewTime(o.FinishedAt), Headers: headers,
		InputSHA256: inputDigest(in.StatusCode, headers, in.Body), Otherwise: string(otherwise), Reason: kind}
	return o
}

// inputDigest is the hex SHA-256 of an expression's input: the status code, the headers as it sees them (sorted
// by name) and the body, each length-prefixed so that no two inputs share a digest by moving bytes between them.
func inputDigest(code int, headers map[string]string, body []byte) string {
	h := sha256.New()
	field := func(b []byte) {
		_ = binary.Write(h, binary.BigEndian, uint64(len(b)))
		h.Write(b)
	}
	field([]byte(strconv.Itoa(code)))
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		field([]byte(k))
		field([]byte(headers[k]))
	}
	field(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Judge evaluates spec.successWhen of xa again on the response recorded for its open claim, whose verdict is
// pending (status.claim.verdict, DESIGN rule 12): the status code and body of status.response and the
// verdict's headers, the same input as the first evaluation (checked by its digest). It sends nothing. The
// outcome is for ledger.Record on that claim: Success, the verdict's recorded class when successWhen does not
// hold, or ClassUnjudged again (Unjudgeable when the input read back differs, or can never be evaluated).
//
// A success of an action with spec.outputs holds its outputs from the same recorded response (Sender.Succeeded),
// as an attempt's does: its body is status.response's, cut to MaxResponseBodyBytes.
func (s *Sender) Judge(ctx context.Context, xa *actionsv1alpha1.ExternalAction) ledger.Outcome {
	c, resp := xa.Status.Claim, xa.Status.Response
	v := c.Verdict
	o := ledger.Outcome{FinishedAt: v.ReceivedAt.Time, RetryAfter: retryAfterOf(&xa.Status, c.Attempt)}
	if resp == nil {
		o.Class, o.Unjudgeable = retry.ClassUnjudged, "the recorded response is gone from status"
		return o
	}
	o.StatusCode, o.Response = int(resp.StatusCode), resp.DeepCopy()
	header := make(http.Header, len(v.Headers))
	for k, val := range v.Headers {
		header[k] = []string{val}
	}
	in := expr.Response{StatusCode: o.StatusCode, Header: header, Body: []byte(resp.Body)}
	if inputDigest(in.StatusCode, expr.Headers(header), in.Body) != v.InputSHA256 {
		o.Class, o.Unjudgeable = retry.ClassUnjudged, "the response recorded in status is not the one received "+
			"(the API server refused the full status, so it was recorded without the body or headers)"
		return o
	}
	ok, err := s.successOn(ctx, xa, in)
	switch {
	case unfinished(err):
		return unjudged(o, in, retry.Class(v.Otherwise), err)
	case err != nil:
		o.Error = "spec.successWhen: " + err.Error()
	}
	if ok {
		o.Class = retry.ClassSuccess
		if xa.Spec.Outputs != nil && s.Succeeded != nil {
			s.Succeeded(ctx, xa, &redact.View{StatusCode: o.StatusCode, Header: header, Body: in.Body,
				BodyTruncated: resp.BodyTruncated, BodySHA256: resp.BodySHA256})
		}
	} else {
		o.Class = retry.Class(v.Otherwise)
	}
	return o
}

// retryAfterOf is the Retry-After recorded with attempt in st's history ("" without one).
func retryAfterOf(st *actionsv1alpha1.ExternalActionStatus, attempt int32) string {
	for _, r := range st.AttemptHistory {
		if r.Number == attempt {
			return r.RetryAfter
		}
	}
	return ""
}

// verdict evaluates the post-check's applied and notApplied expressions on its response; a failed request
// or a response neither proves is inconclusive.
//
// ns is the namespace of the action asked about: the flow its evaluations are served in (expr.WithFlow).
func (s *Sender) verdict(dest *destination.Resolved, res httpexec.Result, red *redact.Redactor, ns string) *CheckResult {
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
		ok, err := p.EvalContext(expr.WithFlow(context.Background(), ns), in)
		if err != nil {
			// An evaluation that did not finish decides nothing (DESIGN rule 12): the check is inconclusive, never
			// NotApplied, and is asked again within the destination's post-check bound.
			why := " failed to evaluate on the response"
			if e, unfinished := errors.AsType[*expr.EvalError](err); unfinished && expr.Unfinished(err) {
				why = "'s evaluation did not finish (" + e.Kind + ")"
			}
			failed = append(failed, "spec.reconciliation."+c.field+why)
			if c.verdict == ledger.VerdictApplied && (expr.Unfinished(err) || expr.NeverFinishes(err)) {
				break // applied is asked first: NotApplied is never drawn while applied is not known to be false
			}
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
