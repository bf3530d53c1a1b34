// Package deadletter hands an action that ended without success on to its destination's dead-letter sink
// (spec.deadLetter of the Destination or ClusterDestination): one CloudEvents 1.0 record per action, delivered
// by HTTP to the sink destination under the key the sink's keyFormat makes for the action, followed by
// "/dead-letter" (Key): on a shared ClusterDestination sink no two namespaces' records share a key, whatever
// keyFormat their own destinations have.
//
// The delivery is itself an idempotent side effect and follows the action's own rules (docs/design.md):
// every delivery attempt is claimed in status.deadLetter before it is sent (DESIGN rule 1, through the status
// writer's Apply on the resourceVersion it was decided on), its outcome is recorded there after it (rule 2,
// the writer's Settle), and a claim found open after its expiry is uncertain (rule 3): resent with the same
// key only when repeating is safe at the sink (it deduplicates on the key, or its effect is Safe or
// Idempotent), otherwise the record ends Uncertain and is never sent again by itself. Retries follow the
// sink's retry policy (rule 5), with its deadline counted from the first claim. A delivery never re-sends the
// action's request and never changes the action's phase or conditions. It leaves through the one send path of
// the attempts (internal/send) and passes the sink's limits as they do: its rate limit and, for a retry, its
// retry budget before the claim (a wait spends no attempt: Delayed), its concurrency in the dispatcher (rule 10),
// and a Retry-After answer pauses the sink for at most its deadline. So a failing sink holds back only the
// records bound for it, and many records at once hold a shared sink no longer than many attempts would.
//
// The record is an obligation recorded in status, never derived again from objects that may be gone: Owe writes
// status.deadLetter (sink identity, path and mode) into the same status write that ends the action in one of
// its sink's phases (the status writer's Terminal hook), and from then on the delivery goes to the recorded
// sink, whatever the destinations say later. Until the record is final (Delivered, Failed, Uncertain, or
// GivenUp by a person) the action is neither collected nor let go by its finalizer; a sink that is missing or
// unusable meanwhile makes the action say so (Stalled, reason DeadLetterSinkUnavailable, naming the sink).
//
// This file is the pure part: (status.deadLetter, facts) -> one Step, table-tested like internal/ledger.
package deadletter

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/retry"
)

// KeySuffix follows the sink's key for the action in the key of its dead-letter record (and the CloudEvent id).
const KeySuffix = "/dead-letter"

// Key is the key of the dead-letter record of the action namespace/name at the sink whose spec is sink: the
// sink's idempotency.keyFormat for the action (destination.IdempotencyKey, default "{namespace}/{name}")
// followed by KeySuffix. It is never made from the action's own key: a tenant's own Destination may have any
// keyFormat (team-b/{name} in namespace team-a), while a ClusterDestination's keyFormat separates namespaces
// (the API server's rule), so two tenants' records never share a key at a shared sink.
func Key(sink *actionsv1alpha1.DestinationSpec, namespace, name string) string {
	return destination.IdempotencyKey(sink, namespace, name) + KeySuffix
}

// Keyed records key in the first claim of a record: the key is recorded once, before anything is sent, and
// every later delivery attempt (a resend after an uncertain one included) carries it, whatever the sink's
// keyFormat becomes. A record owed by an earlier manager was given the action's key followed by KeySuffix when
// it became owed; nothing was sent under that key before its first claim, so the first claim replaces it too
// (the action's key may have been written to look like another tenant's). A later claim keeps the key it has.
func Keyed(step Step, key string) Step {
	if step.Kind != ledger.KindSend || step.Status == nil {
		return step
	}
	if first := step.Status.Claim != nil && step.Status.Claim.Attempt == 1; first || step.Status.IdempotencyKey == "" {
		step.Status.IdempotencyKey = key
	}
	return step
}

// DefaultPhases are the phases delivered when spec.deadLetter.phases is empty.
var DefaultPhases = []actionsv1alpha1.DeadLetterPhase{"Exhausted", "Failed"}

