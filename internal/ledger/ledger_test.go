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

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func testEnv(mut ...func(*Env)) Env {
	e := Env{
		Now: t0, Holder: "h1", Generation: 3,
		Policy: retry.Policy{
			MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, Multiplier: 2,
			Jitter: retry.JitterNone, RetryOnStatus: retry.DefaultRetryOnStatus(),
		},
		AttemptTimeout: 10 * time.Second, ClaimMargin: 2 * time.Second, Retention: time.Hour,
		Rand: func() float64 { return 0.5 },
	}
	for _, m := range mut {
		m(&e)
	}
	return e
}

func pending(env Env) *actionsv1alpha1.ExternalActionStatus {
	return Begin(&actionsv1alpha1.ExternalActionStatus{}, "ns/a", "sha256:ab", env)
}

// claimed returns a status with attempt n claimed at t0 by holder "h0".
func claimed(env Env, n int32) *actionsv1alpha1.ExternalActionStatus {
	env.Now = t0
	st := pending(env)
	st.Attempts = n - 1
	step := Advance(st, env)
	st = step.Status
	st.Claim.Holder = "h0"
	return st
}

func mt(t time.Time) metav1.Time { return metav1.NewTime(t) }

// checkAbnormalTrue asserts that Stalled is never False (it is removed instead), nor Reconciling False but on a
// finished action's observed edit (its message then starts "finished (").
func checkAbnormalTrue(t *testing.T, st *actionsv1alpha1.ExternalActionStatus) {
	t.Helper()
	if c := meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionStalled); c != nil && c.Status != metav1.ConditionTrue {
		t.Errorf("phase %s: Stalled is %s; an abnormal-true condition is removed, not set False", st.Phase, c.Status)
	}
	if c := meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionReconciling); c != nil && c.Status != metav1.ConditionTrue &&
		!strings.HasPrefix(c.Message, "finished (") {
		t.Errorf("phase %s: Reconciling is %s (%q); an abnormal-true condition is removed, not set False", st.Phase, c.Status, c.Message)
	}
}

// checkConditions asserts Ready/Reconciling/Stalled for the phase, with observedGeneration: Ready always,
// Reconciling and Stalled (abnormal-true) only while True, except a Reconciling False that notes the edit of a
// finished action (ObserveFinished).
//
//nolint:unparam // gen is the generation under test, spelled out at each call rather than implied.
func checkConditions(t *testing.T, st *actionsv1alpha1.ExternalActionStatus, gen int64) {
	t.Helper()
	checkAbnormalTrue(t, st)
	var want map[string]bool
	switch st.Phase {
	case actionsv1alpha1.PhaseSucceeded:
		want = map[string]bool{actionsv1alpha1.ConditionReady: true}
	case actionsv1alpha1.PhasePending, actionsv1alpha1.PhaseInProgress:
		want = map[string]bool{actionsv1alpha1.ConditionReconciling: true}
	default:
		want = map[string]bool{actionsv1alpha1.ConditionStalled: true}
	}
	for _, ct := range []string{actionsv1alpha1.ConditionReady, actionsv1alpha1.ConditionReconciling, actionsv1alpha1.ConditionStalled} {
		c := meta.FindStatusCondition(st.Conditions, ct)
		if c == nil {
			if ct == actionsv1alpha1.ConditionReady || want[ct] {
				t.Errorf("phase %s: condition %s missing", st.Phase, ct)
			}
			continue
		}
		if (c.Status == metav1.ConditionTrue) != want[ct] {
			t.Errorf("phase %s: condition %s = %s, want true=%v", st.Phase, ct, c.Status, want[ct])
		}
		if c.ObservedGeneration != gen {
			t.Errorf("phase %s: condition %s observedGeneration = %d, want %d", st.Phase, ct, c.ObservedGeneration, gen)
		}
	}
	if st.ObservedGeneration != gen {
		t.Errorf("status.observedGeneration = %d, want %d", st.ObservedGeneration, gen)
	}
}

func TestBeginIsIdempotent(t *testing.T) {
	env := testEnv(func(e *Env) { e.Policy.Deadline = t0.Add(time.Hour) })
	st := pending(env)
	if st.Phase != actionsv1alpha1.PhasePending || st.IdempotencyKey != "ns/a" || st.Fingerprint != "sha256:ab" ||
		st.Deadline == nil || !st.Deadline.Time.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Begin = %+v", st)
	}
	checkConditions(t, st, 3)
	if again := Begin(st, "ns/a", "sha256:other", env); again != nil {
		t.Fatalf("Begin on an initialised status = %+v, want nil", again)
	}
}

