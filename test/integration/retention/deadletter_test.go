package retention

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// An action that owes a dead-letter record to a sink that does not exist is held: its deletion waits (Stalled
// DeadLetterSinkUnavailable naming the sink). When its namespace is deleted, holding it would keep the namespace
// Terminating forever, so the record is given up (GivenUp, counted) and the action goes.
func TestNamespaceDeletionGivesUpARecordWithoutSink(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	srv.Script(ns+"/refund-1", destination.Step{Status: 422, Body: `{"error":"closed account"}`})
	env.CreateDestination(t, ns, "billing", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.DeadLetter = &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{Name: "cases"}}
	})
	env.StartManager(t, app.Options{})
	ctx := context.Background()
	sink := "Destination/" + ns + "/cases"

	env.Create(t, envtestutil.Action(ns, "refund-1", "billing", "/refunds", `{"amount":1}`))
	xa := env.WaitFor(t, ns, "refund-1", 30*time.Second, "Stalled DeadLetterSinkUnavailable", func(xa *actionsv1alpha1.ExternalAction) bool {
		for _, c := range xa.Status.Conditions {
			if c.Type == actionsv1alpha1.ConditionStalled && c.Reason == actionsv1alpha1.ReasonDeadLetterSinkUnavailable {
				return true
			}
		}
		return false
	})
	if dl := xa.Status.DeadLetter; xa.Status.Phase != actionsv1alpha1.PhaseFailed || dl == nil ||
		dl.State != actionsv1alpha1.DeadLetterRefused || dl.Sink != sink {
		t.Fatalf("refund-1 in %s with status.deadLetter %s; want Failed with a record Refused for the missing sink",
			xa.Status.Phase, envtestutil.JSON(dl))
	}
	if err := env.Client.Delete(ctx, xa); err != nil {
		t.Fatal(err)
	}
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("the deletion waits for the record owed"), func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(xa), &actionsv1alpha1.ExternalAction{}) == nil
	})
	if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "refund-1", 30*time.Second)
	// No Event can be created in a terminating namespace; the metric counts the record given up.
	m := &dto.Metric{}
	if err := metrics.DeadLetterDeliveries.WithLabelValues(sink, "GivenUp").Write(m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf("actionledger_dead_letter_deliveries_total{destination=%q,outcome=\"GivenUp\"} = %v, want 1", sink, got)
	}
}
