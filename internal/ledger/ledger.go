// Package ledger is the ExternalAction state machine: pure functions from (status, observation, now) to
// (new status, next step). The controller is thin glue around it: it reads, calls one of these functions,
// writes the returned status (claims as an Update carrying the resourceVersion they were decided on,
// DESIGN rule 1) and performs the returned step.
//
// Nothing here does I/O or reads a clock: Env carries the time, the holder identity and the effective policy.
package ledger

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/retry"
)

// Defaults of the ledger, defined here once (CONTRACT).
const (
	// HistoryLimit is the number of finished attempts kept in status.attemptHistory; the CRD's MaxItems of that
	// field writes it out as well (TestBoundsAgree in internal/destination ties them).
	HistoryLimit = 10
	// ClaimlessWindow is how long after an action's creation its first attempt may go without a claim
	// (Env.Claimless); at least the attempt timeout plus the claim margin. It bounds what a crash-looping manager
	// can send again (docs/concepts.md "Sends without a claim").
	ClaimlessWindow = 2 * time.Minute
	// MaxUnfinishedEvaluations bounds the evaluations of one response's successWhen that do not finish (DESIGN
	// rule 12): after that many, spread by JudgeBackoff over about 15 minutes, the action waits for a person
	// (OutcomeUnknown, reason VerdictUnavailable) with the response recorded.
	MaxUnfinishedEvaluations = 20
	// DefaultClaimMargin is added to the attempt timeout to form a claim's expiry when Env.ClaimMargin is
	// not positive (--claim-margin default): the time to record the outcome.
	DefaultClaimMargin = 5 * time.Second
)

// Env is everything a decision needs besides the status.
type Env struct {
	// Now is the controller's clock.
	Now time.Time
	// Holder identifies this manager process in claims.
	Holder string
	// Generation is the object's metadata.generation (for observedGeneration).
	Generation int64
	// Policy is the effective retry policy; Policy.Deadline is absolute.
	Policy retry.Policy
	// AttemptTimeout is the per-attempt timeout of the destination.
	AttemptTimeout time.Duration
	// ClaimMargin is added to AttemptTimeout to form a claim's expiry (time to record the outcome).
	ClaimMargin time.Duration
	// RepeatSafe: effect Safe or Idempotent, or the destination dedups on the key (CONTRACT).
	RepeatSafe bool
	// Claimless: the destination lets this repeat-safe action's first attempt go without a claim
	// (idempotency.claim WhenUnsafe); Created is the object's creationTimestamp, the start of ClaimlessWindow.
	Claimless bool
	Created   time.Time
	// KeySupported: the destination dedups on the key (a 409 then means "still in progress").
	KeySupported bool
	// PostCheck: the destination has a reconciliation post-check.
	PostCheck bool
	// MaxPostChecks bounds inconclusive post-checks of one uncertain attempt.
	MaxPostChecks int32
	// Retention is how long a finished object is kept after completedAt (0: collect at once).
	Retention time.Duration
	// Rand returns a number in [0, 1) for jitter.
	Rand func() float64
	// Outputs: the action has spec.outputs, so Succeeded is Ready only once they are written (SettleOutputs).
	Outputs bool
}

// Margin is the claim margin in force: env.ClaimMargin, or DefaultClaimMargin when it is not positive.
func (e Env) Margin() time.Duration {
	if e.ClaimMargin > 0 {
		return e.ClaimMargin
	}
	return DefaultClaimMargin
}

// Kind is what the controller does after writing Step.Status (if any).
type Kind string

const (
	// KindNone: nothing to do until something changes (terminal, or waiting for a person).
	KindNone Kind = "None"
	// KindWait: requeue at Step.At; nothing may be sent before.
	KindWait Kind = "Wait"
	// KindSend: Step.Status holds a new claim; write it with the resourceVersion the decision was based on,
	// and only if that write succeeds, send attempt Step.Status.Claim.Attempt.
	KindSend Kind = "Send"
	// KindPostCheck: ask the destination's post-check about the open, uncertain claim.
	KindPostCheck Kind = "PostCheck"
	// KindJudge: the open claim's response is recorded but not judged (Claim.Verdict, DESIGN rule 12): evaluate
	// spec.successWhen again on the recorded response and apply the result with Record. Nothing is sent.
	KindJudge Kind = "Judge"
)

// Event is emitted after the status write that carries it succeeded.
type Event struct {
	// Warning selects the Warning event type (else Normal).
	Warning bool
	// Reason is a CamelCase reason.
	Reason string
	// Message is human text, never a secret.
	Message string
}

// Step is the result of a decision.
type Step struct {
	// Kind is what to do after the write.
	Kind Kind
	// At is when to look again (KindWait, and the terminal expiry for KindNone when non-zero).
	At time.Time
	// Status is the new status to write, or nil when nothing changed.
	Status *actionsv1alpha1.ExternalActionStatus
	// Event is emitted after a successful write (or at once when Status is nil).
	Event *Event
	// Unclaimed (KindSend only): Status holds the attempt's claim in memory only. The controller sends without
	// writing it, and the outcome is recorded with RecordUnclaimed (idempotency.claim WhenUnsafe).
	Unclaimed bool
}

// Outcome is what one attempt produced, as classified by the retry package.
type Outcome struct {
	// Class is the attempt's disposition.
	Class retry.Class
	// FinishedAt is when the outcome was known.
	FinishedAt time.Time
	// StatusCode is the HTTP status, 0 without a response.
	StatusCode int
	// ErrorClass is the transport failure class, "" with a response.
	ErrorClass string
	// Error is a short error text (no secrets).
	Error string
	// RetryAfter is the raw Retry-After header, if any.
	RetryAfter string
	// Response is the recorded response (capped body), nil without one.
	Response *actionsv1alpha1.ResponseRecord
	// Verdict (ClassUnjudged only) is what a later evaluation needs besides status.response: the headers as the
	// expression saw them, the digest of its input, the class should successWhen not hold, and why this
	// evaluation did not finish. Nil when the response cannot be kept for a later evaluation.
	Verdict *actionsv1alpha1.PendingVerdict
	// Unjudgeable (ClassUnjudged only), when set, says why no later evaluation can finish either (the cost limit,
	// headers too large to keep, an input that changed): the action waits for a person at once.
	Unjudgeable string
	// TraceID is the trace id of the attempt's span (internal/tracing), "" when it was not traced. It goes into
	// the attempt's history entry; a traced attempt keeps that entry even when it is the only one (Traced).
	TraceID string
}