// The decisions take a ledger.Env built from the sink: Policy is the sink's retry policy with Policy.Deadline
// the delivery's absolute deadline (status.deadLetter.deadline, or the first claim plus the sink's
// retryPolicy.deadline), AttemptTimeout the sink's timeout, RepeatSafe and KeySupported the sink's.

// Step is one decision: the status.deadLetter to write (nil: nothing changed), what to do after the write,
// when to look again, and the Event to emit after the write.
type Step struct {
	Kind   ledger.Kind
	Status *actionsv1alpha1.DeadLetterStatus
	At     time.Time
	Event  *ledger.Event
}

// Due reports whether an action in phase is delivered to a sink that takes phases (DefaultPhases when empty).
func Due(phase actionsv1alpha1.Phase, phases []actionsv1alpha1.DeadLetterPhase) bool {
	if len(phases) == 0 {
		phases = DefaultPhases
	}
	for _, p := range phases {
		if string(p) == string(phase) {
			return true
		}
	}
	return false
}

// Final reports whether the delivery is over: Delivered, Failed, Uncertain or GivenUp. Nothing is sent for it
// again, and it no longer holds the action.
func Final(st *actionsv1alpha1.DeadLetterStatus) bool {
	if st == nil {
		return false
	}
	switch st.State {
	case actionsv1alpha1.DeadLetterDelivered, actionsv1alpha1.DeadLetterFailed, actionsv1alpha1.DeadLetterUncertain,
		actionsv1alpha1.DeadLetterGivenUp:
		return true
	}
	return false
}

// Owed reports whether st holds its action: a record is owed and is not final.
func Owed(st *actionsv1alpha1.ExternalActionStatus) bool {
	return st.DeadLetter != nil && !Final(st.DeadLetter)
}

// Begin is the status of a record newly due for the action in phase, to sink. It has no key yet: the first claim
// records it (Keyed), from the sink as it resolves then.
func Begin(sink string, phase actionsv1alpha1.Phase) *actionsv1alpha1.DeadLetterStatus {
	return &actionsv1alpha1.DeadLetterStatus{Sink: sink, Phase: phase,
		State: actionsv1alpha1.DeadLetterPending, Reason: actionsv1alpha1.ReasonDeadLetterRetrying, Message: "due; no delivery attempt yet"}
}

// Owe records the record owed by an action whose status st is about to be written in a terminal phase, to the
// sink spec (the action's spec.deadLetter, else its destination's) known as sinkID: status.deadLetter with the
// sink's identity, path and mode, and the DeadLetterDelivered condition. It changes nothing when a record is
// already owed or was (one record per action, ever), when spec is nil, or when the phase is not one of the
// sink's. It reports whether it wrote.
func Owe(st *actionsv1alpha1.ExternalActionStatus, spec *actionsv1alpha1.DeadLetterSink, sinkID string, generation int64,
	now time.Time) bool {
	if st.DeadLetter != nil || spec == nil || !st.Phase.Terminal() || !Due(st.Phase, spec.Phases) {
		return false
	}
	dl := Begin(sinkID, st.Phase)
	dl.Path, dl.Mode = pathOf(spec), modeOf(spec)
	st.DeadLetter = dl
	Show(st, generation, now)
	return true
}

// SinkRef is the reference of the recorded sink (status.deadLetter.sink, as destination.ID writes it) of an
// action in namespace: "ClusterDestination/<name>", or "Destination/<namespace>/<name>" of that namespace.
func SinkRef(sink, namespace string) (actionsv1alpha1.DestinationReference, error) {
	if name, ok := strings.CutPrefix(sink, "ClusterDestination/"); ok && name != "" && !strings.Contains(name, "/") {
		return actionsv1alpha1.DestinationReference{Kind: "ClusterDestination", Name: name}, nil
	}
	if name, ok := strings.CutPrefix(sink, "Destination/"+namespace+"/"); ok && name != "" && !strings.Contains(name, "/") {
		return actionsv1alpha1.DestinationReference{Kind: "Destination", Name: name}, nil
	}
	return actionsv1alpha1.DestinationReference{}, fmt.Errorf("status.deadLetter.sink %q names no Destination of namespace %s "+
		"and no ClusterDestination", sink, namespace)
}

