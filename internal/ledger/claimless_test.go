package ledger

import (
	"testing"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/retry"
)

// claimlessEnv is a repeat-safe action on a destination with idempotency.claim WhenUnsafe, created at t0.
func claimlessEnv(mut ...func(*Env)) Env {
	return testEnv(append([]func(*Env){func(e *Env) { e.Claimless, e.RepeatSafe, e.Created = true, true, t0 }}, mut...)...)
}

// The first attempt of a repeat-safe action goes without a claim only while the destination allows it, no
// attempt was recorded, and the action is younger than ClaimlessWindow; everything else is claimed.
func TestAdvanceUnclaimed(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  Env
		st   func(Env) *actionsv1alpha1.ExternalActionStatus
		want bool
	}{
		{"first attempt, repeat-safe, claim WhenUnsafe", claimlessEnv(), pending, true},
		{"no status written yet", claimlessEnv(), func(Env) *actionsv1alpha1.ExternalActionStatus { return &actionsv1alpha1.ExternalActionStatus{} }, true},
		{"just inside the window", claimlessEnv(func(e *Env) { e.Now = t0.Add(ClaimlessWindow - time.Second) }), pending, true},
		{"past the window: claimed", claimlessEnv(func(e *Env) { e.Now = t0.Add(ClaimlessWindow) }), pending, false},
		{"a timeout longer than the window stretches it", claimlessEnv(func(e *Env) {
			e.AttemptTimeout, e.Now = 5*time.Minute, t0.Add(ClaimlessWindow+time.Minute)
		}), pending, true},
		{"claim Always", claimlessEnv(func(e *Env) { e.Claimless = false }), pending, false},
		{"repeat not safe", claimlessEnv(func(e *Env) { e.RepeatSafe = false }), pending, false},
		{"a retry is claimed", claimlessEnv(), func(e Env) *actionsv1alpha1.ExternalActionStatus {
			st := pending(e)
			st.Attempts = 1
			return st
		}, false},
		{"no creation time", claimlessEnv(func(e *Env) { e.Created = time.Time{} }), pending, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step := Advance(tc.st(tc.env), tc.env)
			if step.Kind != KindSend || step.Status == nil || step.Status.Claim == nil {
				t.Fatalf("step = %+v, want a send with its claim", step)
			}
			if step.Unclaimed != tc.want {
				t.Errorf("Unclaimed = %v, want %v", step.Unclaimed, tc.want)
			}
		})
	}
}

// The outcome of an unclaimed attempt is recorded as attempt 1 with key, fingerprint and deadline, in one
// write; if another manager recorded or claimed an attempt meanwhile, it is dropped.
func TestRecordUnclaimed(t *testing.T) {
	env := claimlessEnv(func(e *Env) { e.Policy.Deadline = t0.Add(time.Hour) })
	sent := Advance(pending(env), env).Status
	done := env
	done.Now = t0.Add(time.Second)
	ok := Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: done.Now,
		Response: &actionsv1alpha1.ResponseRecord{StatusCode: 201, BodySHA256: "sha256:00"}}

	step, recorded := RecordUnclaimed(&actionsv1alpha1.ExternalActionStatus{}, sent, ok, done)
	if !recorded || step.Status == nil {
		t.Fatalf("RecordUnclaimed on a status never written: recorded=%v step=%+v", recorded, step)
	}
	st := step.Status
	if st.Phase != actionsv1alpha1.PhaseSucceeded || st.Attempts != 1 || st.Claim != nil || st.IdempotencyKey != "ns/a" ||
		st.Fingerprint != "sha256:ab" || st.Deadline == nil || st.Response == nil || st.Response.StatusCode != 201 {
		t.Errorf("status = %+v", st)
	}
	if len(st.AttemptHistory) != 0 {
		t.Errorf("a first attempt that succeeded keeps no history entry; got %+v", st.AttemptHistory)
	}
	checkConditions(t, st, 3)

	uncertain := Outcome{Class: retry.ClassUncertain, ErrorClass: "Timeout", FinishedAt: done.Now}
	step, recorded = RecordUnclaimed(pending(env), sent, uncertain, done)
	if !recorded || step.Status.Phase != actionsv1alpha1.PhaseInProgress || step.Status.Claim != nil ||
		step.Status.Attempts != 1 || step.Status.NextAttemptAt == nil || len(step.Status.AttemptHistory) != 1 {
		t.Errorf("an uncertain unclaimed attempt is a scheduled retry of attempt 1 with its history; got %+v", step.Status)
	}

	for name, cur := range map[string]*actionsv1alpha1.ExternalActionStatus{
		"recorded by another manager": st,
		"claimed by another manager":  sent,
	} {
		if step, recorded := RecordUnclaimed(cur, sent, ok, done); recorded || step.Status != nil {
			t.Errorf("%s: RecordUnclaimed wrote %+v, want the outcome dropped", name, step.Status)
		}
	}
}

// Only the success of a first attempt goes without a history entry; a success after a failure keeps both.
func TestHistoryOnlyBeyondAFirstSuccess(t *testing.T) {
	env := testEnv()
	st := claimed(env, 1)
	step, _ := Record(st, 1, Outcome{Class: retry.ClassRetryable, StatusCode: 503, FinishedAt: t0}, env)
	env.Now = t0.Add(time.Minute)
	next := Advance(step.Status, env).Status
	step, _ = Record(next, 2, Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: env.Now}, env)
	if h := step.Status.AttemptHistory; len(h) != 2 || h[0].StatusCode != 503 || h[1].StatusCode != 201 {
		t.Errorf("history = %+v, want attempts 1 (503) and 2 (201)", h)
	}
}
