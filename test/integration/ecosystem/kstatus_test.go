package ecosystem_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
)

// kstatusWant is how kstatus (and so Flux's health checks and `kubectl wait`) must read each phase.
var kstatusWant = map[actionsv1alpha1.Phase]status.Status{
	actionsv1alpha1.PhasePending:        status.InProgressStatus,
	actionsv1alpha1.PhaseInProgress:     status.InProgressStatus,
	actionsv1alpha1.PhaseSucceeded:      status.CurrentStatus,
	actionsv1alpha1.PhaseFailed:         status.FailedStatus,
	actionsv1alpha1.PhaseOutcomeUnknown: status.FailedStatus,
	actionsv1alpha1.PhaseExhausted:      status.FailedStatus,
	actionsv1alpha1.PhaseConflict:       status.FailedStatus,
}

func checkKstatus(t *testing.T, run *realPhases) {
	for _, phase := range allPhases {
		u := run.objs[phase]
		res, err := status.Compute(u)
		if err != nil {
			t.Errorf("%s: status.Compute: %v", phase, err)
			continue
		}
		if res.Status != kstatusWant[phase] {
			t.Errorf("%s (%s): kstatus %s (%q), want %s", phase, u.GetName(), res.Status, res.Message, kstatusWant[phase])
		}

		// A spec change the controller has not observed yet reads as InProgress, whatever the phase.
		stale := u.DeepCopy()
		observed, _, _ := unstructured.NestedInt64(stale.Object, "status", "observedGeneration")
		if observed != stale.GetGeneration() {
			t.Errorf("%s: status.observedGeneration %d != metadata.generation %d", phase, observed, stale.GetGeneration())
		}
		stale.SetGeneration(observed + 1)
		if res, err := status.Compute(stale); err != nil || res.Status != status.InProgressStatus {
			t.Errorf("%s with generation ahead of observedGeneration: kstatus %v (err %v), want InProgress", phase, res, err)
		}
	}
}

// An action waiting for its spec.subject reads as InProgress; one waiting behind an OutcomeUnknown holder as
// Failed (only a person can unblock it), with the conditions the controller writes.
func TestKstatusSubjectWaits(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	env := ledger.Env{Now: now, Generation: 1}
	for reason, want := range map[string]status.Status{
		actionsv1alpha1.ReasonWaitingForSubject:     status.InProgressStatus,
		actionsv1alpha1.ReasonSubjectOutcomeUnknown: status.FailedStatus,
	} {
		xa := &actionsv1alpha1.ExternalAction{
			TypeMeta:   metav1.TypeMeta{APIVersion: actionsv1alpha1.GroupVersion.String(), Kind: "ExternalAction"},
			ObjectMeta: metav1.ObjectMeta{Name: "refund-order-19", Namespace: "shop", Generation: 1},
		}
		xa.Status = *ledger.WaitForSubject(&xa.Status, reason, "held by charge-order-19", env).Status
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(xa)
		if err != nil {
			t.Fatal(err)
		}
		res, err := status.Compute(&unstructured.Unstructured{Object: obj})
		if err != nil || res.Status != want {
			t.Errorf("%s: kstatus %v (err %v), want %s", reason, res, err, want)
		}
	}
}
