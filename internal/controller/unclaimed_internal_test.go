package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/retry"
)

// Two unclaimed sends of one key answered differently (one a success, the other not) are reported with a
// Warning Event on the dropped one; answers that agree, or a recorded status that is not final, are not.
func TestUnclaimedOutcomesThatDisagreeAreReported(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	rec := events.NewFakeRecorder(10)
	r := &ExternalActionReconciler{Client: c, APIReader: c, Scheme: scheme, Recorder: rec, Clock: clock.RealClock{},
		Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &InlineDispatcher{Clock: clock.RealClock{}}}
	r.once.Do(r.build)
	recorded := func(phase actionsv1alpha1.Phase) *actionsv1alpha1.ExternalAction {
		return &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a"},
			Status: actionsv1alpha1.ExternalActionStatus{Phase: phase, Attempts: 1}}
	}
	success := ledger.Outcome{Class: retry.ClassSuccess, StatusCode: 201}
	rejected := ledger.Outcome{Class: retry.ClassRejected, StatusCode: 422}
	for _, tc := range []struct {
		name     string
		recorded *actionsv1alpha1.ExternalAction
		dropped  ledger.Outcome
		warn     bool
	}{
		{"a success dropped after a recorded rejection", recorded(actionsv1alpha1.PhaseFailed), success, true},
		{"a rejection dropped after a recorded success", recorded(actionsv1alpha1.PhaseSucceeded), rejected, true},
		{"two successes", recorded(actionsv1alpha1.PhaseSucceeded), success, false},
		{"two rejections", recorded(actionsv1alpha1.PhaseFailed), rejected, false},
		{"a retry scheduled: not final", recorded(actionsv1alpha1.PhaseInProgress), success, false},
		{"nothing read", nil, success, false},
	} {
		r.unclaimedDiffers(tc.recorded, tc.dropped)
		select {
		case e := <-rec.Events:
			if !tc.warn || !strings.Contains(e, "Warning "+actionsv1alpha1.ReasonUnclaimedOutcomeDiffers) {
				t.Errorf("%s: event %q, want none", tc.name, e)
			}
		default:
			if tc.warn {
				t.Errorf("%s: no %s Warning", tc.name, actionsv1alpha1.ReasonUnclaimedOutcomeDiffers)
			}
		}
	}
}
