package ledger

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/retry"
)

func cond(st *actionsv1alpha1.ExternalActionStatus, t string) *metav1.Condition {
	return meta.FindStatusCondition(st.Conditions, t)
}

// A failed attempt that is retried carries a Warning Event (RetryScheduled); a success, and an attempt that
// ends the action, carry only their own event.
func TestRecordRetriedFailureWarns(t *testing.T) {
	env := testEnv(func(e *Env) { e.Now = t0.Add(time.Second) })
	step, _ := Record(claimed(env, 1), 1, Outcome{Class: retry.ClassRetryable, StatusCode: 503, FinishedAt: env.Now}, env)
	if e := step.Event; e == nil || !e.Warning || e.Reason != actionsv1alpha1.ReasonRetryScheduled ||
		!strings.Contains(e.Message, "attempt 1") || !strings.Contains(e.Message, "503") || !strings.Contains(e.Message, "next attempt at") {
		t.Errorf("retried 503: event %+v", step.Event)
	}
	step, _ = Record(claimed(env, 1), 1, Outcome{Class: retry.ClassNotSent, ErrorClass: "Dial", FinishedAt: env.Now}, env)
	if e := step.Event; e == nil || !e.Warning || e.Reason != actionsv1alpha1.ReasonRetryScheduled {
		t.Errorf("retried dial error: event %+v", step.Event)
	}
	step, _ = Record(claimed(env, 3), 3, Outcome{Class: retry.ClassRetryable, StatusCode: 503, FinishedAt: env.Now}, env)
	if e := step.Event; step.Status.Phase != actionsv1alpha1.PhaseExhausted || e == nil || e.Reason != actionsv1alpha1.ReasonAttemptsExhausted {
		t.Errorf("last attempt: phase %s event %+v", step.Status.Phase, step.Event)
	}
	step, _ = Record(claimed(env, 1), 1, Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: env.Now}, env)
	if e := step.Event; e == nil || e.Warning || e.Reason != actionsv1alpha1.ReasonSucceeded {
		t.Errorf("success: event %+v", step.Event)
	}
}

// Blocked: Stalled=True, Reconciling removed, Ready=False, phase kept non-terminal, lastError set, a past
// nextAttemptAt cleared (a future one kept), no write when nothing changes; Unblock undoes it.
func TestBlockedAndUnblock(t *testing.T) {
	env := testEnv()
	st := pending(env)
	st.NextAttemptAt = &metav1.Time{Time: t0.Add(-time.Minute)}
	step := Blocked(st, actionsv1alpha1.ReasonDestinationNotReady, "destination not found: Destination ns/paymnts", env)
	b := step.Status
	if b == nil || b.Phase != actionsv1alpha1.PhasePending || b.NextAttemptAt != nil || !strings.Contains(b.LastError, "paymnts") {
		t.Fatalf("blocked = %+v", b)
	}
	if c := cond(b, actionsv1alpha1.ConditionReconciling); c != nil {
		t.Errorf("Reconciling = %+v, want it removed while stalled", c)
	}
	for typ, want := range map[string]metav1.ConditionStatus{actionsv1alpha1.ConditionStalled: metav1.ConditionTrue,
		actionsv1alpha1.ConditionReady: metav1.ConditionFalse} {
		if c := cond(b, typ); c == nil || c.Status != want || c.Reason != actionsv1alpha1.ReasonDestinationNotReady || c.ObservedGeneration != 3 {
			t.Errorf("%s = %+v, want %s/DestinationNotReady", typ, c, want)
		}
	}
	if again := Blocked(b, actionsv1alpha1.ReasonDestinationNotReady, "destination not found: Destination ns/paymnts", env); again.Status != nil {
		t.Errorf("same block again wrote: %+v", again.Status)
	}
	if other := Blocked(b, actionsv1alpha1.ReasonEgressDenied, "denied", env); other.Status == nil || cond(other.Status, actionsv1alpha1.ConditionStalled).Reason != actionsv1alpha1.ReasonEgressDenied {
		t.Errorf("another reason did not write: %+v", other)
	}
	// A retry scheduled in the future stays.
	ip := claimed(env, 1)
	ip.Claim, ip.Phase = nil, actionsv1alpha1.PhaseInProgress
	ip.NextAttemptAt = &metav1.Time{Time: t0.Add(time.Minute)}
	if s := Blocked(ip, actionsv1alpha1.ReasonNamespaceNotAllowed, "x", env).Status; s.Phase != actionsv1alpha1.PhaseInProgress || s.NextAttemptAt == nil {
		t.Errorf("in progress blocked = %+v", s)
	}

	if Unblock(pending(env), env) != nil {
		t.Errorf("Unblock of an unblocked status wrote")
	}
	u := Unblock(b, env)
	if u == nil || u.LastError != "" || u.Phase != actionsv1alpha1.PhasePending {
		t.Fatalf("unblocked = %+v", u)
	}
	checkConditions(t, u, 3)
	if got := Advance(u, env); got.Kind != KindSend {
		t.Errorf("after Unblock, Advance = %s, want Send", got.Kind)
	}
}

