//go:build !unit

package controller_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// A Destination whose reconciliation.applied is refused at compile (a matches pattern that is not a literal,
// issue 40 row 1's shape) is not Ready, and its actions are held before anything is sent (Stalled,
// DestinationNotReady naming the field), not sent with a post-check that could never be evaluated (found by the
// noisy-neighbour cluster test: an action created after the Destination showed Ready=False was sent and
// Succeeded). Fixing the Destination releases them: one request each.
func TestRefusedPostCheckExpressionHoldsTheActions(t *testing.T) {
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	refused := `response.body.id.matches(response.body.pattern)`
	env.CreateDestination(t, ns, "pay", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{Path: "/effects?key={key}", Applied: refused,
			NotApplied: "response.statusCode == 404"}
	})
	env.Create(t, envtestutil.Action(ns, "pay-1", "pay", "/payments", `{"amount":1}`))
	xa := env.WaitFor(t, ns, "pay-1", 30*time.Second, "Stalled with DestinationNotReady", func(xa *actionsv1alpha1.ExternalAction) bool {
		c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionStalled)
		return c != nil && c.Status == "True" && c.Reason == actionsv1alpha1.ReasonDestinationNotReady
	})
	if !strings.Contains(xa.Status.LastError, "spec.reconciliation.applied") || xa.Status.Claim != nil || xa.Status.Attempts != 0 {
		t.Errorf("held action: lastError %q, claim %+v, attempts %d; want the field named, no claim, no attempt",
			xa.Status.LastError, xa.Status.Claim, xa.Status.Attempts)
	}
	if n := srv.Requests(ns + "/pay-1"); n != 0 {
		t.Fatalf("%d request(s) sent for an action whose destination's post-check is refused; want 0", n)
	}
	env.UpdateDestination(t, ns, "pay", func(d *actionsv1alpha1.Destination) {
		d.Spec.Reconciliation.Applied = "response.statusCode == 200"
	})
	env.WaitPhase(t, ns, "pay-1", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if n := srv.Requests(ns + "/pay-1"); n != 1 {
		t.Errorf("%d request(s) after the Destination was fixed; want 1", n)
	}
}