// Traced reports whether o's attempt was traced: its attemptHistory entry is then kept, even for a single
// successful attempt, so that `kubectl actionledger history` can print the trace id.
func Traced(o Outcome) bool { return o.TraceID != "" }

// Verdict is a post-check's answer.
type Verdict string

const (
	// VerdictApplied: the effect is proven applied.
	VerdictApplied Verdict = "Applied"
	// VerdictNotApplied: the effect is proven absent.
	VerdictNotApplied Verdict = "NotApplied"
	// VerdictInconclusive: neither could be shown (including a failed post-check request).
	VerdictInconclusive Verdict = "Inconclusive"
)

// Begin initialises a fresh status: key, fingerprint, deadline and phase Pending. It returns nil when the
// status is already initialised.
func Begin(cur *actionsv1alpha1.ExternalActionStatus, key, fingerprint string, env Env) *actionsv1alpha1.ExternalActionStatus {
	if cur.Fingerprint != "" && cur.Phase != "" {
		return nil
	}
	st := cur.DeepCopy()
	st.IdempotencyKey = key
	st.Fingerprint = fingerprint
	if !env.Policy.Deadline.IsZero() {
		st.Deadline = PtrTime(env.Policy.Deadline)
	}
	setPhase(st, actionsv1alpha1.PhasePending, actionsv1alpha1.ReasonPending, "accepted; no attempt sent yet", env)
	return st
}

// Advance decides what to do with a non-terminal action when no outcome is at hand: wait for an open claim
// or the schedule, resolve an expired claim (DESIGN rule 3), end at the deadline, or claim the next attempt.
func Advance(cur *actionsv1alpha1.ExternalActionStatus, env Env) Step {
	if cur.Phase.Terminal() {
		return Step{Kind: KindNone}
	}
	if c := cur.Claim; c != nil {
		if env.Now.Before(c.ExpiresAt.Time) {
			return Step{Kind: KindWait, At: c.ExpiresAt.Time}
		}
		if c.Verdict != nil {
			return Step{Kind: KindJudge} // the response is here: judge it again, never send (DESIGN rule 12)
		}
		return uncertain(cur, env, "ClaimExpired",
			fmt.Sprintf("attempt %d by %s has no recorded outcome and its claim expired at %s", c.Attempt, c.Holder, c.ExpiresAt.UTC().Format(time.RFC3339)))
	}
	if next := cur.NextAttemptAt; next != nil && env.Now.Before(next.Time) {
		return Step{Kind: KindWait, At: next.Time}
	}
	if dl := cur.Deadline; dl != nil && !env.Now.Before(dl.Time) {
		return exhaust(cur, env, actionsv1alpha1.ReasonDeadlineExceeded,
			fmt.Sprintf("the deadline %s passed after %d attempt(s)", dl.UTC().Format(time.RFC3339), cur.Attempts))
	}
	if cur.Attempts >= maxAttempts(cur, env) {
		return exhaust(cur, env, actionsv1alpha1.ReasonAttemptsExhausted,
			fmt.Sprintf("all %d attempt(s) were made", cur.Attempts))
	}
	return claim(cur, env)
}

// claim opens attempt Attempts+1 held by env.Holder with an absolute expiry (never zero).
func claim(cur *actionsv1alpha1.ExternalActionStatus, env Env) Step {
	st := cur.DeepCopy()
	st.Attempts++
	timeout := env.AttemptTimeout
	if timeout <= 0 {
		timeout = actionsv1alpha1.DefaultTimeout
	}
	margin := env.Margin()
	// metav1.Time is stored with second precision: round the expiry up so that the stored value is never earlier
	// than timeout plus margin after the claim (a duration is never written in one unit and read in another).
	expires := env.Now.Add(timeout + margin)
	if t := expires.Truncate(time.Second); !t.Equal(expires) {
		expires = t.Add(time.Second)
	}
	st.Claim = &actionsv1alpha1.AttemptClaim{
		Attempt:   st.Attempts,
		Holder:    env.Holder,
		StartedAt: metav1.NewTime(env.Now),
		ExpiresAt: metav1.NewTime(expires),
	}
	st.NextAttemptAt = nil
	setPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonAttemptInProgress,
		fmt.Sprintf("attempt %d claimed by %s", st.Attempts, env.Holder), env)
	return Step{Kind: KindSend, Status: st, Unclaimed: unclaimed(cur, env, timeout+margin)}
}

// unclaimed reports whether the first attempt of cur may be sent without a claim: the destination allows it
// for this repeat-safe action (env.Claimless), no attempt was recorded yet, and the action is younger than
// ClaimlessWindow (or than window, the attempt timeout plus the claim margin, when that is longer).
func unclaimed(cur *actionsv1alpha1.ExternalActionStatus, env Env, window time.Duration) bool {
	if !env.Claimless || !env.RepeatSafe || cur.Attempts != 0 || cur.Claim != nil || env.Created.IsZero() {
		return false
	}
	return env.Now.Before(env.Created.Add(max(ClaimlessWindow, window)))
}

// RecordUnclaimed applies the outcome of a first attempt sent without a claim (Step.Unclaimed): sent is the
// status it was decided on, holding the claim in memory. It returns ok=false when cur shows that an attempt
// was recorded or claimed meanwhile (another manager got there first), so the caller drops the outcome.
// The attempt is counted here, at the outcome write.
func RecordUnclaimed(cur, sent *actionsv1alpha1.ExternalActionStatus, o Outcome, env Env) (Step, bool) {
	if cur.Claim != nil || cur.Attempts != 0 || cur.Phase.Terminal() || sent == nil || sent.Claim == nil {
		return Step{}, false
	}
	st := cur.DeepCopy()
	if st.Fingerprint == "" {
		st.IdempotencyKey, st.Fingerprint, st.Deadline = sent.IdempotencyKey, sent.Fingerprint, sent.Deadline
	}
	st.Claim = sent.Claim.DeepCopy()
	st.Attempts = st.Claim.Attempt
	return Record(st, st.Claim.Attempt, o, env)
}