func TestAdvanceClaim(t *testing.T) {
	for _, tc := range []struct {
		name            string
		timeout, margin time.Duration
		attempts        int32
		wantExpiry      time.Time
	}{
		{"timeout plus margin", 10 * time.Second, 2 * time.Second, 0, t0.Add(12 * time.Second)},
		{"second attempt", 10 * time.Second, 2 * time.Second, 1, t0.Add(12 * time.Second)},
		{"zero timeout never gives a zero or immediate expiry (C06)", 0, 0, 0, t0.Add(35 * time.Second)},
		{"negative values use defaults", -time.Second, -time.Second, 0, t0.Add(35 * time.Second)},
		{"sub-second expiry rounds up to the stored precision", 1500 * time.Millisecond, 0, 0, t0.Add(7 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(func(e *Env) { e.AttemptTimeout, e.ClaimMargin = tc.timeout, tc.margin })
			st := pending(env)
			st.Attempts = tc.attempts
			step := Advance(st, env)
			if step.Kind != KindSend || step.Status == nil || step.Status.Claim == nil {
				t.Fatalf("step = %+v, want Send with a claim", step)
			}
			c := step.Status.Claim
			if c.Attempt != tc.attempts+1 || step.Status.Attempts != tc.attempts+1 || c.Holder != "h1" || !c.StartedAt.Time.Equal(t0) {
				t.Errorf("claim = %+v, attempts %d", c, step.Status.Attempts)
			}
			if c.ExpiresAt.IsZero() || !c.ExpiresAt.After(c.StartedAt.Time) || !c.ExpiresAt.Time.Equal(tc.wantExpiry) {
				t.Errorf("expiresAt = %v, want %v (absolute, after startedAt)", c.ExpiresAt, tc.wantExpiry)
			}
			if step.Status.Phase != actionsv1alpha1.PhaseInProgress || step.Status.NextAttemptAt != nil {
				t.Errorf("phase %s nextAttemptAt %v", step.Status.Phase, step.Status.NextAttemptAt)
			}
			checkConditions(t, step.Status, 3)
			if st.Claim != nil || st.Attempts != tc.attempts {
				t.Errorf("Advance modified its input: %+v", st)
			}
		})
	}
}

func TestAdvanceOpenClaimWaits(t *testing.T) {
	env := testEnv()
	st := claimed(env, 1)
	for _, now := range []time.Time{t0, t0.Add(5 * time.Second), t0.Add(12*time.Second - time.Nanosecond)} {
		e := env
		e.Now = now
		e.Holder = "h2"
		step := Advance(st, e)
		if step.Kind != KindWait || step.Status != nil || !step.At.Equal(st.Claim.ExpiresAt.Time) {
			t.Errorf("at %v: step = %+v, want Wait until %v without a write", now, step, st.Claim.ExpiresAt)
		}
	}
}

