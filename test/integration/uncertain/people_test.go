package uncertain

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// Decisions by people on OutcomeUnknown and Exhausted actions: applied, not-applied, retry, and an invalid value.
func TestDecisionsByPeople(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	unknown := []string{"d-applied", "d-not-applied", "d-retry", "d-maybe"}
	for _, n := range unknown {
		srv.Script(ns+"/"+n, destination.Step{CloseConn: true}) // reset without applying: uncertain, unprovable
	}
	srv.Script(ns+"/d-exhausted", destination.Repeat(2, destination.Step{Status: 503})...)
	env.CreateDestination(t, ns, "plain", url, fast(5*time.Second, false))
	env.StartManager(t, app.Options{})

	for i, n := range unknown {
		env.Create(t, envtestutil.Action(ns, n, "plain", "/charges", fmt.Sprintf(`{"amount":%d}`, i+1)))
	}
	ex := envtestutil.Action(ns, "d-exhausted", "plain", "/charges", `{"amount":99}`)
	two := int32(2)
	ex.Spec.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &two}
	env.Create(t, ex)
	for _, n := range unknown {
		env.WaitPhase(t, ns, n, actionsv1alpha1.PhaseOutcomeUnknown, 30*time.Second)
	}
	env.WaitPhase(t, ns, "d-exhausted", actionsv1alpha1.PhaseExhausted, 30*time.Second)

	env.Annotate(t, ns, "d-applied", map[string]string{actionsv1alpha1.AnnotationResolve: "applied", actionsv1alpha1.AnnotationResolveReason: "seen in the ledger"})
	env.Annotate(t, ns, "d-not-applied", map[string]string{actionsv1alpha1.AnnotationResolve: "not-applied"})
	env.Annotate(t, ns, "d-retry", map[string]string{actionsv1alpha1.AnnotationResolve: "retry"})
	env.Annotate(t, ns, "d-maybe", map[string]string{actionsv1alpha1.AnnotationResolve: "maybe"})
	env.Annotate(t, ns, "d-exhausted", map[string]string{actionsv1alpha1.AnnotationResolve: "retry"})

	for _, tc := range []struct {
		name     string
		phase    actionsv1alpha1.Phase
		decision string
		requests int
	}{
		{"d-applied", actionsv1alpha1.PhaseSucceeded, "applied", 1},
		{"d-not-applied", actionsv1alpha1.PhaseFailed, "not-applied", 1},
		{"d-retry", actionsv1alpha1.PhaseSucceeded, "retry", 2},
		{"d-exhausted", actionsv1alpha1.PhaseSucceeded, "retry", 3},
	} {
		xa := env.WaitFor(t, ns, tc.name, 30*time.Second, string(tc.phase)+" without the annotation", func(x *actionsv1alpha1.ExternalAction) bool {
			_, annotated := x.Annotations[actionsv1alpha1.AnnotationResolve]
			return x.Status.Phase == tc.phase && !annotated
		})
		if r := xa.Status.Resolution; r == nil || r.Decision != tc.decision || r.At.IsZero() {
			t.Errorf("%s: resolution = %+v", tc.name, r)
		}
		if _, ok := xa.Annotations[actionsv1alpha1.AnnotationResolveReason]; ok {
			t.Errorf("%s: the reason annotation was not removed", tc.name)
		}
		env.WaitEvent(t, ns, tc.name, corev1.EventTypeNormal, actionsv1alpha1.ReasonResolved, 20*time.Second)
		key := ns + "/" + tc.name
		if got := srv.Requests(key); got != tc.requests {
			t.Errorf("%s: requests = %d, want %d", tc.name, got, tc.requests)
		}
		sameKey(t, srv.RequestLog(key), key)
		if int(xa.Status.Attempts) != tc.requests || len(xa.Status.AttemptHistory) != tc.requests {
			t.Errorf("%s: attempts %d history %s, want %d", tc.name, xa.Status.Attempts, historyResults(xa), tc.requests)
		}
	}
	if xa := env.Get(t, ns, "d-applied"); xa.Status.Resolution.Reason != "seen in the ledger" || !readyNotStalled(xa) {
		t.Errorf("d-applied: resolution %+v conditions %+v", xa.Status.Resolution, xa.Status.Conditions)
	}

	// An invalid value: a Warning Event, the annotation removed, the phase unchanged, nothing sent.
	env.WaitEvent(t, ns, "d-maybe", corev1.EventTypeWarning, "InvalidDecision", 20*time.Second)
	xa := env.WaitFor(t, ns, "d-maybe", 20*time.Second, "annotation removed", func(x *actionsv1alpha1.ExternalAction) bool {
		_, annotated := x.Annotations[actionsv1alpha1.AnnotationResolve]
		return !annotated
	})
	if xa.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown || xa.Status.Resolution != nil || srv.Requests(ns+"/d-maybe") != 1 {
		t.Errorf("d-maybe: phase %s resolution %+v requests %d", xa.Status.Phase, xa.Status.Resolution, srv.Requests(ns+"/d-maybe"))
	}
}

