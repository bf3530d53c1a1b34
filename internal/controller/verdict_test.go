//go:build !unit

package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// No verdict without an evaluation (DESIGN rule 12, issue 40 row 3): while another tenant's expressions hold
// every evaluation slot, team-b's POST /charges is answered 201 and its successWhen cannot be evaluated. The
// action is never Failed: it records the response, says VerdictPending with the claim kept open, and once a
// slot is free it is judged from the recorded response and ends Succeeded, with one request at the destination.
// Meanwhile no reconcile worker waits for a slot on its behalf.
func TestSuccessWhenNotEvaluatedWaitsForItsVerdict(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, nil)
	env.StartManager(t, app.Options{})

	release := occupySlots(t)
	xa := envtestutil.Action(ns, "charge-1", "payments", "/charges", `{"amount":100}`)
	// A comprehension: the evaluation takes a slot (`response.statusCode == 201` is quick and takes none).
	xa.Spec.SuccessWhen = "[201].exists(c, c == response.statusCode)"
	env.Create(t, xa)
	// A quick successWhen is judged at once beside the held slots (expr.QuickCost): one tenant's admitted
	// expressions, however many, never hold back another's one-comparison verdict.
	quick := envtestutil.Action(ns, "charge-quick", "payments", "/charges", `{"amount":100}`)
	quick.Spec.SuccessWhen = "response.statusCode == 201"
	env.Create(t, quick)
	env.WaitPhase(t, ns, "charge-quick", actionsv1alpha1.PhaseSucceeded, 30*time.Second)

	pending := env.WaitFor(t, ns, "charge-1", 30*time.Second, "reason VerdictPending", func(x *actionsv1alpha1.ExternalAction) bool {
		return condition(x, actionsv1alpha1.ConditionReconciling).Reason == actionsv1alpha1.ReasonVerdictPending
	})
	if pending.Status.Phase != actionsv1alpha1.PhaseInProgress || pending.Status.Response == nil ||
		pending.Status.Response.StatusCode != 201 {
		t.Fatalf("pending: phase %s, response %+v; want InProgress with the 201 recorded", pending.Status.Phase, pending.Status.Response)
	}
	c := pending.Status.Claim
	if c == nil || c.Verdict == nil || c.Verdict.Otherwise != string(retry.ClassRejected) || c.Verdict.InputSHA256 == "" {
		t.Fatalf("claim = %+v; want it open with a pending verdict (otherwise Rejected)", c)
	}
	// Still no verdict while the slots stay taken: never Failed, never sent again. And no reconcile worker waits for
	// a slot to judge it again (expr.HoldSlot): the action keeps its place in its namespace's queue of evaluations
	// and writes nothing meanwhile, where a worker waiting SlotWait (3 s) after the first JudgeBackoff (1 s) would
	// record a second unfinished evaluation within this window.
	envtestutil.Consistently(t, 5*time.Second, envtestutil.Say("the action stays InProgress without a verdict, "+
		"its status unwritten"), func() bool {
		cur := env.Get(t, ns, "charge-1")
		return cur.Status.Phase == actionsv1alpha1.PhaseInProgress && cur.ResourceVersion == pending.ResourceVersion &&
			cur.Status.Claim != nil && cur.Status.Claim.Verdict != nil && cur.Status.Claim.Verdict.Evaluations == 1
	})
	release()
	done := env.WaitPhase(t, ns, "charge-1", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if done.Status.Claim != nil || done.Status.Attempts != 1 {
		t.Errorf("claim %+v, attempts %d; want the claim closed after one attempt", done.Status.Claim, done.Status.Attempts)
	}
	if got := srv.Requests(ns + "/charge-1"); got != 1 {
		t.Errorf("the destination received %d requests, want 1", got)
	}
	if c := condition(done, actionsv1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}
}

// The same for outputs: an output value whose evaluation did not finish is neither a failure nor lost; the
// values are taken from the held response once a slot is free (the default successWhen needs no evaluation).
func TestOutputsNotEvaluatedAreEvaluatedAgain(t *testing.T) {
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, nil)
	env.StartManager(t, app.Options{})

	release := occupySlots(t)
	env.Create(t, outputAction(ns, "order-1", "shop", "order-1-out", true, map[string]actionsv1alpha1.OutputExpression{
		"code": "response.statusCode",
	}))
	env.WaitPhase(t, ns, "order-1", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	envtestutil.Consistently(t, 3*time.Second, envtestutil.Say("outputs stay pending, never failed"), func() bool {
		x := env.Get(t, ns, "order-1")
		return x.Status.Outputs == nil && condition(x, actionsv1alpha1.ConditionOutputsReady).Reason == actionsv1alpha1.ReasonOutputsPending
	})
	release()
	outputsReason(t, ns, "order-1", actionsv1alpha1.ReasonOutputsWritten)
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "order-1-out"}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["code"] != "201" {
		t.Errorf("ConfigMap data = %v, want code 201", cm.Data)
	}
}

// occupySlots takes every evaluation slot, as another tenant's long evaluations would, until release (called
// again at the end of the test, which does nothing once released).
func occupySlots(t *testing.T) (release func()) {
	t.Helper()
	free := expr.Occupy()
	var once sync.Once
	release = func() { once.Do(free) }
	t.Cleanup(release)
	return release
}