func TestAdvanceExpiredClaim(t *testing.T) {
	for _, tc := range []struct {
		name       string
		repeatSafe bool
		postCheck  bool
		wantKind   Kind
		wantPhase  actionsv1alpha1.Phase
		wantClaim  bool
	}{
		{"repeat-safe resends with the same key", true, false, KindWait, actionsv1alpha1.PhaseInProgress, false},
		{"repeat-safe wins over post-check", true, true, KindWait, actionsv1alpha1.PhaseInProgress, false},
		{"post-check", false, true, KindPostCheck, actionsv1alpha1.PhaseInProgress, true},
		{"neither is OutcomeUnknown", false, false, KindNone, actionsv1alpha1.PhaseOutcomeUnknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(func(e *Env) { e.RepeatSafe, e.PostCheck, e.Now = tc.repeatSafe, tc.postCheck, t0.Add(12*time.Second) })
			st := claimed(env, 1)
			step := Advance(st, env)
			if step.Kind != tc.wantKind || step.Status == nil {
				t.Fatalf("step = %+v, want %s with a status write", step, tc.wantKind)
			}
			got := step.Status
			if got.Phase != tc.wantPhase || (got.Claim != nil) != tc.wantClaim {
				t.Fatalf("phase %s claim %+v", got.Phase, got.Claim)
			}
			if got.IdempotencyKey != "ns/a" || got.Attempts != 1 {
				t.Errorf("key %q attempts %d", got.IdempotencyKey, got.Attempts)
			}
			if len(got.AttemptHistory) != 1 || got.AttemptHistory[0].Result != string(retry.ClassUncertain) || got.AttemptHistory[0].ErrorClass != "ClaimExpired" {
				t.Errorf("history = %+v", got.AttemptHistory)
			}
			checkConditions(t, got, 3)
			switch tc.wantKind {
			case KindWait:
				if got.NextAttemptAt == nil || !got.NextAttemptAt.Time.Equal(step.At) || step.At.Before(env.Now) {
					t.Errorf("rescheduled at %v (step.At %v)", got.NextAttemptAt, step.At)
				}
				// The rescheduled attempt is claimed under the same key once its time comes.
				e := env
				e.Now = step.At
				next := Advance(got, e)
				if next.Kind != KindSend || next.Status.Claim.Attempt != 2 || next.Status.IdempotencyKey != "ns/a" {
					t.Errorf("after the wait: %+v", next)
				}
			case KindPostCheck:
				if !condReason(got, actionsv1alpha1.ConditionReconciling, actionsv1alpha1.ReasonPostCheckPending) {
					t.Errorf("conditions %+v", got.Conditions)
				}
				// Asked again with nothing changed: no second write.
				if again := Advance(got, env); again.Kind != KindPostCheck || again.Status != nil {
					t.Errorf("second Advance = %+v, want PostCheck without a write", again)
				}
			case KindNone:
				if step.Event == nil || !step.Event.Warning || step.Event.Reason != actionsv1alpha1.ReasonOutcomeUnknown ||
					!strings.Contains(step.Event.Message, actionsv1alpha1.AnnotationResolve) {
					t.Errorf("event = %+v", step.Event)
				}
				if got.ExpiresAt != nil || got.CompletedAt == nil {
					t.Errorf("OutcomeUnknown expiresAt %v completedAt %v: must never be collected", got.ExpiresAt, got.CompletedAt)
				}
				// Terminal: nothing more, ever.
				if again := Advance(got, testEnv(func(e *Env) { e.Now = t0.Add(time.Hour) })); again.Kind != KindNone || again.Status != nil {
					t.Errorf("Advance on OutcomeUnknown = %+v", again)
				}
			}
		})
	}
}

func TestAdvanceSchedule(t *testing.T) {
	env := testEnv(func(e *Env) { e.Policy.Deadline = t0.Add(time.Minute) })
	st := pending(env)
	st.Attempts = 1
	st.NextAttemptAt = &metav1.Time{Time: t0.Add(5 * time.Second)}
	if step := Advance(st, env); step.Kind != KindWait || !step.At.Equal(t0.Add(5*time.Second)) || step.Status != nil {
		t.Errorf("before nextAttemptAt: %+v", step)
	}
	e := env
	e.Now = t0.Add(5 * time.Second)
	if step := Advance(st, e); step.Kind != KindSend || step.Status.Claim.Attempt != 2 {
		t.Errorf("at nextAttemptAt: %+v", step)
	}
	st.Attempts = 3
	if step := Advance(st, e); step.Kind != KindNone || step.Status.Phase != actionsv1alpha1.PhaseExhausted ||
		!condReason(step.Status, actionsv1alpha1.ConditionStalled, actionsv1alpha1.ReasonAttemptsExhausted) {
		t.Errorf("attempts used up: %+v", step)
	}
	st.Attempts = 1
	e.Now = t0.Add(time.Minute)
	if step := Advance(st, e); step.Status == nil || step.Status.Phase != actionsv1alpha1.PhaseExhausted ||
		!condReason(step.Status, actionsv1alpha1.ConditionStalled, actionsv1alpha1.ReasonDeadlineExceeded) {
		t.Errorf("deadline passed: %+v", step)
	}
}