// ErrFinal is GiveUp's answer for a record that is already final: there is nothing to give up.
var ErrFinal = errors.New("the dead-letter record is already final")

// GiveUp applies a person's decision (annotation actions.actionledger.dev/dead-letter) on a record that is not
// final: give-up ends it GivenUp, with reason in its message, a Warning Event naming the sink, and no claim or
// schedule left; nothing is sent for it again. A delivery attempt whose claim is still open is waited for (a
// KindWait step at its expiry, nothing written): its answer may yet deliver the record. A claim past its expiry
// is given up with the record (the message says the sink may have it). Any other decision is an error.
func GiveUp(cur *actionsv1alpha1.DeadLetterStatus, decision, reason string, now time.Time) (Step, error) {
	if decision != actionsv1alpha1.DeadLetterGiveUp {
		return Step{}, fmt.Errorf("unknown decision %q: use %s", decision, actionsv1alpha1.DeadLetterGiveUp)
	}
	if cur == nil || Final(cur) {
		return Step{}, ErrFinal
	}
	if c := cur.Claim; c != nil && now.Before(c.ExpiresAt.Time) {
		return Step{Kind: ledger.KindWait, At: c.ExpiresAt.Time}, nil
	}
	msg := fmt.Sprintf("given up by a person (%s=%s) after %d delivery attempt(s)", actionsv1alpha1.AnnotationDeadLetter,
		decision, cur.Attempts)
	if reason != "" {
		msg += ": " + reason
	}
	return givenUp(cur, msg), nil
}

// NamespaceDeleted gives up a record that is not final because the action's namespace is being deleted while its
// sink cannot be used (why): the deletion of the namespace is the person's decision, and holding the action
// would keep the namespace Terminating forever.
func NamespaceDeleted(cur *actionsv1alpha1.DeadLetterStatus, why string) Step {
	return givenUp(cur, fmt.Sprintf("given up: the namespace is being deleted and the sink cannot be used (%s)", why))
}

// givenUp ends cur GivenUp with msg; a claim still in it is named (the sink may have the record).
func givenUp(cur *actionsv1alpha1.DeadLetterStatus, msg string) Step {
	st := cur.DeepCopy()
	if st.Claim != nil {
		msg += fmt.Sprintf("; delivery attempt %d has no recorded outcome, so the sink may have the record", st.Claim.Attempt)
	}
	st.Claim, st.NextAttemptAt = nil, nil
	st.State, st.Reason, st.Message = actionsv1alpha1.DeadLetterGivenUp, actionsv1alpha1.ReasonDeadLetterGivenUp, ledger.Truncate(msg)
	return Step{Kind: ledger.KindNone, Status: st, Event: &ledger.Event{Warning: true, Reason: st.Reason,
		Message: "dead-letter record to " + st.Sink + ": " + st.Message}}
}

// Show sets the conditions that say where st's record stands: DeadLetterDelivered (True once Delivered, else
// False with status.deadLetter's reason and message) and, while the sink cannot be used (Refused), Stalled with
// reason DeadLetterSinkUnavailable naming the sink: the action is held for it. Once the sink is usable again,
// Stalled goes back to the outcome's reason and message (those of Ready). Nothing is set without a record.
func Show(st *actionsv1alpha1.ExternalActionStatus, generation int64, now time.Time) {
	dl := st.DeadLetter
	if dl == nil {
		return
	}
	set := func(t string, on bool, reason, msg string) {
		s := metav1.ConditionFalse
		if on {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)})
	}
	set(actionsv1alpha1.ConditionDeadLetterDelivered, dl.State == actionsv1alpha1.DeadLetterDelivered, dl.Reason, dl.Message)
	stalled := meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionStalled)
	switch {
	case dl.State == actionsv1alpha1.DeadLetterRefused:
		set(actionsv1alpha1.ConditionStalled, true, actionsv1alpha1.ReasonDeadLetterSinkUnavailable, ledger.Truncate(fmt.Sprintf(
			"the dead-letter record owed to %s cannot be delivered (%s: %s); the action is kept until it is: make the sink usable "+
				"again, or give the record up with the annotation %s=%s", dl.Sink, dl.Reason, dl.Message,
			actionsv1alpha1.AnnotationDeadLetter, actionsv1alpha1.DeadLetterGiveUp)))
	case stalled != nil && stalled.Reason == actionsv1alpha1.ReasonDeadLetterSinkUnavailable:
		if ready := meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionReady); ready != nil && st.Phase.Terminal() &&
			st.Phase != actionsv1alpha1.PhaseSucceeded {
			set(actionsv1alpha1.ConditionStalled, true, ready.Reason, ready.Message)
		} else {
			meta.RemoveStatusCondition(&st.Conditions, actionsv1alpha1.ConditionStalled)
		}
	}
}

