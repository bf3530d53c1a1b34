package apicost

import (
	"context"
	"maps"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/controller"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// startManager runs the real manager (app.New, as cmd/main.go builds it) until the test ends and returns it, so
// a test can look into its cache.
func startManager(t *testing.T, o app.Options) ctrl.Manager {
	t.Helper()
	o.Egress, o.SkipNameValidation, o.ClaimMargin = envtestutil.LoopbackEgress(), true, time.Second
	mgr, err := app.New(env.Config, o)
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager stopped: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return mgr
}

// TestResolveKeepsTrimmedFields: the manager caches a finished action without its history and response body,
// yet a person's decision on it (an Exhausted action resolved not-applied) keeps both in etcd.
func TestResolveKeepsTrimmedFields(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	busy := destination.Step{Status: 503, Body: `{"error":"busy, try later"}`}
	srv.Script(ns+"/busy", destination.Repeat(2, busy)...)
	env.CreateDestination(t, ns, "d", url, func(s *actionsv1alpha1.DestinationSpec) {
		two := int32(2)
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &two, Jitter: actionsv1alpha1.JitterNone,
			InitialBackoff: &metav1.Duration{Duration: 100 * time.Millisecond}}
	})
	mgr := startManager(t, app.Options{})
	env.Create(t, envtestutil.Action(ns, "busy", "d", "/charges", `{"amount":5}`))
	before := env.WaitPhase(t, ns, "busy", actionsv1alpha1.PhaseExhausted, 30*time.Second)
	if len(before.Status.AttemptHistory) != 2 || before.Status.Response == nil || before.Status.Response.Body != busy.Body {
		t.Fatalf("exhausted action: history %d, response %s", len(before.Status.AttemptHistory), envtestutil.JSON(before.Status.Response))
	}

	// The cached copy is trimmed (and marked), so a write from it would have erased both.
	key := client.ObjectKey{Namespace: ns, Name: "busy"}
	cached := &actionsv1alpha1.ExternalAction{}
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the cached copy to be trimmed"), func() bool {
		if err := mgr.GetCache().Get(context.Background(), key, cached); err != nil {
			t.Fatalf("cache get: %v", err)
		}
		return controller.IsTrimmed(cached)
	})
	if cached.Status.AttemptHistory != nil || cached.Status.Conditions != nil || cached.Status.Response.Body != "" ||
		cached.Status.Response.StatusCode != 503 {
		t.Fatalf("trimmed copy still has history %d, body %q, or lost the status code: %d",
			len(cached.Status.AttemptHistory), cached.Status.Response.Body, cached.Status.Response.StatusCode)
	}

	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the resolve annotation to be set"), func() bool {
		xa := env.Get(t, ns, "busy")
		xa.Annotations = maps.Clone(xa.Annotations)
		if xa.Annotations == nil {
			xa.Annotations = map[string]string{}
		}
		xa.Annotations[actionsv1alpha1.AnnotationResolve] = actionsv1alpha1.DecisionNotApplied
		err := env.Client.Update(context.Background(), xa)
		if err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("annotating: %v", err)
		}
		return err == nil
	})
	after := env.WaitFor(t, ns, "busy", 30*time.Second, "Failed by the decision, annotation removed", func(x *actionsv1alpha1.ExternalAction) bool {
		_, annotated := x.Annotations[actionsv1alpha1.AnnotationResolve]
		return x.Status.Phase == actionsv1alpha1.PhaseFailed && !annotated
	})
	if len(after.Status.AttemptHistory) != 2 || after.Status.AttemptHistory[1].Result != "ResolvedNotApplied" {
		t.Errorf("history after the decision = %s, want the 2 attempts, the last marked ResolvedNotApplied",
			envtestutil.JSON(after.Status.AttemptHistory))
	}
	if len(after.Status.Conditions) != 2 || after.Status.LastError == "" {
		t.Errorf("conditions %s and lastError %q after the decision, want Ready, Stalled (Reconciling is removed once not True) and the last error",
			envtestutil.JSON(after.Status.Conditions), after.Status.LastError)
	}
	if r := after.Status.Response; r == nil || r.Body != busy.Body || r.StatusCode != 503 {
		t.Errorf("response after the decision = %s, want the recorded 503 and its body", envtestutil.JSON(r))
	}
	if controller.IsTrimmed(after) {
		t.Errorf("the cache's mark %s was written to etcd", controller.AnnotationCacheTrimmed)
	}
}
