//go:build !unit

package controller_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/controller"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// C01: after the outcome is recorded, a reconcile fed the pre-claim copy of the object (a lagging informer)
// loses the optimistic-concurrency claim and sends nothing.
func TestStaleCacheSendsNothing(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	srv.Script("", destination.Step{Status: 201, Body: `{"id":"x1"}`, Apply: true})
	env.CreateDestination(t, ns, "payments", url, nil)
	ctx := context.Background()

	// The pre-claim copy: finalizer present, status empty.
	xa := envtestutil.Action(ns, "c01", "payments", "/charges", `{"amount":100}`)
	controllerutil.AddFinalizer(xa, actionsv1alpha1.Finalizer)
	env.Create(t, xa)
	stale := env.Get(t, ns, "c01")

	env.StartManager(t, app.Options{})
	env.WaitPhase(t, ns, "c01", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got := srv.Requests(ns + "/c01"); got != 1 {
		t.Fatalf("requests = %d, want 1", got)
	}

	// A reconciler whose cache hands out the stale copy.
	staleClient, err := client.NewWithWatch(env.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	lagging := interceptor.NewClient(staleClient, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name == "c01" {
				if xa, ok := obj.(*actionsv1alpha1.ExternalAction); ok {
					stale.DeepCopyInto(xa)
					return nil
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := &controller.ExternalActionReconciler{
		Client: lagging, APIReader: staleClient, Scheme: app.Scheme,
		Recorder: fakeEventRecorder(), Clock: clock.RealClock{}, Executor: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy())),
		Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &controller.InlineDispatcher{Clock: clock.RealClock{}},
		Options: controller.Options{Holder: "stale-holder", ClaimMargin: time.Second},
	}
	for range 3 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(stale)}); err != nil {
			t.Fatalf("stale reconcile: %v", err)
		}
	}
	// Force a requeue of the live manager too (touch an annotation).
	cur := env.Get(t, ns, "c01")
	cur.Annotations = map[string]string{"touch": "1"}
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a window for a wrong second send to happen; the assertion is on the count
	if got := srv.Requests(ns + "/c01"); got != 1 {
		t.Fatalf("after stale reconciles the destination received %d requests, want 1", got)
	}
	final := env.Get(t, ns, "c01")
	if final.Status.Phase != actionsv1alpha1.PhaseSucceeded || final.Status.Attempts != 1 {
		t.Fatalf("status changed by the stale pass: %s", envtestutil.JSON(final.Status))
	}
}

// With the CRD's immutability rules removed (an older or edited CRD), a changed payload under the same key
// still reaches nothing: the controller sets Conflict and sends nothing (DESIGN rule 6).
func TestConflictWithoutAdmissionRule(t *testing.T) {
	ctx := context.Background()
	sch := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	crdClient, err := client.New(env.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := crdClient.Get(ctx, client.ObjectKey{Name: "externalactions.actions.actionledger.dev"}, crd); err != nil {
		t.Fatal(err)
	}
	original := crd.DeepCopy()
	stripRules(crd)
	if err := crdClient.Update(ctx, crd); err != nil {
		t.Fatalf("removing the CEL rules from a test copy of the CRD: %v", err)
	}
	t.Cleanup(func() {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := crdClient.Get(ctx, client.ObjectKey{Name: crd.Name}, cur); err == nil {
			cur.Spec = original.Spec
			_ = crdClient.Update(ctx, cur)
		}
	})

	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	srv.Script("", destination.Repeat(20, destination.Step{Status: 503})...)
	attempts := int32(10)
	env.CreateDestination(t, ns, "payments", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &attempts, InitialBackoff: durationp(500 * time.Millisecond), Jitter: actionsv1alpha1.JitterNone}
	})
	env.StartManager(t, app.Options{})
	env.Create(t, envtestutil.Action(ns, "pay-42", "payments", "/charges", `{"amount":100}`))
	bound := env.WaitFor(t, ns, "pay-42", 30*time.Second, "first attempt recorded", func(x *actionsv1alpha1.ExternalAction) bool {
		return x.Status.Fingerprint != "" && len(x.Status.AttemptHistory) >= 1
	})

	var before int
	edited := false
	for i := 0; i < 20 && !edited; i++ {
		cur := env.Get(t, ns, "pay-42")
		cur.Spec.Request.Body = &apiextensionsv1.JSON{Raw: []byte(`{"amount":200}`)}
		before = srv.Requests(ns + "/pay-42")
		if err := env.Client.Update(ctx, cur); err == nil {
			edited = true
		} else {
			time.Sleep(200 * time.Millisecond) // the API server reloads the edited CRD asynchronously
		}
	}
	if !edited {
		t.Fatal("could not edit the body with the rules removed")
	}
	xa := env.WaitPhase(t, ns, "pay-42", actionsv1alpha1.PhaseConflict, 30*time.Second)
	if xa.Status.Fingerprint != bound.Status.Fingerprint {
		t.Errorf("the bound fingerprint changed: %s -> %s", bound.Status.Fingerprint, xa.Status.Fingerprint)
	}
	time.Sleep(1500 * time.Millisecond) // longer than the backoff: a retry would have been sent by now
	// At most the attempt already claimed before the edit may have gone out.
	if got := srv.Requests(ns + "/pay-42"); got > before+1 {
		t.Fatalf("requests after the edit: %d -> %d; a conflicting payload must send nothing", before, got)
	}
	for _, r := range srv.RequestLog(ns + "/pay-42") {
		if string(r.Body) != `{"amount":100}` {
			t.Fatalf("a request carried the edited body %s", r.Body)
		}
	}
	found := false
	for _, e := range env.Events(t, ns, "pay-42") {
		if len(e) > 0 && e[:len(actionsv1alpha1.ReasonFingerprintConflict)] == actionsv1alpha1.ReasonFingerprintConflict {
			found = true
		}
	}
	if !found {
		t.Errorf("no %s event: %v", actionsv1alpha1.ReasonFingerprintConflict, env.Events(t, ns, "pay-42"))
	}
}

func stripRules(crd *apiextensionsv1.CustomResourceDefinition) {
	var walk func(s *apiextensionsv1.JSONSchemaProps)
	walk = func(s *apiextensionsv1.JSONSchemaProps) {
		if s == nil {
			return
		}
		var kept apiextensionsv1.ValidationRules
		for _, r := range s.XValidations {
			if !json.Valid([]byte(`"`+r.Rule+`"`)) || !containsOldSelf(r.Rule) {
				kept = append(kept, r)
			}
		}
		s.XValidations = kept
		for k, p := range s.Properties {
			walk(&p)
			s.Properties[k] = p
		}
	}
	for i := range crd.Spec.Versions {
		walk(crd.Spec.Versions[i].Schema.OpenAPIV3Schema)
	}
}

func containsOldSelf(rule string) bool {
	for i := 0; i+7 <= len(rule); i++ {
		if rule[i:i+7] == "oldSelf" {
			return true
		}
	}
	return false
}