// Record applies the outcome of attempt (DESIGN rule 2). It returns ok=false, and no step, when the status no
// longer shows that attempt open (someone else resolved it), so the caller drops the stale outcome.
func Record(cur *actionsv1alpha1.ExternalActionStatus, attempt int32, o Outcome, env Env) (Step, bool) {
	c := cur.Claim
	if c == nil || c.Attempt != attempt {
		return Step{}, false
	}
	st := cur.DeepCopy()
	pending := st.Claim.Verdict
	st.Claim.Verdict = nil // judged now, or kept again below
	rec := actionsv1alpha1.AttemptRecord{
		Number:     attempt,
		StartedAt:  c.StartedAt,
		FinishedAt: PtrTime(o.FinishedAt),
		Result:     string(o.Class),
		StatusCode: int32(o.StatusCode), //nolint:gosec // G115: HTTP status codes are three digits
		ErrorClass: o.ErrorClass,
		RetryAfter: o.RetryAfter,
		TraceID:    o.TraceID,
	}
	if !firstSuccess(st, attempt, o) || Traced(o) { // a traced attempt keeps its entry, for its trace id
		upsertHistory(st, rec)
	}
	if o.Response != nil {
		st.Response = o.Response.DeepCopy()
	}
	st.LastError = lastError(o)
	switch o.Class {
	case retry.ClassUnjudged:
		return unjudged(st, pending, attempt, o, env), true
	case retry.ClassSuccess:
		st.Claim = nil
		st.LastError = ""
		finish(st, env, actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.ReasonSucceeded,
			fmt.Sprintf("attempt %d succeeded with status %d", attempt, o.StatusCode))
		awaitOutputs(st, env, actionsv1alpha1.ReasonOutputsPending, "writing the outputs taken from the response")
		return Step{Kind: KindNone, Status: st, At: expiry(st),
			Event: &Event{Reason: actionsv1alpha1.ReasonSucceeded, Message: fmt.Sprintf("attempt %d succeeded with status %d", attempt, o.StatusCode)}}, true
	case retry.ClassRejected:
		st.Claim = nil
		msg := fmt.Sprintf("attempt %d was rejected with status %d; the response is the outcome", attempt, o.StatusCode)
		finish(st, env, actionsv1alpha1.PhaseFailed, actionsv1alpha1.ReasonRejected, msg)
		return Step{Kind: KindNone, Status: st, At: expiry(st), Event: &Event{Warning: true, Reason: actionsv1alpha1.ReasonRejected, Message: msg}}, true
	case retry.ClassUncertain:
		if env.RepeatSafe {
			st.Claim = nil
			return retried(schedule(st, env, o.RetryAfter, fmt.Sprintf("attempt %d is uncertain (%s); repeating is safe", attempt, describe(o)))), true
		}
		// Keep the claim open until its expiry: the uncertain path (post-check or OutcomeUnknown) takes over. The
		// post-check is asked only after the expiry (timeout plus margin), because a slow destination may still
		// commit the request that timed out, and a "not applied" answer before that leads to a duplicate.
		step := uncertain(st, env, o.ErrorClass, fmt.Sprintf("attempt %d is uncertain (%s)", attempt, describe(o)))
		if step.Status == nil {
			step.Status = st
		}
		return step, true
	default: // Retryable, NotSent, InProgress
		st.Claim = nil
		return retried(schedule(st, env, o.RetryAfter, fmt.Sprintf("attempt %d: %s", attempt, describe(o)))), true
	}
}

// JudgeBackoff is the wait before the n-th (1-based) evaluation of a response whose verdict is pending: 1 s,
// doubled each time, at most a minute.
func JudgeBackoff(n int32) time.Duration {
	if n > 6 {
		return time.Minute
	}
	return min(time.Second<<max(n-1, 0), time.Minute)
}

// unjudged records an attempt whose response arrived but whose successWhen evaluation did not finish (DESIGN
// rule 12): no verdict. The claim stays open with the pending verdict (prev's, when this response was already
// pending, with its count raised), its expiry moved to the next evaluation (JudgeBackoff), phase InProgress with
// reason VerdictPending. When no evaluation can finish (o.Unjudgeable), or MaxUnfinishedEvaluations did not,
// the action is OutcomeUnknown, reason VerdictUnavailable, for a person: never Failed, and nothing is resent.
func unjudged(st *actionsv1alpha1.ExternalActionStatus, prev *actionsv1alpha1.PendingVerdict, attempt int32, o Outcome,
	env Env) Step {
	v := o.Verdict
	if prev != nil {
		v = prev.DeepCopy()
		if o.Verdict != nil {
			v.Reason = o.Verdict.Reason
		}
	}
	why := o.Unjudgeable
	if v != nil {
		v = v.DeepCopy()
		v.Evaluations++
		if why == "" && v.Evaluations >= MaxUnfinishedEvaluations {
			why = fmt.Sprintf("%d evaluations of spec.successWhen did not finish (the last: %s)", v.Evaluations, v.Reason)
		}
	} else if why == "" {
		why = "the response could not be kept for a later evaluation"
	}
	if why != "" {
		st.Claim = nil
		msg := fmt.Sprintf("attempt %d was answered with status %d, but no verdict could be drawn: %s. The response is "+
			"recorded in status.response and nothing is sent again: decide with the %s annotation (applied, "+
			"not-applied or retry)", attempt, o.StatusCode, why, actionsv1alpha1.AnnotationResolve)
		finish(st, env, actionsv1alpha1.PhaseOutcomeUnknown, actionsv1alpha1.ReasonVerdictUnavailable, msg)
		return Step{Kind: KindNone, Status: st, Event: &Event{Warning: true, Reason: actionsv1alpha1.ReasonVerdictUnavailable, Message: msg}}
	}
	st.Claim.Verdict = v
	st.Claim.ExpiresAt = metav1.NewTime(CeilSecond(env.Now.Add(JudgeBackoff(v.Evaluations))))
	setPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonVerdictPending, fmt.Sprintf(
		"attempt %d was answered with status %d, and spec.successWhen's evaluation did not finish (%s; %d time(s)): "+
			"no verdict yet. The recorded response is judged again at %s; nothing is sent again", attempt, o.StatusCode,
		v.Reason, v.Evaluations, st.Claim.ExpiresAt.UTC().Format(time.RFC3339)), env)
	return Step{Kind: KindWait, At: st.Claim.ExpiresAt.Time, Status: st}
}