// Delayed records that the next delivery attempt of cur, which is due, waits for the sink: reason
// ConcurrencyLimited, RateLimited or RetryBudgetExhausted and msg (send.Hold's). It is not a failure of the record:
// no attempt is spent, nothing is scheduled (the limiter's queue keeps the record's place), the record stays
// Pending (a Refused one resumes, its sink being usable again). It writes only when the reason changes.
func Delayed(cur *actionsv1alpha1.DeadLetterStatus, reason, msg string) Step {
	if cur.Reason == reason {
		return Step{Kind: ledger.KindWait}
	}
	st := cur.DeepCopy()
	if st.State == actionsv1alpha1.DeadLetterRefused {
		st = resume(cur)
	}
	st.Reason, st.Message = reason, ledger.Truncate(msg+"; no delivery attempt is spent")
	return Step{Kind: ledger.KindWait, Status: st}
}

// Refuse records that the sink cannot be used (reason, msg); nothing is sent. It writes only on a change.
func Refuse(cur *actionsv1alpha1.DeadLetterStatus, reason, msg string) Step {
	msg = ledger.Truncate(msg)
	if cur.State == actionsv1alpha1.DeadLetterRefused && cur.Reason == reason && cur.Message == msg {
		return Step{Kind: ledger.KindWait}
	}
	st := cur.DeepCopy()
	st.State, st.Reason, st.Message = actionsv1alpha1.DeadLetterRefused, reason, msg
	return Step{Kind: ledger.KindWait, Status: st, Event: &ledger.Event{Warning: true, Reason: reason,
		Message: "dead-letter sink " + cur.Sink + " refused: " + msg}}
}

// Advance decides what to do with a delivery that is not final when no outcome is at hand and the sink can be
// used: wait for an open claim or the schedule, settle an expired claim (DESIGN rule 3), end it at the deadline
// or the last attempt, or claim the next attempt. A record Refused before is resumed first: a wait then writes
// it back to Pending (or Delivering, with its claim), which ends the action's DeadLetterSinkUnavailable stall.
func Advance(cur *actionsv1alpha1.DeadLetterStatus, env ledger.Env) Step {
	if Final(cur) {
		return Step{Kind: ledger.KindNone}
	}
	if cur.State == actionsv1alpha1.DeadLetterRefused {
		resumed := resume(cur)
		step := advance(resumed, env)
		if step.Status == nil {
			step.Status = resumed
		}
		return step
	}
	return advance(cur, env)
}

// resume is cur, Refused, with its sink usable again: Delivering while a claim is in it, else Pending.
func resume(cur *actionsv1alpha1.DeadLetterStatus) *actionsv1alpha1.DeadLetterStatus {
	st := cur.DeepCopy()
	st.State, st.Reason = actionsv1alpha1.DeadLetterPending, actionsv1alpha1.ReasonDeadLetterRetrying
	st.Message = "the sink can be used again; the delivery resumes"
	if st.Claim != nil {
		st.State = actionsv1alpha1.DeadLetterDelivering
	}
	return st
}