// readyNotStalled reports Ready=True and Stalled=False, as kstatus reads a succeeded action.
func readyNotStalled(xa *actionsv1alpha1.ExternalAction) bool {
	return !stalled(xa) && conditionTrue(xa, actionsv1alpha1.ConditionReady)
}

// DESIGN rule 8: an action deleted while its attempt is open waits for the outcome; its tombstone is written
// (phase Succeeded, same fingerprint) before the finalizer goes.
func TestDeletionDuringOpenAttempt(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 3 * time.Second})
	env.CreateDestination(t, ns, "slow", url, fast(5*time.Second, false))
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "pay-del", "slow", "/charges", `{"amount":1}`))
	key := ns + "/pay-del"
	envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("the request in flight"), func() bool { return srv.Requests(key) == 1 })
	xa := env.Get(t, ns, "pay-del")
	fp := xa.Status.Fingerprint
	if fp == "" || xa.Status.Claim == nil {
		t.Fatalf("status before delete = %+v", xa.Status)
	}
	if err := env.Client.Delete(context.Background(), xa); err != nil {
		t.Fatal(err)
	}
	cur := env.Get(t, ns, "pay-del")
	if cur.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(cur, actionsv1alpha1.Finalizer) {
		t.Fatalf("deleted object: deletionTimestamp %v finalizers %v", cur.DeletionTimestamp, cur.Finalizers)
	}
	if srv.Effects(key) == 0 && cur.Status.Claim == nil {
		t.Errorf("the claim vanished before the outcome: %+v", cur.Status)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pay-del"}, &actionsv1alpha1.ExternalAction{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			t.Fatalf("reading the deleted action: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the action was not removed after its outcome (err %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := srv.Effects(key); got != 1 {
		t.Errorf("effects = %d, want 1", got)
	}
	ts := &actionsv1alpha1.ActionTombstone{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pay-del"}, ts); err != nil {
		t.Fatalf("tombstone: %v", err)
	}
	if ts.Spec.Phase != actionsv1alpha1.PhaseSucceeded || ts.Spec.Fingerprint != fp || ts.Spec.Key != key || ts.Spec.StatusCode != 201 ||
		ts.Spec.UID != string(xa.UID) || ts.Spec.ExpiresAt.IsZero() {
		t.Errorf("tombstone = %+v, want Succeeded, fingerprint %s, key %s, status 201", ts.Spec, fp, key)
	}
}

// DESIGN rule 9: two managers at once (leader election off) on 30 actions against a destination that does not
// deduplicate: every action succeeds with exactly one request.
func TestTwoManagersAtOnce(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "plain", url, fast(5*time.Second, false))
	env.StartManager(t, app.Options{Holder: "twin-a"})
	env.StartManager(t, app.Options{Holder: "twin-b"})

	const n = 30
	for i := range n {
		env.Create(t, envtestutil.Action(ns, fmt.Sprintf("twin-%02d", i), "plain", "/charges", fmt.Sprintf(`{"amount":%d}`, i)))
	}
	for i := range n {
		env.WaitPhase(t, ns, fmt.Sprintf("twin-%02d", i), actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	}
	s := srv.Summary()
	if s.Duplicates != 0 || s.Requests != n || s.Applied != n {
		t.Fatalf("summary = %+v, want %d requests, %d applied, no duplicates", s, n, n)
	}
}