// retried gives a step that schedules a retry after a failed attempt its Warning Event (reason RetryScheduled),
// so that failures show while they are retried, not only at the end. The message names the attempt, so the
// events API counts repeats of the same failure in one Event's series. A step that ended the action keeps
// its own event.
func retried(step Step) Step {
	if step.Event == nil && step.Status != nil && step.Status.Phase == actionsv1alpha1.PhaseInProgress {
		step.Event = &Event{Warning: true, Reason: actionsv1alpha1.ReasonRetryScheduled, Message: conditionMessage(step.Status)}
	}
	return step
}

func conditionMessage(st *actionsv1alpha1.ExternalActionStatus) string {
	if c := meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionReconciling); c != nil {
		return c.Message
	}
	return ""
}

// uncertain resolves an open claim whose outcome is unknown (DESIGN rule 3): resend when repeating is safe,
// ask the post-check when there is one, else OutcomeUnknown with no automatic resend.
func uncertain(cur *actionsv1alpha1.ExternalActionStatus, env Env, errorClass, why string) Step {
	c := cur.Claim
	st := cur.DeepCopy()
	added := !hasHistory(st, c.Attempt)
	if added {
		upsertHistory(st, actionsv1alpha1.AttemptRecord{
			Number: c.Attempt, StartedAt: c.StartedAt, FinishedAt: PtrTime(env.Now),
			Result: string(retry.ClassUncertain), ErrorClass: errorClass,
		})
	}
	switch {
	case env.RepeatSafe:
		st.Claim = nil
		return schedule(st, env, "", why+"; repeating is safe, resending with the same key")
	case env.PostCheck && c.PostChecks < maxPostChecks(env):
		if cur.Phase != actionsv1alpha1.PhaseInProgress || !condReason(cur, actionsv1alpha1.ConditionReconciling, actionsv1alpha1.ReasonPostCheckPending) {
			setPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonPostCheckPending, why+"; asking the post-check", env)
			return Step{Kind: KindPostCheck, Status: st}
		}
		if !added {
			return Step{Kind: KindPostCheck} // nothing changed: ask again without a write
		}
		return Step{Kind: KindPostCheck, Status: st}
	default:
		st.Claim = nil
		msg := why + "; nothing can prove whether it was applied, so it is not resent: decide with the " +
			actionsv1alpha1.AnnotationResolve + " annotation (applied, not-applied or retry)"
		if env.PostCheck {
			msg = why + fmt.Sprintf("; %d post-check(s) were inconclusive", c.PostChecks) + msg[len(why):]
		}
		finish(st, env, actionsv1alpha1.PhaseOutcomeUnknown, actionsv1alpha1.ReasonOutcomeUnknown, msg)
		st.LastError = Truncate(why)
		return Step{Kind: KindNone, Status: st, Event: &Event{Warning: true, Reason: actionsv1alpha1.ReasonOutcomeUnknown, Message: msg}}
	}
}

// RecordCheck applies a post-check verdict for the open claim of attempt.
//
// why says, for an inconclusive verdict, why the check proved nothing when that is not plain from the answer (an
// applied or notApplied expression that failed to evaluate); it goes into the condition message. It never
// carries a response value.
func RecordCheck(cur *actionsv1alpha1.ExternalActionStatus, attempt int32, v Verdict, resp *actionsv1alpha1.ResponseRecord,
	why string, env Env) (Step, bool) {
	c := cur.Claim
	if c == nil || c.Attempt != attempt {
		return Step{}, false
	}
	st := cur.DeepCopy()
	switch v {
	case VerdictApplied:
		st.Claim = nil
		if resp != nil {
			st.Response = resp.DeepCopy()
		}
		markHistory(st, attempt, "Applied")
		st.LastError = ""
		msg := fmt.Sprintf("the post-check proved attempt %d applied", attempt)
		finish(st, env, actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.ReasonSucceeded, msg)
		awaitOutputs(st, env, actionsv1alpha1.ReasonOutputsNotAvailable, "the post-check proved the attempt applied, "+
			"but its answer is not the action's response: the outputs cannot be taken from it")
		return Step{Kind: KindNone, Status: st, At: expiry(st), Event: &Event{Reason: actionsv1alpha1.ReasonSucceeded, Message: msg}}, true
	case VerdictNotApplied:
		st.Claim = nil
		markHistory(st, attempt, "NotApplied")
		return schedule(st, env, "", fmt.Sprintf("the post-check proved attempt %d not applied", attempt)), true
	default:
		st.Claim.PostChecks++
		if why != "" {
			why = " (" + why + ")"
		}
		if st.Claim.PostChecks >= maxPostChecks(env) {
			return uncertain(st, Env{Now: env.Now, Holder: env.Holder, Generation: env.Generation, Policy: env.Policy,
				Retention: env.Retention, PostCheck: false, Rand: env.Rand}, "PostCheckInconclusive",
				fmt.Sprintf("attempt %d is uncertain and %d post-check(s) were inconclusive%s", attempt, st.Claim.PostChecks, why)), true
		}
		wait := retry.Backoff(env.Policy, int(st.Claim.PostChecks), env.Rand)
		st.Claim.ExpiresAt = metav1.NewTime(CeilSecond(env.Now.Add(wait)))
		setPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonPostCheckPending,
			fmt.Sprintf("post-check %d for attempt %d was inconclusive%s; asking again at %s", st.Claim.PostChecks, attempt, why,
				st.Claim.ExpiresAt.UTC().Format(time.RFC3339)), env)
		return Step{Kind: KindWait, At: st.Claim.ExpiresAt.Time, Status: st}, true
	}
}

// schedule decides the next attempt after a failure that proves nothing was applied, or where repeating is
// safe (DESIGN rule 5): max(Retry-After, jittered backoff), or Exhausted when that passes the deadline or
// no attempt is left.
func schedule(st *actionsv1alpha1.ExternalActionStatus, env Env, retryAfter, why string) Step {
	p := env.Policy
	p.MaxAttempts = maxAttempts(st, env)
	d := retry.Next(p, st.Attempts, retryAfter, env.Now, env.Rand)
	if !d.Retry {
		return exhaust(st, env, retryReason(d.Reason), why+"; "+d.Message)
	}
	// Status times keep whole seconds on the wire (RFC 3339): round up, never down, so that an event that
	// re-reads the stored status cannot send before the scheduled time (C10).
	next := CeilSecond(d.NextAt)
	st.NextAttemptAt = PtrTime(next)
	msg := fmt.Sprintf("%s; next attempt at %s", why, next.UTC().Format(time.RFC3339))
	setPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonRetryScheduled, msg, env)
	return Step{Kind: KindWait, At: next, Status: st}
}