func advance(cur *actionsv1alpha1.DeadLetterStatus, env ledger.Env) Step {
	if c := cur.Claim; c != nil {
		if env.Now.Before(c.ExpiresAt.Time) {
			return Step{Kind: ledger.KindWait, At: c.ExpiresAt.Time}
		}
		why := fmt.Sprintf("delivery attempt %d by %s has no recorded outcome and its claim expired", c.Attempt, c.Holder)
		return uncertain(cur, env, why)
	}
	if n := cur.NextAttemptAt; n != nil && env.Now.Before(n.Time) {
		return Step{Kind: ledger.KindWait, At: n.Time}
	}
	if dl := cur.Deadline; dl != nil && !env.Now.Before(dl.Time) {
		return fail(cur, fmt.Sprintf("the sink's deadline passed after %d delivery attempt(s)", cur.Attempts))
	}
	if cur.Attempts >= max(env.Policy.MaxAttempts, 1) {
		return fail(cur, fmt.Sprintf("all %d delivery attempt(s) were made", cur.Attempts))
	}
	return claim(cur, env)
}

// claim opens delivery attempt Attempts+1, held by env.Holder, expiring after the sink's timeout plus the
// margin (rounded up to a whole second, as status keeps it).
func claim(cur *actionsv1alpha1.DeadLetterStatus, env ledger.Env) Step {
	st := cur.DeepCopy()
	st.Attempts++
	timeout := env.AttemptTimeout
	if timeout <= 0 {
		timeout = actionsv1alpha1.DefaultTimeout
	}
	expires := ledger.CeilSecond(env.Now.Add(timeout + env.Margin()))
	st.Claim = &actionsv1alpha1.AttemptClaim{Attempt: st.Attempts, Holder: env.Holder, StartedAt: metav1.NewTime(env.Now),
		ExpiresAt: metav1.NewTime(expires)}
	if st.Deadline == nil && !env.Policy.Deadline.IsZero() {
		st.Deadline = ledger.PtrTime(ledger.CeilSecond(env.Policy.Deadline))
	}
	st.NextAttemptAt = nil
	st.State = actionsv1alpha1.DeadLetterDelivering
	st.Reason, st.Message = actionsv1alpha1.ReasonDeadLetterRetrying, fmt.Sprintf("delivery attempt %d claimed by %s", st.Attempts, env.Holder)
	return Step{Kind: ledger.KindSend, Status: st}
}

// RecordOutcome applies the outcome of delivery attempt (DESIGN rule 2). false: that attempt is not open any more
// (settled elsewhere); the outcome is dropped.
func RecordOutcome(cur *actionsv1alpha1.DeadLetterStatus, attempt int32, o ledger.Outcome, env ledger.Env) (Step, bool) {
	if cur == nil || cur.Claim == nil || cur.Claim.Attempt != attempt {
		return Step{}, false
	}
	st := cur.DeepCopy()
	st.StatusCode = int32(o.StatusCode) //nolint:gosec // G115: HTTP status codes are three digits
	st.ErrorClass = o.ErrorClass
	what := describe(o)
	switch o.Class {
	case retry.ClassSuccess:
		st.Claim = nil
		st.State, st.DeliveredAt = actionsv1alpha1.DeadLetterDelivered, ledger.PtrTime(o.FinishedAt)
		st.Reason, st.Message = actionsv1alpha1.ReasonDeadLetterDelivered, fmt.Sprintf("delivered by attempt %d (%s)", attempt, what)
		return Step{Kind: ledger.KindNone, Status: st, Event: &ledger.Event{Reason: st.Reason,
			Message: fmt.Sprintf("dead-letter record delivered to %s (%s)", st.Sink, what)}}, true
	case retry.ClassRejected:
		st.Claim = nil
		return fail(st, fmt.Sprintf("attempt %d was rejected (%s)", attempt, what)), true
	case retry.ClassUncertain:
		return uncertain(st, withNow(env, o.FinishedAt), fmt.Sprintf("delivery attempt %d is uncertain (%s)", attempt, what)), true
	default: // Retryable, NotSent, InProgress
		st.Claim = nil
		return schedule(st, withNow(env, o.FinishedAt), o.RetryAfter, fmt.Sprintf("delivery attempt %d: %s", attempt, what)), true
	}
}