func TestRecord(t *testing.T) {
	resp := &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"x1"}`}
	later := t0.Add(3 * time.Second)
	for _, tc := range []struct {
		name       string
		env        func(*Env)
		outcome    Outcome
		wantKind   Kind
		wantPhase  actionsv1alpha1.Phase
		wantClaim  bool
		wantNext   bool
		wantReason string
	}{
		{"success", nil, Outcome{Class: retry.ClassSuccess, StatusCode: 201, Response: resp},
			KindNone, actionsv1alpha1.PhaseSucceeded, false, false, actionsv1alpha1.ReasonSucceeded},
		{"rejection", nil, Outcome{Class: retry.ClassRejected, StatusCode: 422},
			KindNone, actionsv1alpha1.PhaseFailed, false, false, actionsv1alpha1.ReasonRejected},
		{"retryable 503", nil, Outcome{Class: retry.ClassRetryable, StatusCode: 503, RetryAfter: "7"},
			KindWait, actionsv1alpha1.PhaseInProgress, false, true, actionsv1alpha1.ReasonRetryScheduled},
		{"not sent", nil, Outcome{Class: retry.ClassNotSent, ErrorClass: "Dial"},
			KindWait, actionsv1alpha1.PhaseInProgress, false, true, actionsv1alpha1.ReasonRetryScheduled},
		{"409 in progress is retried", func(e *Env) { e.KeySupported, e.RepeatSafe = true, true }, Outcome{Class: retry.ClassInProgress, StatusCode: 409},
			KindWait, actionsv1alpha1.PhaseInProgress, false, true, actionsv1alpha1.ReasonRetryScheduled},
		{"timeout, repeat-safe", func(e *Env) { e.RepeatSafe = true }, Outcome{Class: retry.ClassUncertain, ErrorClass: "Timeout"},
			KindWait, actionsv1alpha1.PhaseInProgress, false, true, actionsv1alpha1.ReasonRetryScheduled},
		{"timeout, post-check", func(e *Env) { e.PostCheck = true }, Outcome{Class: retry.ClassUncertain, ErrorClass: "Timeout"},
			KindPostCheck, actionsv1alpha1.PhaseInProgress, true, false, actionsv1alpha1.ReasonPostCheckPending},
		{"timeout, neither", nil, Outcome{Class: retry.ClassUncertain, ErrorClass: "Timeout"},
			KindNone, actionsv1alpha1.PhaseOutcomeUnknown, false, false, actionsv1alpha1.ReasonOutcomeUnknown},
		{"504 not repeat-safe", nil, Outcome{Class: retry.ClassUncertain, StatusCode: 504},
			KindNone, actionsv1alpha1.PhaseOutcomeUnknown, false, false, actionsv1alpha1.ReasonOutcomeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(func(e *Env) {
				e.Now = later
				if tc.env != nil {
					tc.env(e)
				}
			})
			st := claimed(env, 1)
			o := tc.outcome
			o.FinishedAt = later
			step, ok := Record(st, 1, o, env)
			if !ok || step.Status == nil {
				t.Fatalf("Record = %+v, %v", step, ok)
			}
			got := step.Status
			if step.Kind != tc.wantKind || got.Phase != tc.wantPhase || (got.Claim != nil) != tc.wantClaim || (got.NextAttemptAt != nil) != tc.wantNext {
				t.Fatalf("kind %s phase %s claim %+v next %v", step.Kind, got.Phase, got.Claim, got.NextAttemptAt)
			}
			if tc.wantClaim {
				// The post-check is asked only once the claim expired: a slow destination may still commit.
				if !got.Claim.ExpiresAt.Time.Equal(t0.Add(12 * time.Second)) {
					t.Errorf("claim expiry changed to %v", got.Claim.ExpiresAt)
				}
				if w := Advance(got, env); w.Kind != KindWait || !w.At.Equal(got.Claim.ExpiresAt.Time) || w.Status != nil {
					t.Errorf("before the expiry: %+v", w)
				}
				e := env
				e.Now = got.Claim.ExpiresAt.Time
				if pc := Advance(got, e); pc.Kind != KindPostCheck || pc.Status != nil {
					t.Errorf("at the expiry: %+v, want PostCheck without a write", pc)
				}
			}
			if got.Attempts != 1 || got.IdempotencyKey != "ns/a" {
				t.Errorf("attempts %d key %q", got.Attempts, got.IdempotencyKey)
			}
			checkHistory(t, got, o, later)
			c := meta.FindStatusCondition(got.Conditions, actionsv1alpha1.ConditionReady)
			if c == nil || c.Reason != tc.wantReason {
				t.Errorf("Ready condition = %+v, want reason %s", c, tc.wantReason)
			}
			checkConditions(t, got, 3)
			if tc.wantPhase.Terminal() && got.CompletedAt == nil {
				t.Errorf("terminal without completedAt")
			}
			if tc.name == "retryable 503" && !got.NextAttemptAt.Time.Equal(later.Add(7*time.Second)) {
				t.Errorf("Retry-After 7 not honoured: next %v", got.NextAttemptAt)
			}
			if tc.name == "success" && (got.Response == nil || got.Response.Body != resp.Body || got.LastError != "" || got.ExpiresAt == nil ||
				!got.ExpiresAt.Time.Equal(later.Add(time.Hour)) || !step.At.Equal(got.ExpiresAt.Time)) {
				t.Errorf("success status = %+v", got)
			}
			if tc.wantPhase == actionsv1alpha1.PhaseOutcomeUnknown && (step.Event == nil || !step.Event.Warning || got.ExpiresAt != nil) {
				t.Errorf("OutcomeUnknown: event %+v expiresAt %v", step.Event, got.ExpiresAt)
			}
		})
	}
}

// checkHistory asserts the attempt-history entry Record wrote for o: none for a first attempt's success (the
// lean happy path: attempts and the response say it; TestHistoryOnlyBeyondAFirstSuccess has the rest), else
// one entry with o's result, code, error class, Retry-After and times.
func checkHistory(t *testing.T, got *actionsv1alpha1.ExternalActionStatus, o Outcome, finished time.Time) {
	t.Helper()
	if o.Class == retry.ClassSuccess {
		if len(got.AttemptHistory) != 0 {
			t.Errorf("history = %+v, want none for a first attempt's success", got.AttemptHistory)
		}
		return
	}
	if len(got.AttemptHistory) != 1 {
		t.Fatalf("history = %+v", got.AttemptHistory)
	}
	h := got.AttemptHistory[0]
	if h.Number != 1 || h.Result != string(o.Class) || int(h.StatusCode) != o.StatusCode || h.ErrorClass != o.ErrorClass ||
		h.RetryAfter != o.RetryAfter || h.FinishedAt == nil || !h.FinishedAt.Time.Equal(finished) || !h.StartedAt.Time.Equal(t0) {
		t.Errorf("history record = %+v", h)
	}
}

func TestRecordStaleAttempt(t *testing.T) {
	env := testEnv()
	o := Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: t0}
	st := claimed(env, 2)
	if step, ok := Record(st, 1, o, env); ok || step.Status != nil {
		t.Errorf("outcome of attempt 1 while attempt 2 is open: %+v %v", step, ok)
	}
	st.Claim = nil
	if step, ok := Record(st, 2, o, env); ok || step.Status != nil {
		t.Errorf("outcome without an open claim: %+v %v", step, ok)
	}
	if step, ok := RecordCheck(st, 2, VerdictApplied, nil, "", env); ok || step.Status != nil {
		t.Errorf("post-check without an open claim: %+v %v", step, ok)
	}
}

// lastError names the class and the status code, and after it the error that came with the response (a
// successWhen that failed to evaluate on it), which the status code alone would hide.
func TestRecordLastError(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Outcome
		want string
	}{
		{"status only", Outcome{Class: retry.ClassRejected, StatusCode: 422}, "Rejected: status 422"},
		{"status and successWhen's failure", Outcome{Class: retry.ClassRejected, StatusCode: 201,
			Error: "spec.successWhen: evaluating expression: no such key"}, "Rejected: status 201; spec.successWhen: evaluating expression: no such key"},
		{"error without a response", Outcome{Class: retry.ClassNotSent, ErrorClass: "Dial", Error: "refused"}, "NotSent: Dial: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv()
			tc.o.FinishedAt = t0
			step, ok := Record(claimed(env, 1), 1, tc.o, env)
			if !ok || step.Status.LastError != tc.want {
				t.Errorf("lastError %q (ok %v), want %q", step.Status.LastError, ok, tc.want)
			}
		})
	}
}

func TestRecordCheck(t *testing.T) {
	env := testEnv(func(e *Env) { e.PostCheck = true; e.MaxPostChecks = 2; e.Now = t0.Add(13 * time.Second) })
	start := func() *actionsv1alpha1.ExternalActionStatus {
		step := Advance(claimed(env, 1), env)
		if step.Kind != KindPostCheck {
			t.Fatalf("setup: %+v", step)
		}
		return step.Status
	}
	t.Run("applied", func(t *testing.T) {
		step, ok := RecordCheck(start(), 1, VerdictApplied, &actionsv1alpha1.ResponseRecord{StatusCode: 200}, "", env)
		if !ok || step.Status.Phase != actionsv1alpha1.PhaseSucceeded || step.Status.Claim != nil || step.Status.AttemptHistory[0].Result != "Applied" ||
			step.Status.Response == nil || step.Status.Response.StatusCode != 200 {
			t.Fatalf("%+v", step.Status)
		}
		checkConditions(t, step.Status, 3)
	})
	t.Run("not applied resends", func(t *testing.T) {
		step, ok := RecordCheck(start(), 1, VerdictNotApplied, nil, "", env)
		if !ok || step.Kind != KindWait || step.Status.Phase != actionsv1alpha1.PhaseInProgress || step.Status.Claim != nil ||
			step.Status.NextAttemptAt == nil || step.Status.AttemptHistory[0].Result != "NotApplied" {
			t.Fatalf("%+v", step.Status)
		}
		e := env
		e.Now = step.At
		if next := Advance(step.Status, e); next.Kind != KindSend || next.Status.Claim.Attempt != 2 {
			t.Errorf("after not-applied: %+v", next)
		}
	})
	t.Run("inconclusive until maxChecks, then OutcomeUnknown", func(t *testing.T) {
		step, ok := RecordCheck(start(), 1, VerdictInconclusive, nil, "", env)
		if !ok || step.Kind != KindWait || step.Status.Claim == nil || step.Status.Claim.PostChecks != 1 || !step.Status.Claim.ExpiresAt.After(env.Now) {
			t.Fatalf("first inconclusive: %+v", step)
		}
		e := env
		e.Now = step.At
		if again := Advance(step.Status, e); again.Kind != KindPostCheck {
			t.Fatalf("after the wait: %+v", again)
		}
		step, ok = RecordCheck(step.Status, 1, VerdictInconclusive, nil, "", e)
		if !ok || step.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown || step.Status.Claim != nil || step.Event == nil || !step.Event.Warning {
			t.Fatalf("second inconclusive: %+v", step)
		}
		checkConditions(t, step.Status, 3)
	})
	t.Run("an expression that failed to evaluate is named in the condition", func(t *testing.T) {
		why := "spec.reconciliation.applied failed to evaluate on the response"
		step, _ := RecordCheck(start(), 1, VerdictInconclusive, nil, why, env)
		if c := conditionOf(step.Status, actionsv1alpha1.ConditionReady); c == nil || !strings.Contains(c.Message, why) {
			t.Fatalf("first inconclusive: Ready %+v, want its message to say %q", c, why)
		}
		e := env
		e.Now = step.At
		step, _ = RecordCheck(step.Status, 1, VerdictInconclusive, nil, why, e)
		if !strings.Contains(step.Event.Message, why) {
			t.Fatalf("OutcomeUnknown event %q, want it to say %q", step.Event.Message, why)
		}
	})
}

func conditionOf(st *actionsv1alpha1.ExternalActionStatus, t string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func outcomeUnknown(env Env) *actionsv1alpha1.ExternalActionStatus {
	e := env
	e.Now = t0.Add(time.Minute)
	return Advance(claimed(env, 1), e).Status
}

func TestResolve(t *testing.T) {
	env := testEnv(func(e *Env) { e.Now = t0.Add(2 * time.Minute) })
	for _, tc := range []struct {
		decision  string
		wantPhase actionsv1alpha1.Phase
		wantKind  Kind
		wantHist  string
	}{
		{actionsv1alpha1.DecisionApplied, actionsv1alpha1.PhaseSucceeded, KindNone, "ResolvedApplied"},
		{actionsv1alpha1.DecisionNotApplied, actionsv1alpha1.PhaseFailed, KindNone, "ResolvedNotApplied"},
		{actionsv1alpha1.DecisionRetry, actionsv1alpha1.PhaseInProgress, KindWait, string(retry.ClassUncertain)},
	} {
		t.Run(tc.decision, func(t *testing.T) {
			cur := outcomeUnknown(env)
			if cur.Phase != actionsv1alpha1.PhaseOutcomeUnknown {
				t.Fatalf("setup phase %s", cur.Phase)
			}
			step, err := Resolve(cur, tc.decision, "checked by hand", env)
			if err != nil {
				t.Fatal(err)
			}
			got := step.Status
			if step.Kind != tc.wantKind || got.Phase != tc.wantPhase || got.Resolution == nil || got.Resolution.Decision != tc.decision ||
				got.Resolution.Reason != "checked by hand" || !got.Resolution.At.Time.Equal(env.Now) || got.AttemptHistory[0].Result != tc.wantHist {
				t.Fatalf("step %s status %+v", step.Kind, got)
			}
			if step.Event == nil || step.Event.Reason != actionsv1alpha1.ReasonResolved {
				t.Errorf("event = %+v", step.Event)
			}
			checkConditions(t, got, 3)
			if tc.decision == actionsv1alpha1.DecisionRetry {
				e := env
				e.Now = step.At
				next := Advance(got, e)
				if next.Kind != KindSend || next.Status.Claim.Attempt != 2 || next.Status.IdempotencyKey != cur.IdempotencyKey {
					t.Errorf("after retry: %+v", next)
				}
			}
		})
	}
	t.Run("retry after Exhausted adds one attempt beyond maxAttempts", func(t *testing.T) {
		cur := pending(env)
		cur.Attempts = 3
		ex := Advance(cur, env)
		if ex.Status.Phase != actionsv1alpha1.PhaseExhausted {
			t.Fatalf("setup: %+v", ex.Status)
		}
		step, err := Resolve(ex.Status, actionsv1alpha1.DecisionRetry, "", env)
		if err != nil {
			t.Fatal(err)
		}
		if step.Status.ManualRetries != 1 || step.Status.CompletedAt != nil || step.Status.ExpiresAt != nil {
			t.Fatalf("%+v", step.Status)
		}
		next := Advance(step.Status, env)
		if next.Kind != KindSend || next.Status.Claim.Attempt != 4 || next.Status.IdempotencyKey != "ns/a" {
			t.Fatalf("after retry: %+v", next)
		}
		// That one attempt fails retryably: Exhausted again, no fifth attempt.
		o := Outcome{Class: retry.ClassRetryable, StatusCode: 503, FinishedAt: env.Now}
		rec, ok := Record(next.Status, 4, o, env)
		if !ok || rec.Status.Phase != actionsv1alpha1.PhaseExhausted {
			t.Fatalf("after the granted attempt: %+v", rec.Status)
		}
	})
	t.Run("retry past the deadline grants a new window", func(t *testing.T) {
		e := env
		e.Policy.Deadline = t0.Add(time.Minute)
		cur := outcomeUnknown(e)
		step, err := Resolve(cur, actionsv1alpha1.DecisionRetry, "", e)
		if err != nil {
			t.Fatal(err)
		}
		if step.Status.Deadline == nil || !step.Status.Deadline.After(e.Now) {
			t.Fatalf("deadline %v", step.Status.Deadline)
		}
		e.Policy.Deadline = step.Status.Deadline.Time
		if next := Advance(step.Status, e); next.Kind != KindSend {
			t.Fatalf("after retry: %+v", next)
		}
	})
	t.Run("invalid decision", func(t *testing.T) {
		cur := outcomeUnknown(env)
		if _, err := Resolve(cur, "maybe", "", env); err == nil {
			t.Fatal("Resolve(maybe) succeeded")
		}
		if cur.Phase != actionsv1alpha1.PhaseOutcomeUnknown || cur.Resolution != nil {
			t.Errorf("input modified: %+v", cur)
		}
	})
	t.Run("wrong phase", func(t *testing.T) {
		if _, err := Resolve(pending(env), actionsv1alpha1.DecisionApplied, "", env); err == nil {
			t.Fatal("Resolve on Pending succeeded")
		}
		succ, _ := Record(claimed(env, 1), 1, Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: t0}, env)
		if _, err := Resolve(succ.Status, actionsv1alpha1.DecisionRetry, "", env); err == nil {
			t.Fatal("Resolve on Succeeded succeeded")
		}
	})
}

func TestHistoryCapped(t *testing.T) {
	env := testEnv(func(e *Env) {
		e.Policy.MaxAttempts = 20
		e.Policy.InitialBackoff = time.Millisecond
		e.Policy.MaxBackoff = time.Millisecond
	})
	st := pending(env)
	for n := int32(1); n <= 15; n++ {
		step := Advance(st, env)
		if step.Kind != KindSend {
			t.Fatalf("attempt %d: %+v", n, step)
		}
		rec, ok := Record(step.Status, n, Outcome{Class: retry.ClassRetryable, StatusCode: 503, FinishedAt: env.Now}, env)
		if !ok {
			t.Fatalf("attempt %d not recorded", n)
		}
		st = rec.Status
		env.Now = st.NextAttemptAt.Time
	}
	if st.Attempts != 15 || len(st.AttemptHistory) != HistoryLimit || st.AttemptHistory[0].Number != 6 || st.AttemptHistory[HistoryLimit-1].Number != 15 {
		t.Fatalf("attempts %d history %d first %d", st.Attempts, len(st.AttemptHistory), st.AttemptHistory[0].Number)
	}
}

func TestDelayed(t *testing.T) {
	env := testEnv()
	st := pending(env)
	until := t0.Add(3 * time.Second)
	step := Delayed(st, actionsv1alpha1.ReasonRateLimited, "waiting", until, env)
	if step.Kind != KindWait || !step.At.Equal(until) || step.Status == nil || step.Status.Phase != actionsv1alpha1.PhasePending ||
		step.Status.NextAttemptAt == nil || !step.Status.NextAttemptAt.Time.Equal(until) ||
		!condReason(step.Status, actionsv1alpha1.ConditionReconciling, actionsv1alpha1.ReasonRateLimited) {
		t.Fatalf("%+v", step)
	}
	// Same reason again: no write.
	if again := Delayed(step.Status, actionsv1alpha1.ReasonRateLimited, "waiting", until.Add(time.Second), env); again.Status != nil || again.Kind != KindWait {
		t.Errorf("repeated delay wrote: %+v", again)
	}
	// A fresh status without a phase becomes Pending.
	if s := Delayed(&actionsv1alpha1.ExternalActionStatus{}, actionsv1alpha1.ReasonDestinationNotReady, "x", until, env); s.Status.Phase != actionsv1alpha1.PhasePending {
		t.Errorf("phase %s", s.Status.Phase)
	}
}

func TestConflictAndReplay(t *testing.T) {
	env := testEnv()
	step := Conflict(pending(env), "bound to another fingerprint", env)
	if step.Status.Phase != actionsv1alpha1.PhaseConflict || step.Status.ExpiresAt != nil || step.Event == nil || !step.Event.Warning {
		t.Fatalf("%+v", step)
	}
	checkConditions(t, step.Status, 3)
	if again := Conflict(step.Status, "again", env); again.Status != nil {
		t.Errorf("second Conflict wrote: %+v", again)
	}
	done := mt(t0.Add(-time.Hour))
	for _, tc := range []struct {
		tomb actionsv1alpha1.Phase
		want actionsv1alpha1.Phase
	}{
		{actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.PhaseSucceeded},
		{actionsv1alpha1.PhaseFailed, actionsv1alpha1.PhaseFailed},
		{actionsv1alpha1.PhaseConflict, actionsv1alpha1.PhaseOutcomeUnknown},
		{actionsv1alpha1.PhaseInProgress, actionsv1alpha1.PhaseOutcomeUnknown},
	} {
		r := Replay(&actionsv1alpha1.ExternalActionStatus{}, "ns/a", "sha256:ab", Tombstone{UID: "u1", Phase: tc.tomb, StatusCode: 201, CompletedAt: &done}, env)
		st := r.Status
		if st.Phase != tc.want || st.ReplayedFrom == nil || st.ReplayedFrom.UID != "u1" || st.Response.StatusCode != 201 || st.Attempts != 0 ||
			st.IdempotencyKey != "ns/a" || st.Fingerprint != "sha256:ab" {
			t.Errorf("replay of %s: %+v", tc.tomb, st)
		}
		checkConditions(t, st, 3)
	}
}

func TestWaitForSubject(t *testing.T) {
	env := testEnv()
	st := pending(env)
	step := WaitForSubject(st, actionsv1alpha1.ReasonWaitingForSubject, "held by charge", env)
	if step.Kind != KindWait || step.Status == nil || step.Status.Phase != actionsv1alpha1.PhasePending || !step.At.IsZero() ||
		!condReason(step.Status, actionsv1alpha1.ConditionReconciling, actionsv1alpha1.ReasonWaitingForSubject) ||
		step.Event == nil || step.Event.Warning || step.Status.Claim != nil || step.Status.Attempts != 0 {
		t.Fatalf("waiting: %+v", step)
	}
	checkConditions(t, step.Status, 3)
	if again := WaitForSubject(step.Status, actionsv1alpha1.ReasonWaitingForSubject, "held by charge", env); again.Status != nil {
		t.Errorf("the same wait wrote again: %+v", again)
	}
	// Another holder: the message changes (a write), the reason does not (no event).
	other := WaitForSubject(step.Status, actionsv1alpha1.ReasonWaitingForSubject, "held by refund", env)
	if other.Status == nil || other.Event != nil {
		t.Errorf("new holder: %+v", other)
	}
	// Behind an OutcomeUnknown holder: Stalled True, Reconciling False, still Pending, a Warning event.
	unk := WaitForSubject(other.Status, actionsv1alpha1.ReasonSubjectOutcomeUnknown, "decide charge", env)
	if unk.Status == nil || unk.Status.Phase != actionsv1alpha1.PhasePending || unk.Event == nil || !unk.Event.Warning ||
		!condReason(unk.Status, actionsv1alpha1.ConditionStalled, actionsv1alpha1.ReasonSubjectOutcomeUnknown) ||
		meta.IsStatusConditionTrue(unk.Status.Conditions, actionsv1alpha1.ConditionReconciling) ||
		meta.IsStatusConditionTrue(unk.Status.Conditions, actionsv1alpha1.ConditionReady) {
		t.Fatalf("behind OutcomeUnknown: %+v", unk)
	}
	// Once the subject is free, the claim clears the wait: InProgress, Stalled False.
	claimStep := Advance(unk.Status, env)
	if claimStep.Kind != KindSend || claimStep.Status.Phase != actionsv1alpha1.PhaseInProgress {
		t.Fatalf("claim after the wait: %+v", claimStep)
	}
	checkConditions(t, claimStep.Status, 3)
}