func exhaust(cur *actionsv1alpha1.ExternalActionStatus, env Env, reason, msg string) Step {
	st := cur.DeepCopy()
	st.Claim = nil
	st.NextAttemptAt = nil
	finish(st, env, actionsv1alpha1.PhaseExhausted, reason, msg)
	return Step{Kind: KindNone, Status: st, At: expiry(st), Event: &Event{Warning: true, Reason: reason, Message: msg}}
}

// Fail ends the action Failed for a reason that no retry can fix (an invalid spec), sending nothing.
func Fail(cur *actionsv1alpha1.ExternalActionStatus, reason, msg string, env Env) Step {
	if cur.Phase == actionsv1alpha1.PhaseFailed && condReason(cur, actionsv1alpha1.ConditionStalled, reason) && cur.LastError == msg {
		return Step{Kind: KindNone}
	}
	st := cur.DeepCopy()
	st.LastError = Truncate(msg)
	finish(st, env, actionsv1alpha1.PhaseFailed, reason, msg)
	return Step{Kind: KindNone, Status: st, At: expiry(st), Event: &Event{Warning: true, Reason: reason, Message: msg}}
}

// Conflict ends the action Conflict: its key is bound to another fingerprint (DESIGN rule 6). Nothing is sent.
func Conflict(cur *actionsv1alpha1.ExternalActionStatus, msg string, env Env) Step {
	if cur.Phase == actionsv1alpha1.PhaseConflict {
		return Step{Kind: KindNone}
	}
	st := cur.DeepCopy()
	st.LastError = Truncate(msg)
	finish(st, env, actionsv1alpha1.PhaseConflict, actionsv1alpha1.ReasonFingerprintConflict, msg)
	st.ExpiresAt = nil // a conflicting object is the user's to fix or delete; it is never collected
	return Step{Kind: KindNone, Status: st, Event: &Event{Warning: true, Reason: actionsv1alpha1.ReasonFingerprintConflict, Message: msg}}
}

// Tombstone is the part of an ActionTombstone that a replay needs.
type Tombstone struct {
	UID         string
	Phase       actionsv1alpha1.Phase
	StatusCode  int32
	CompletedAt *metav1.Time
	// Response is the tombstone's recorded response (kept headers and capped body), nil when it kept none.
	Response *actionsv1alpha1.ResponseRecord
}

// Replay gives a re-created action the recorded outcome of its tombstone (same key, same fingerprint; DESIGN rule 7).
func Replay(cur *actionsv1alpha1.ExternalActionStatus, key, fingerprint string, t Tombstone, env Env) Step {
	st := cur.DeepCopy()
	st.IdempotencyKey = key
	st.Fingerprint = fingerprint
	st.ReplayedFrom = &actionsv1alpha1.ReplaySource{UID: t.UID, CompletedAt: t.CompletedAt, Phase: t.Phase}
	switch {
	case t.Response != nil:
		st.Response = t.Response.DeepCopy()
	case t.StatusCode != 0:
		st.Response = &actionsv1alpha1.ResponseRecord{StatusCode: t.StatusCode}
	}
	phase := t.Phase
	if !phase.Terminal() || phase == actionsv1alpha1.PhaseConflict {
		phase = actionsv1alpha1.PhaseOutcomeUnknown
	}
	reason := actionsv1alpha1.ReasonReplayed
	msg := fmt.Sprintf("replayed the recorded outcome (%s, status %d) of the earlier object %s; nothing was sent", t.Phase, t.StatusCode, t.UID)
	finish(st, env, phase, reason, msg)
	if phase == actionsv1alpha1.PhaseOutcomeUnknown {
		st.ExpiresAt = nil
	}
	awaitOutputs(st, env, actionsv1alpha1.ReasonOutputsNotAvailable, fmt.Sprintf("the outcome was replayed from the "+
		"tombstone of the earlier object %s, and no response of it is kept to take the outputs from", t.UID))
	return Step{Kind: KindNone, Status: st, At: expiry(st), Event: &Event{Reason: reason, Message: msg}}
}

// Resolve applies a person's decision on an OutcomeUnknown or Exhausted action (CONTRACT "Decisions by people").
func Resolve(cur *actionsv1alpha1.ExternalActionStatus, decision, reason string, env Env) (Step, error) {
	if cur.Phase != actionsv1alpha1.PhaseOutcomeUnknown && cur.Phase != actionsv1alpha1.PhaseExhausted {
		return Step{}, fmt.Errorf("a decision applies only in phase OutcomeUnknown or Exhausted, not %s", cur.Phase)
	}
	st := cur.DeepCopy()
	st.Resolution = &actionsv1alpha1.Resolution{Decision: decision, Reason: Truncate(reason), At: metav1.NewTime(env.Now)}
	st.Claim = nil
	last := st.Attempts
	msg := fmt.Sprintf("a person decided %q", decision)
	if reason != "" {
		msg += ": " + reason
	}
	switch decision {
	case actionsv1alpha1.DecisionApplied:
		markHistory(st, last, "ResolvedApplied")
		st.LastError = ""
		finish(st, env, actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.ReasonResolved, msg)
		awaitOutputs(st, env, actionsv1alpha1.ReasonOutputsNotAvailable, "a person decided the action applied; "+
			"there is no response to take the outputs from")
	case actionsv1alpha1.DecisionNotApplied:
		markHistory(st, last, "ResolvedNotApplied")
		finish(st, env, actionsv1alpha1.PhaseFailed, actionsv1alpha1.ReasonResolved, msg)
	case actionsv1alpha1.DecisionRetry:
		st.ManualRetries++
		st.CompletedAt = nil
		st.ExpiresAt = nil
		st.NextAttemptAt = PtrTime(env.Now)
		if !env.Policy.Deadline.IsZero() && !env.Now.Before(env.Policy.Deadline) {
			// The original window is spent: the person grants one attempt window from now.
			st.Deadline = PtrTime(env.Now.Add(env.AttemptTimeout + 2*env.ClaimMargin + time.Minute))
		}
		setPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonResolved, msg+"; one more attempt under the same key", env)
		return Step{Kind: KindWait, At: env.Now, Status: st, Event: &Event{Reason: actionsv1alpha1.ReasonResolved, Message: msg}}, nil
	default:
		return Step{}, fmt.Errorf("unknown decision %q: use %s, %s or %s", decision,
			actionsv1alpha1.DecisionApplied, actionsv1alpha1.DecisionNotApplied, actionsv1alpha1.DecisionRetry)
	}
	return Step{Kind: KindNone, Status: st, At: expiry(st), Event: &Event{Reason: actionsv1alpha1.ReasonResolved, Message: msg}}, nil
}