// uncertain settles an attempt whose outcome is unknown (DESIGN rule 3): the sink may have the record. Resent
// under the same key when repeating is safe there; otherwise Uncertain, and never sent again by itself.
func uncertain(cur *actionsv1alpha1.DeadLetterStatus, env ledger.Env, why string) Step {
	st := cur.DeepCopy()
	st.Claim = nil
	if env.RepeatSafe {
		return schedule(st, env, "", why+"; repeating is safe at the sink, resending with the same key")
	}
	st.State, st.NextAttemptAt = actionsv1alpha1.DeadLetterUncertain, nil
	st.Reason = actionsv1alpha1.ReasonDeadLetterUncertain
	st.Message = ledger.Truncate(why + "; the sink may have the record and does not deduplicate, so it is not sent again")
	return Step{Kind: ledger.KindNone, Status: st, Event: &ledger.Event{Warning: true, Reason: st.Reason,
		Message: "dead-letter record to " + st.Sink + ": " + st.Message}}
}

// schedule plans the next delivery attempt: max(Retry-After, the jittered backoff), or Failed when that is past
// the deadline or no attempt is left (DESIGN rule 5).
func schedule(st *actionsv1alpha1.DeadLetterStatus, env ledger.Env, retryAfter, why string) Step {
	p := env.Policy
	if st.Deadline != nil {
		p.Deadline = st.Deadline.Time
	}
	d := retry.Next(p, st.Attempts, retryAfter, env.Now, env.Rand)
	if !d.Retry {
		return fail(st, why+"; "+d.Message)
	}
	next := ledger.CeilSecond(d.NextAt)
	st.State, st.NextAttemptAt = actionsv1alpha1.DeadLetterPending, ledger.PtrTime(next)
	st.Reason = actionsv1alpha1.ReasonDeadLetterRetrying
	st.Message = ledger.Truncate(fmt.Sprintf("%s; next delivery attempt at %s", why, next.UTC().Format(time.RFC3339)))
	return Step{Kind: ledger.KindWait, Status: st, At: next, Event: &ledger.Event{Warning: true, Reason: st.Reason,
		Message: "dead-letter record to " + st.Sink + ": " + st.Message}}
}

func fail(cur *actionsv1alpha1.DeadLetterStatus, why string) Step {
	st := cur.DeepCopy()
	st.Claim, st.NextAttemptAt = nil, nil
	st.State, st.Reason = actionsv1alpha1.DeadLetterFailed, actionsv1alpha1.ReasonDeadLetterFailed
	st.Message = ledger.Truncate(why + "; the record is not sent again")
	return Step{Kind: ledger.KindNone, Status: st, Event: &ledger.Event{Warning: true, Reason: st.Reason,
		Message: "dead-letter record to " + st.Sink + " failed: " + st.Message}}
}

func withNow(env ledger.Env, t time.Time) ledger.Env {
	if !t.IsZero() {
		env.Now = t
	}
	return env
}

func describe(o ledger.Outcome) string {
	switch {
	case o.StatusCode != 0:
		return fmt.Sprintf("status %d", o.StatusCode)
	case o.Error != "":
		return ledger.Truncate(o.ErrorClass + ": " + o.Error)
	default:
		return o.ErrorClass
	}
}

// pathOf is spec's path, "/" when empty.
func pathOf(spec *actionsv1alpha1.DeadLetterSink) string {
	if spec.Path == "" {
		return "/"
	}
	return spec.Path
}

// modeOf is spec's mode, Binary when empty.
func modeOf(spec *actionsv1alpha1.DeadLetterSink) actionsv1alpha1.CloudEventMode {
	if spec.Mode == "" {
		return actionsv1alpha1.CloudEventBinary
	}
	return spec.Mode
}
