package plugin_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/plugin"
)

// "why" on an action with spec.outputs says where the outputs are, that they are being written, or why they are
// not available; and why a send is held back by a conflicting target.
func TestWhyOutputs(t *testing.T) {
	succeeded := func(status metav1.ConditionStatus, reason, msg string, out *actionsv1alpha1.OutputsStatus) *actionsv1alpha1.ExternalAction {
		xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-19"}}
		withPhase(&xa.Status, actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.ReasonSucceeded, "succeeded")
		xa.Status.Response = &actionsv1alpha1.ResponseRecord{StatusCode: 201}
		xa.Status.Outputs = out
		meta.SetStatusCondition(&xa.Status.Conditions, metav1.Condition{Type: actionsv1alpha1.ConditionOutputsReady, Status: status,
			Reason: reason, Message: msg, LastTransitionTime: ts(-time.Minute)})
		return xa
	}
	for name, c := range map[string]struct {
		xa   *actionsv1alpha1.ExternalAction
		want []string
	}{
		"written": {succeeded(metav1.ConditionTrue, actionsv1alpha1.ReasonOutputsWritten, "written",
			&actionsv1alpha1.OutputsStatus{Kind: "Secret", Name: "order-19-out", Keys: []string{"id", "location"}}),
			[]string{"outputs are in Secret order-19-out (keys id, location)", "Nothing to do."}},
		"pending": {succeeded(metav1.ConditionFalse, actionsv1alpha1.ReasonOutputsPending, "writing", nil),
			[]string{"outputs are being written"}},
		"missing": {succeeded(metav1.ConditionFalse, actionsv1alpha1.ReasonOutputMissing, "Secret shop/order-19-out was deleted",
			&actionsv1alpha1.OutputsStatus{Kind: "Secret", Name: "order-19-out", Reason: actionsv1alpha1.ReasonOutputMissing}),
			[]string{"not available (OutputMissing): Secret shop/order-19-out was deleted", "Nothing is sent again"}},
		"held back": {func() *actionsv1alpha1.ExternalAction {
			xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-19"}}
			withPhase(&xa.Status, actionsv1alpha1.PhasePending, actionsv1alpha1.ReasonOutputConflict, "Secret shop/x exists and was not created by this action")
			return xa
		}(), []string{"Nothing is sent: Secret shop/x exists"}},
	} {
		got := strings.Join(plugin.Explain(c.xa, nil, now), "\n")
		mustContain(t, name, got, c.want...)
		if name != "written" && strings.Contains(got, "Nothing to do.") {
			t.Errorf("%s: says there is nothing to do:\n%s", name, got)
		}
	}
}