// Delayed marks the action as waiting on its destination (rate limit, pause or retry budget) until until, or,
// with a zero until, for capacity whose return cannot be predicted (room in flight: the waiter is woken, and no
// nextAttemptAt holds it back). It returns a write only when the reason changes, so a waiting action costs no
// write per poll.
func Delayed(cur *actionsv1alpha1.ExternalActionStatus, reason, msg string, until time.Time, env Env) Step {
	if condReason(cur, actionsv1alpha1.ConditionReconciling, reason) {
		return Step{Kind: KindWait, At: until}
	}
	st := cur.DeepCopy()
	st.NextAttemptAt = nil
	if !until.IsZero() {
		st.NextAttemptAt = PtrTime(until)
	}
	phase := st.Phase
	if phase == "" {
		phase = actionsv1alpha1.PhasePending
	}
	setPhase(st, phase, reason, msg, env)
	return Step{Kind: KindWait, At: until, Status: st}
}

// WaitForSubject marks a non-terminal action as waiting for its spec.subject, held by (or first due to) another
// action: reason WaitingForSubject (Reconciling True), or SubjectOutcomeUnknown when that action is OutcomeUnknown
// (Stalled True, Reconciling False: a person must decide it). The phase stays (Pending for a new action) and no
// schedule is set: the wait ends on a watch event. It returns a write only when the reason or the message
// changes, and an event only when the reason changes.
func WaitForSubject(cur *actionsv1alpha1.ExternalActionStatus, reason, msg string, env Env) Step {
	msg = Truncate(msg)
	if c := meta.FindStatusCondition(cur.Conditions, actionsv1alpha1.ConditionReady); c != nil && c.Reason == reason && c.Message == msg {
		return Step{Kind: KindWait}
	}
	prev := ""
	if c := meta.FindStatusCondition(cur.Conditions, actionsv1alpha1.ConditionReady); c != nil {
		prev = c.Reason
	}
	st := cur.DeepCopy()
	phase := st.Phase
	if phase == "" || phase.Terminal() {
		phase = actionsv1alpha1.PhasePending
	}
	setPhase(st, phase, reason, msg, env)
	step := Step{Kind: KindWait, Status: st}
	if reason == actionsv1alpha1.ReasonSubjectOutcomeUnknown {
		setAbnormal(st, false, true, reason, Truncate(msg), env)
	}
	if prev != reason {
		step.Event = &Event{Warning: reason == actionsv1alpha1.ReasonSubjectOutcomeUnknown, Reason: reason, Message: msg}
	}
	return step
}

// Blocked marks a Pending or InProgress action whose destination cannot be used (missing, not Ready, namespace
// not allowed, egress denied, insecureSkipVerify not allowed): Stalled=True, Reconciling=False and Ready=False
// with reason and msg (kstatus reads it as Failed, `kubectl wait --for=condition=Stalled` returns), lastError
// msg (the ERROR column), the phase unchanged (never terminal: the action resumes by itself once the
// destination is usable, Unblock). nextAttemptAt keeps a retry still scheduled in the future and is cleared
// otherwise, so that NEXT never shows a time that has passed. It returns a write only when something changes.
func Blocked(cur *actionsv1alpha1.ExternalActionStatus, reason, msg string, env Env) Step {
	st := cur.DeepCopy()
	if n := st.NextAttemptAt; n != nil && !n.After(env.Now) {
		st.NextAttemptAt = nil
	}
	st.LastError = Truncate(msg)
	phase := st.Phase
	if phase == "" || phase.Terminal() {
		phase = actionsv1alpha1.PhasePending
	}
	if cur.Phase == phase && condReason(cur, actionsv1alpha1.ConditionStalled, reason) && cur.LastError == st.LastError &&
		equalTime(cur.NextAttemptAt, st.NextAttemptAt) && cur.ObservedGeneration == env.Generation {
		return Step{Kind: KindWait}
	}
	st.Phase = phase
	st.ObservedGeneration = env.Generation
	m := Truncate(msg)
	setCond(st, actionsv1alpha1.ConditionReady, false, reason, m, env)
	setAbnormal(st, false, true, reason, m, env)
	return Step{Kind: KindWait, Status: st}
}

// Unblock returns the status of a Blocked action whose destination is usable again: Stalled=False and
// Reconciling=True (reason Pending, RetryScheduled or AttemptInProgress, as the status stands), lastError
// cleared. It returns nil when cur is not blocked.
func Unblock(cur *actionsv1alpha1.ExternalActionStatus, env Env) *actionsv1alpha1.ExternalActionStatus {
	if cur.Phase.Terminal() || !condTrue(cur, actionsv1alpha1.ConditionStalled) {
		return nil
	}
	if condReason(cur, actionsv1alpha1.ConditionStalled, actionsv1alpha1.ReasonSubjectOutcomeUnknown) {
		return nil // a stall on the subject, not on the destination: WaitForSubject ends it
	}
	st := cur.DeepCopy()
	st.LastError = ""
	reason, msg := actionsv1alpha1.ReasonPending, "the destination is usable again; no attempt sent yet"
	switch {
	case st.Claim != nil:
		reason, msg = actionsv1alpha1.ReasonAttemptInProgress, fmt.Sprintf("the destination is usable again; attempt %d is open", st.Claim.Attempt)
	case st.NextAttemptAt != nil:
		reason, msg = actionsv1alpha1.ReasonRetryScheduled, "the destination is usable again; next attempt at "+st.NextAttemptAt.UTC().Format(time.RFC3339)
	case st.Attempts > 0:
		reason, msg = actionsv1alpha1.ReasonRetryScheduled, "the destination is usable again; next attempt now"
	}
	phase := st.Phase
	if phase == "" {
		phase = actionsv1alpha1.PhasePending
	}
	setPhase(st, phase, reason, msg, env)
	return st
}

