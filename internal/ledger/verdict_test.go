package ledger

import (
	"strings"
	"testing"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/retry"
)

// unjudgedOutcome is attempt 1's 201 whose successWhen evaluation did not finish, Rejected should it not hold.
func unjudgedOutcome(at time.Time) Outcome {
	return Outcome{Class: retry.ClassUnjudged, FinishedAt: at, StatusCode: 201,
		Response: &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"x1"}`},
		Verdict: &actionsv1alpha1.PendingVerdict{ReceivedAt: mt(at), InputSHA256: "ab", Otherwise: string(retry.ClassRejected),
			Reason: "no evaluation slot within 2s (context deadline exceeded)"}}
}

// DESIGN rule 12: a response whose successWhen evaluation did not finish is recorded without a verdict: the
// claim stays open with the pending verdict, the phase InProgress (VerdictPending), nothing is sent, and
// Advance asks for a judgement (never a send, never the uncertain path) once the wait is over. The judgement's
// outcome is then recorded on the same claim like any other.
func TestRecordUnjudgedWaitsForItsVerdict(t *testing.T) {
	env := testEnv()
	st := claimed(env, 1)
	env.Now = t0.Add(time.Second)
	step, ok := Record(st, 1, unjudgedOutcome(env.Now), env)
	if !ok || step.Status == nil {
		t.Fatal("not recorded")
	}
	got := step.Status
	checkConditions(t, got, 3)
	if got.Phase != actionsv1alpha1.PhaseInProgress || conditionOf(got, actionsv1alpha1.ConditionReconciling).Reason != actionsv1alpha1.ReasonVerdictPending {
		t.Fatalf("phase %s, Reconciling %+v; want InProgress, VerdictPending", got.Phase, conditionOf(got, actionsv1alpha1.ConditionReconciling))
	}
	if got.Claim == nil || got.Claim.Verdict == nil || got.Claim.Verdict.Evaluations != 1 || got.Response == nil ||
		got.Response.StatusCode != 201 || got.CompletedAt != nil {
		t.Fatalf("claim %+v, response %+v, completedAt %v", got.Claim, got.Response, got.CompletedAt)
	}
	if step.Kind != KindWait || !step.At.Equal(got.Claim.ExpiresAt.Time) || got.Claim.ExpiresAt.Sub(env.Now) > 2*time.Second {
		t.Errorf("step %s at %v, claim expires %v; want a wait of about JudgeBackoff(1)", step.Kind, step.At, got.Claim.ExpiresAt)
	}
	if a := Advance(got, env); a.Kind != KindWait {
		t.Errorf("Advance before the wait is over = %s, want Wait", a.Kind)
	}
	env.Now = got.Claim.ExpiresAt.Time
	if a := Advance(got, env); a.Kind != KindJudge || a.Status != nil {
		t.Fatalf("Advance after the wait = %s (status %v), want Judge without a write", a.Kind, a.Status != nil)
	}
	// A second evaluation that did not finish counts and backs off further.
	again, _ := Record(got, 1, Outcome{Class: retry.ClassUnjudged, FinishedAt: got.Claim.Verdict.ReceivedAt.Time, StatusCode: 201,
		Response: got.Response, Verdict: &actionsv1alpha1.PendingVerdict{Reason: "context deadline exceeded"}}, env)
	if v := again.Status.Claim.Verdict; v.Evaluations != 2 || v.InputSHA256 != "ab" || v.Otherwise != string(retry.ClassRejected) ||
		v.Reason != "context deadline exceeded" {
		t.Errorf("verdict after a second try = %+v; want the first input kept, 2 evaluations, the new reason", v)
	}
	// The judgement: successWhen held. Succeeded, the claim and its verdict gone.
	done, ok := Record(again.Status, 1, Outcome{Class: retry.ClassSuccess, FinishedAt: t0.Add(time.Second), StatusCode: 201,
		Response: got.Response}, env)
	if !ok || done.Status.Phase != actionsv1alpha1.PhaseSucceeded || done.Status.Claim != nil {
		t.Fatalf("after the judgement: phase %s, claim %+v", done.Status.Phase, done.Status.Claim)
	}
	// Or it did not hold: the verdict's recorded class (Rejected) applies, as it would have at once.
	rejected, _ := Record(again.Status, 1, Outcome{Class: retry.ClassRejected, FinishedAt: t0.Add(time.Second), StatusCode: 201,
		Response: got.Response}, env)
	if rejected.Status.Phase != actionsv1alpha1.PhaseFailed {
		t.Errorf("a judged rejection: phase %s, want Failed", rejected.Status.Phase)
	}
}

// An evaluation that can never finish (the cost limit), or MaxUnfinishedEvaluations that did not, end the action
// OutcomeUnknown (VerdictUnavailable) with the response kept: a person decides; never Failed.
func TestRecordUnjudgeableWaitsForAPerson(t *testing.T) {
	env := testEnv()
	never := unjudgedOutcome(t0.Add(time.Second))
	never.Unjudgeable = "spec.successWhen cannot be evaluated on this response (actual cost limit exceeded)"
	step, _ := Record(claimed(env, 1), 1, never, env)
	st := step.Status
	checkConditions(t, st, 3)
	if st.Phase != actionsv1alpha1.PhaseOutcomeUnknown || conditionOf(st, actionsv1alpha1.ConditionStalled).Reason != actionsv1alpha1.ReasonVerdictUnavailable ||
		st.Claim != nil || st.Response == nil || st.ExpiresAt != nil {
		t.Fatalf("phase %s, Stalled %+v, claim %+v, response %v, expiresAt %v", st.Phase,
			conditionOf(st, actionsv1alpha1.ConditionStalled), st.Claim, st.Response != nil, st.ExpiresAt)
	}
	if msg := conditionOf(st, actionsv1alpha1.ConditionStalled).Message; !strings.Contains(msg, actionsv1alpha1.AnnotationResolve) {
		t.Errorf("message %q does not say how a person decides", msg)
	}

	st = claimed(env, 1)
	for i := range MaxUnfinishedEvaluations {
		s, ok := Record(st, 1, unjudgedOutcome(t0.Add(time.Second)), env)
		if !ok {
			t.Fatalf("evaluation %d not recorded", i+1)
		}
		st = s.Status
		if want := i+1 < MaxUnfinishedEvaluations; (st.Phase == actionsv1alpha1.PhaseInProgress) != want {
			t.Fatalf("after %d unfinished evaluations phase %s", i+1, st.Phase)
		}
	}
	if st.Phase != actionsv1alpha1.PhaseOutcomeUnknown || conditionOf(st, actionsv1alpha1.ConditionStalled).Reason != actionsv1alpha1.ReasonVerdictUnavailable {
		t.Errorf("after %d unfinished evaluations: phase %s", MaxUnfinishedEvaluations, st.Phase)
	}
}

func TestJudgeBackoff(t *testing.T) {
	for n, want := range map[int32]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 6: 32 * time.Second,
		7: time.Minute, 40: time.Minute} {
		if got := JudgeBackoff(n); got != want {
			t.Errorf("JudgeBackoff(%d) = %v, want %v", n, got, want)
		}
	}
}
