package plugin_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// now is the clock the tests give the plugin; statuses are written relative to it.
var now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func ts(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d)) }

// withPhase sets the phase and the conditions as the controller's transition function does (the same reason
// on Ready, Reconciling and Stalled).
func withPhase(st *actionsv1alpha1.ExternalActionStatus, phase actionsv1alpha1.Phase, reason, msg string) {
	st.Phase = phase
	ready, rec, stalled := metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionFalse
	switch phase {
	case actionsv1alpha1.PhaseSucceeded:
		ready = metav1.ConditionTrue
	case actionsv1alpha1.PhasePending, actionsv1alpha1.PhaseInProgress:
		rec = metav1.ConditionTrue
	default:
		stalled = metav1.ConditionTrue
	}
	for typ, s := range map[string]metav1.ConditionStatus{actionsv1alpha1.ConditionReady: ready,
		actionsv1alpha1.ConditionReconciling: rec, actionsv1alpha1.ConditionStalled: stalled} {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg,
			LastTransitionTime: ts(-time.Minute)})
	}
}

func lines(s string) string { return strings.ReplaceAll(s, "\n", "⏎ ") }

func mustContain(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: output does not contain %q:\n%s", what, w, got)
		}
	}
}