// ObserveFinished observes a new generation of a finished action (a spec field outside the fingerprint was
// edited: spec.ttlSecondsAfterFinished or spec.retryPolicy). It applies what still applies, expiresAt
// recomputed as completedAt plus env.Retention (never for OutcomeUnknown or Conflict, which are not
// collected), and says in the Reconciling condition's message what no longer can: a retry policy shapes only
// attempts still to be made. status.observedGeneration and every condition's observedGeneration become
// env.Generation, so that kstatus, Argo CD and `kubectl wait` settle. Phase, reasons and the outcome's
// messages are kept. It returns nil when the generation was already observed.
func ObserveFinished(cur *actionsv1alpha1.ExternalActionStatus, env Env) *actionsv1alpha1.ExternalActionStatus {
	if !cur.Phase.Terminal() || cur.ObservedGeneration == env.Generation {
		return nil
	}
	st := cur.DeepCopy()
	st.ObservedGeneration = env.Generation
	note := fmt.Sprintf("finished (%s); generation %d observed:", st.Phase, env.Generation)
	if st.CompletedAt != nil && st.Phase != actionsv1alpha1.PhaseOutcomeUnknown && st.Phase != actionsv1alpha1.PhaseConflict {
		st.ExpiresAt = PtrTime(st.CompletedAt.Add(env.Retention))
		note += fmt.Sprintf(" expiresAt is now %s (completedAt plus a retention of %s);", st.ExpiresAt.UTC().Format(time.RFC3339), env.Retention)
	}
	switch st.Phase {
	case actionsv1alpha1.PhaseOutcomeUnknown, actionsv1alpha1.PhaseExhausted:
		note += " spec.retryPolicy applies only to an attempt a person asks for (" + actionsv1alpha1.AnnotationResolve + "=retry)"
	default:
		note += " spec.retryPolicy no longer applies: no attempt is made for a finished action"
	}
	if meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionReconciling) == nil {
		// A finished action carries no Reconciling condition (setPhase); the note of an edit goes into one that is
		// False, with the outcome's reason.
		reason := st.Phase
		if c := meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionReady); c != nil {
			reason = actionsv1alpha1.Phase(c.Reason)
		}
		setCond(st, actionsv1alpha1.ConditionReconciling, false, string(reason), "", env)
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.ObservedGeneration = env.Generation
		if c.Type == actionsv1alpha1.ConditionReconciling {
			c.Message = Truncate(note)
		}
	}
	return st
}

func setCond(st *actionsv1alpha1.ExternalActionStatus, t string, on bool, reason, msg string, env Env) {
	s := metav1.ConditionFalse
	if on {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: env.Generation,
		LastTransitionTime: metav1.NewTime(env.Now),
	})
}

func condTrue(st *actionsv1alpha1.ExternalActionStatus, t string) bool {
	c := meta.FindStatusCondition(st.Conditions, t)
	return c != nil && c.Status == metav1.ConditionTrue
}

func equalTime(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(b)
}

// EffectiveDeadline is the absolute deadline for an action created at created under policy deadline d (0: none).
func EffectiveDeadline(created time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return created.Add(d)
}

func finish(st *actionsv1alpha1.ExternalActionStatus, env Env, phase actionsv1alpha1.Phase, reason, msg string) {
	st.NextAttemptAt = nil
	st.CompletedAt = PtrTime(env.Now)
	if phase == actionsv1alpha1.PhaseOutcomeUnknown {
		st.ExpiresAt = nil // never collected before a person decides
	} else {
		st.ExpiresAt = PtrTime(env.Now.Add(env.Retention))
	}
	setPhase(st, phase, reason, msg, env)
}

func expiry(st *actionsv1alpha1.ExternalActionStatus) time.Time {
	if st.ExpiresAt == nil {
		return time.Time{}
	}
	return st.ExpiresAt.Time
}

// setPhase sets the phase and the conditions as kstatus reads them: Ready True only in Succeeded; Reconciling
// True in Pending and InProgress; Stalled True in Failed, Exhausted, OutcomeUnknown and Conflict. Reconciling
// and Stalled are abnormal-true conditions (kstatus): present only while True, removed otherwise, as Flux
// does, so that a finished action carries Ready alone (the lean happy path, issue 24).
func setPhase(st *actionsv1alpha1.ExternalActionStatus, phase actionsv1alpha1.Phase, reason, msg string, env Env) {
	st.Phase = phase
	st.ObservedGeneration = env.Generation
	msg = Truncate(msg)
	switch phase {
	case actionsv1alpha1.PhaseSucceeded:
		setCond(st, actionsv1alpha1.ConditionReady, true, reason, msg, env)
		setAbnormal(st, false, false, reason, msg, env)
	case actionsv1alpha1.PhasePending, actionsv1alpha1.PhaseInProgress:
		setCond(st, actionsv1alpha1.ConditionReady, false, reason, msg, env)
		setAbnormal(st, true, false, reason, msg, env)
	default:
		setCond(st, actionsv1alpha1.ConditionReady, false, reason, msg, env)
		setAbnormal(st, false, true, reason, msg, env)
	}
}

// setAbnormal sets the abnormal-true conditions: Reconciling and Stalled True with reason and msg when asked,
// removed when not (kstatus reads an absent one as False).
func setAbnormal(st *actionsv1alpha1.ExternalActionStatus, reconciling, stalled bool, reason, msg string, env Env) {
	for _, c := range []struct {
		t  string
		on bool
	}{{actionsv1alpha1.ConditionReconciling, reconciling}, {actionsv1alpha1.ConditionStalled, stalled}} {
		if c.on {
			setCond(st, c.t, true, reason, msg, env)
		} else {
			meta.RemoveStatusCondition(&st.Conditions, c.t)
		}
	}
}

// awaitOutputs holds a Succeeded action with spec.outputs (env.Outputs) short of Ready until SettleOutputs:
// OutputsReady False with reason and msg, Ready False and Reconciling True with reason OutputsPending (kstatus:
// in progress). Other phases, and actions without outputs, are left as they are.
func awaitOutputs(st *actionsv1alpha1.ExternalActionStatus, env Env, reason, msg string) {
	if !env.Outputs || st.Phase != actionsv1alpha1.PhaseSucceeded {
		return
	}
	st.Outputs = nil
	msg = Truncate(msg)
	setCond(st, actionsv1alpha1.ConditionOutputsReady, false, reason, msg, env)
	setCond(st, actionsv1alpha1.ConditionReady, false, actionsv1alpha1.ReasonOutputsPending, "succeeded; "+msg, env)
	setCond(st, actionsv1alpha1.ConditionReconciling, true, actionsv1alpha1.ReasonOutputsPending, "succeeded; "+msg, env)
}

