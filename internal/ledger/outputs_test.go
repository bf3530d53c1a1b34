package ledger

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/retry"
)

func outCond(t *testing.T, st *actionsv1alpha1.ExternalActionStatus, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil && (typ == actionsv1alpha1.ConditionReconciling || typ == actionsv1alpha1.ConditionStalled) {
		// An abnormal-true condition is removed rather than set False (setPhase).
		return metav1.Condition{Type: typ, Status: metav1.ConditionFalse}
	}
	if c == nil {
		t.Fatalf("condition %s missing in %+v", typ, st.Conditions)
	}
	return *c
}

// With spec.outputs, Succeeded is not Ready until SettleOutputs: a success from a response holds the outputs
// (OutputsPending, Reconciling True); a replay, a decision "applied" and a post-check "applied" have no
// response (OutputsNotAvailable). Without spec.outputs nothing changes.
func TestOutputsGateReady(t *testing.T) {
	success := Outcome{Class: retry.ClassSuccess, FinishedAt: t0, StatusCode: 201}
	outputs := testEnv(func(e *Env) { e.Outputs = true })
	for _, c := range []struct {
		name   string
		st     func(Env) *actionsv1alpha1.ExternalActionStatus
		reason string // "" means no OutputsReady condition and Ready True
	}{
		{"success without outputs", func(e Env) *actionsv1alpha1.ExternalActionStatus {
			s, _ := Record(claimed(e, 1), 1, success, e)
			return s.Status
		}, ""},
		{"success", func(e Env) *actionsv1alpha1.ExternalActionStatus {
			s, _ := Record(claimed(e, 1), 1, success, e)
			return s.Status
		}, actionsv1alpha1.ReasonOutputsPending},
		{"replay", func(e Env) *actionsv1alpha1.ExternalActionStatus {
			return Replay(&actionsv1alpha1.ExternalActionStatus{}, "ns/a", "sha256:ab",
				Tombstone{UID: "u0", Phase: actionsv1alpha1.PhaseSucceeded, StatusCode: 201}, e).Status
		}, actionsv1alpha1.ReasonOutputsNotAvailable},
		{"resolved applied", func(e Env) *actionsv1alpha1.ExternalActionStatus {
			st := claimed(e, 1)
			st.Claim, st.Phase = nil, actionsv1alpha1.PhaseOutcomeUnknown
			s, err := Resolve(st, actionsv1alpha1.DecisionApplied, "", e)
			if err != nil {
				t.Fatal(err)
			}
			return s.Status
		}, actionsv1alpha1.ReasonOutputsNotAvailable},
		{"post-check applied", func(e Env) *actionsv1alpha1.ExternalActionStatus {
			s, _ := RecordCheck(claimed(e, 1), 1, VerdictApplied, nil, "", e)
			return s.Status
		}, actionsv1alpha1.ReasonOutputsNotAvailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := outputs
			if c.reason == "" {
				e = testEnv()
			}
			st := c.st(e)
			if st.Phase != actionsv1alpha1.PhaseSucceeded {
				t.Fatalf("phase = %s", st.Phase)
			}
			if c.reason == "" {
				checkConditions(t, st, 3)
				if meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionOutputsReady) != nil {
					t.Errorf("OutputsReady set without spec.outputs")
				}
				return
			}
			if o := outCond(t, st, actionsv1alpha1.ConditionOutputsReady); o.Status != metav1.ConditionFalse || o.Reason != c.reason {
				t.Errorf("OutputsReady = %s/%s, want False/%s", o.Status, o.Reason, c.reason)
			}
			if r := outCond(t, st, actionsv1alpha1.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != actionsv1alpha1.ReasonOutputsPending {
				t.Errorf("Ready = %s/%s, want False/OutputsPending", r.Status, r.Reason)
			}
			if r := outCond(t, st, actionsv1alpha1.ConditionReconciling); r.Status != metav1.ConditionTrue {
				t.Errorf("Reconciling = %s, want True while the outputs are settled", r.Status)
			}
			if got := OutputsHeld(st); got != (c.reason == actionsv1alpha1.ReasonOutputsPending) {
				t.Errorf("OutputsHeld = %v", got)
			}
		})
	}
}

// SettleOutputs: written or retained makes Ready True; any other reason is Stalled with a Warning, the phase
// stays Succeeded; settling the same reason again writes nothing.
func TestSettleOutputs(t *testing.T) {
	e := testEnv(func(e *Env) { e.Outputs = true })
	rec, _ := Record(claimed(e, 1), 1, Outcome{Class: retry.ClassSuccess, FinishedAt: t0, StatusCode: 201}, e)
	for _, c := range []struct {
		reason string
		ready  bool
	}{
		{actionsv1alpha1.ReasonOutputsWritten, true},
		{actionsv1alpha1.ReasonOutputsRetained, true},
		{actionsv1alpha1.ReasonOutputConflict, false},
		{actionsv1alpha1.ReasonOutputMissing, false},
		{actionsv1alpha1.ReasonOutputLost, false},
		{actionsv1alpha1.ReasonOutputExpressionFailed, false},
		{actionsv1alpha1.ReasonOutputsNotAvailable, false},
	} {
		t.Run(c.reason, func(t *testing.T) {
			out := actionsv1alpha1.OutputsStatus{Kind: "Secret", Name: "s", Reason: c.reason}
			step := SettleOutputs(rec.Status, out, "msg", e)
			st := step.Status
			if st == nil || st.Phase != actionsv1alpha1.PhaseSucceeded || st.Outputs == nil || st.Outputs.Reason != c.reason {
				t.Fatalf("status = %+v", st)
			}
			want := map[string]bool{actionsv1alpha1.ConditionReady: c.ready, actionsv1alpha1.ConditionOutputsReady: c.ready,
				actionsv1alpha1.ConditionReconciling: false, actionsv1alpha1.ConditionStalled: !c.ready}
			for typ, on := range want {
				if got := outCond(t, st, typ); (got.Status == metav1.ConditionTrue) != on {
					t.Errorf("%s = %s, want true=%v", typ, got.Status, on)
				}
			}
			if (step.Event != nil) == c.ready || (step.Event != nil && !step.Event.Warning) {
				t.Errorf("event = %+v", step.Event)
			}
			if OutputsHeld(st) {
				t.Errorf("OutputsHeld after settling")
			}
			if again := SettleOutputs(st, out, "msg", e); again.Status != nil {
				t.Errorf("settling %s twice writes again", c.reason)
			}
		})
	}
}