// ObserveFinished: a new generation of a finished action recomputes expiresAt from completedAt with the
// retention in force, moves every observedGeneration, and says that a retry policy no longer applies.
func TestObserveFinished(t *testing.T) {
	env := testEnv(func(e *Env) { e.Now = t0.Add(time.Second) })
	done, _ := Record(claimed(env, 1), 1, Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: env.Now}, env)
	fin := done.Status
	if ObserveFinished(fin, env) != nil {
		t.Fatalf("the same generation wrote")
	}
	gen4 := testEnv(func(e *Env) { e.Now = t0.Add(time.Hour); e.Generation = 4; e.Retention = time.Minute })
	st := ObserveFinished(fin, gen4)
	if st == nil || !st.ExpiresAt.Time.Equal(fin.CompletedAt.Add(time.Minute)) || st.Phase != actionsv1alpha1.PhaseSucceeded {
		t.Fatalf("observed = %+v", st)
	}
	checkConditions(t, st, 4)
	if c := cond(st, actionsv1alpha1.ConditionReconciling); !strings.Contains(c.Message, "spec.retryPolicy no longer applies") ||
		!strings.Contains(c.Message, "expiresAt is now") {
		t.Errorf("Reconciling message %q", c.Message)
	}
	if c := cond(st, actionsv1alpha1.ConditionReady); c.Message != cond(fin, actionsv1alpha1.ConditionReady).Message {
		t.Errorf("Ready message changed to %q", c.Message)
	}
	// OutcomeUnknown is never collected: no expiresAt, and the message names the retry decision.
	unk := outcomeUnknown(env)
	st = ObserveFinished(unk, gen4)
	if st == nil || st.ExpiresAt != nil || !strings.Contains(cond(st, actionsv1alpha1.ConditionReconciling).Message, "=retry") {
		t.Errorf("OutcomeUnknown observed = %+v", st)
	}
	checkConditions(t, st, 4)
	if ObserveFinished(pending(env), gen4) != nil {
		t.Errorf("a pending action was observed as finished")
	}
}

// A tombstone with a kept response replays it whole: status code, headers and body.
func TestReplayKeepsResponse(t *testing.T) {
	env := testEnv()
	resp := &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"ch_1"}`, BodySHA256: "sha256:00",
		Headers: map[string]string{"Location": "/charges/ch_1"}}
	st := Replay(&actionsv1alpha1.ExternalActionStatus{}, "ns/a", "sha256:ab",
		Tombstone{UID: "u1", Phase: actionsv1alpha1.PhaseSucceeded, StatusCode: 201, Response: resp}, env).Status
	if st.Response == nil || st.Response.Body != resp.Body || st.Response.Headers["Location"] != "/charges/ch_1" || st.Response.BodySHA256 == "" {
		t.Fatalf("replayed response = %+v", st.Response)
	}
	resp.Body = "changed"
	if st.Response.Body == "changed" {
		t.Errorf("the replay shares the tombstone's response")
	}
}

// A stall on the subject (SubjectOutcomeUnknown) is not a stall on the destination: Unblock leaves it alone,
// so a usable destination does not flap the waiter's conditions.
func TestUnblockLeavesSubjectStall(t *testing.T) {
	env := Env{Now: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC), Generation: 1}
	st := &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhasePending}
	step := WaitForSubject(st, actionsv1alpha1.ReasonSubjectOutcomeUnknown, "waiting for charge-order-19", env)
	if step.Status == nil {
		t.Fatal("WaitForSubject wrote nothing")
	}
	if got := Unblock(step.Status, env); got != nil {
		t.Errorf("Unblock changed a subject stall: %+v", got.Conditions)
	}
	blocked := Blocked(&actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhasePending},
		actionsv1alpha1.ReasonDestinationNotReady, "destination missing", env)
	if Unblock(blocked.Status, env) == nil {
		t.Error("Unblock left a destination stall")
	}
}