// OutputsHeld reports whether a Succeeded action's outputs are held in the controller's memory until they are
// written: the OutputsReady condition has reason OutputsPending (set by Record) and status.outputs is unset.
func OutputsHeld(cur *actionsv1alpha1.ExternalActionStatus) bool {
	c := meta.FindStatusCondition(cur.Conditions, actionsv1alpha1.ConditionOutputsReady)
	return cur.Outputs == nil && c != nil && c.Reason == actionsv1alpha1.ReasonOutputsPending
}

// SettleOutputs records how spec.outputs of a Succeeded action ended; out.Reason is the OutputsReady reason.
// OutputsWritten and OutputsRetained: OutputsReady True and Ready True, Reconciling and Stalled False. Any other
// reason: OutputsReady and Ready False with that reason and msg, Reconciling False and Stalled True (a person
// must act; the phase stays Succeeded, and nothing is sent again), with a Warning Event. status.outputs becomes
// out. It returns no status when cur already records out.Reason, or cur is not Succeeded.
func SettleOutputs(cur *actionsv1alpha1.ExternalActionStatus, out actionsv1alpha1.OutputsStatus, msg string, env Env) Step {
	if cur.Phase != actionsv1alpha1.PhaseSucceeded || (cur.Outputs != nil && cur.Outputs.Reason == out.Reason) {
		return Step{Kind: KindNone}
	}
	st := cur.DeepCopy()
	st.Outputs = out.DeepCopy()
	msg = Truncate(msg)
	ok := out.Reason == actionsv1alpha1.ReasonOutputsWritten || out.Reason == actionsv1alpha1.ReasonOutputsRetained
	setCond(st, actionsv1alpha1.ConditionOutputsReady, ok, out.Reason, msg, env)
	setCond(st, actionsv1alpha1.ConditionReady, ok, out.Reason, msg, env)
	setAbnormal(st, false, !ok, out.Reason, msg, env)
	step := Step{Kind: KindNone, Status: st, At: expiry(st)}
	if ok {
		return step
	}
	step.Event = &Event{Warning: true, Reason: out.Reason, Message: msg}
	return step
}

func condReason(st *actionsv1alpha1.ExternalActionStatus, t, reason string) bool {
	c := meta.FindStatusCondition(st.Conditions, t)
	return c != nil && c.Reason == reason && c.Status == metav1.ConditionTrue
}

func maxAttempts(st *actionsv1alpha1.ExternalActionStatus, env Env) int32 {
	return max(env.Policy.MaxAttempts, 1) + st.ManualRetries
}

func maxPostChecks(env Env) int32 {
	if env.MaxPostChecks < 1 {
		return 5
	}
	return env.MaxPostChecks
}

func upsertHistory(st *actionsv1alpha1.ExternalActionStatus, rec actionsv1alpha1.AttemptRecord) {
	for i := range st.AttemptHistory {
		if st.AttemptHistory[i].Number == rec.Number {
			st.AttemptHistory[i] = rec
			return
		}
	}
	st.AttemptHistory = append(st.AttemptHistory, rec)
	if n := len(st.AttemptHistory); n > HistoryLimit {
		st.AttemptHistory = append([]actionsv1alpha1.AttemptRecord(nil), st.AttemptHistory[n-HistoryLimit:]...)
	}
}

// firstSuccess reports whether o is the success of a first attempt with no history before it: the lean happy
// path keeps no attemptHistory entry for it (attempts, response.statusCode and completedAt say it all).
func firstSuccess(st *actionsv1alpha1.ExternalActionStatus, attempt int32, o Outcome) bool {
	return o.Class == retry.ClassSuccess && attempt == 1 && len(st.AttemptHistory) == 0
}

func hasHistory(st *actionsv1alpha1.ExternalActionStatus, n int32) bool {
	for _, r := range st.AttemptHistory {
		if r.Number == n {
			return true
		}
	}
	return false
}

func markHistory(st *actionsv1alpha1.ExternalActionStatus, n int32, result string) {
	for i := range st.AttemptHistory {
		if st.AttemptHistory[i].Number == n {
			st.AttemptHistory[i].Result = result
		}
	}
}

func describe(o Outcome) string {
	switch {
	case o.StatusCode != 0 && o.RetryAfter != "":
		return fmt.Sprintf("status %d, Retry-After %q", o.StatusCode, o.RetryAfter)
	case o.StatusCode != 0:
		return fmt.Sprintf("status %d", o.StatusCode)
	case o.Error != "":
		return fmt.Sprintf("%s: %s", o.ErrorClass, o.Error)
	default:
		return o.ErrorClass
	}
}

// lastError is status.lastError of an outcome that is not a success: its class and describe(o), and after a
// status code the error that came with it (spec.successWhen failing to evaluate on the response), which
// describe leaves out.
func lastError(o Outcome) string {
	if o.Class == retry.ClassSuccess {
		return ""
	}
	msg := string(o.Class) + ": " + describe(o)
	if o.StatusCode != 0 && o.Error != "" {
		msg += "; " + o.Error
	}
	return Truncate(msg)
}

// maxMessageLen caps the messages the ledger stores in status (lastError, resolution reason), in bytes; the
// CRD bounds status.deadLetter.message the same.
const maxMessageLen = 1024

// Truncate cuts s to maxMessageLen (1,024) bytes, ending in "..." when it was cut: the bound of the messages
// stored in status (lastError, resolution reason, status.deadLetter.message).
func Truncate(s string) string {
	if len(s) <= maxMessageLen {
		return s
	}
	return s[:maxMessageLen-3] + "..."
}

// CeilSecond rounds t up to a whole second: metav1.Time keeps only whole seconds on the wire, so a schedule
// stored in status is rounded up and a value read back is never earlier than the one decided.
func CeilSecond(t time.Time) time.Time {
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}

// PtrTime returns t as a *metav1.Time for a status field.
func PtrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

// retryReason maps a reason of package retry (Decision.Reason) to the API's condition reason (CONTRACT),
// explicitly: retry's strings are its own.
func retryReason(r string) string {
	switch r {
	case retry.ReasonAttemptsExhausted:
		return actionsv1alpha1.ReasonAttemptsExhausted
	case retry.ReasonRetryAfterPastDeadline:
		return actionsv1alpha1.ReasonRetryAfterPastDeadline
	default: // retry.ReasonDeadlineExceeded
		return actionsv1alpha1.ReasonDeadlineExceeded
	}
}
