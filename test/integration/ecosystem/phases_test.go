package ecosystem_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// realPhases holds ExternalActions that the real controller drove into every phase, read back from the
// API server as unstructured objects (what kstatus, Flux and Argo CD see).
type realPhases struct {
	ns         string
	objs       map[actionsv1alpha1.Phase]*unstructured.Unstructured
	metricsURL string
}

var xaGVK = schema.GroupVersionKind{Group: actionsv1alpha1.GroupVersion.Group, Version: actionsv1alpha1.GroupVersion.Version, Kind: "ExternalAction"}

// driveAllPhases runs the real manager (metrics served on loopback) against the recording destination and
// drives one action into each phase:
//
//	Succeeded      201
//	Failed         400 (business rejection)
//	Exhausted      503 with retryPolicy.maxAttempts 1
//	OutcomeUnknown the destination answers after the 1s attempt timeout; POST, no key support, no post-check
//	Conflict       an ActionTombstone with the same name and another fingerprint exists before the action
//	InProgress     503 with Retry-After: 600 (a retry is scheduled; the destination is paused)
//	Pending        a second action on the paused destination (waiting, RateLimited, nothing sent)
//
// plus one OutcomeUnknown action that a person resolves with "retry" (it then succeeds), so that retries and
// manual resolutions show in the metrics.
func driveAllPhases(t *testing.T) *realPhases {
	t.Helper()
	ctx := context.Background()
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, nil)
	env.CreateDestination(t, ns, "slow", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Timeout = &metav1.Duration{Duration: time.Second}
	})
	env.CreateDestination(t, ns, "busy", url, nil)

	port := freePort(t)
	env.StartManager(t, app.Options{MetricsServer: &metricsserver.Options{BindAddress: "127.0.0.1:" + port}})

	key := func(name string) string { return ns + "/" + name }
	srv.Script(key("xa-failed"), destination.Step{Status: 400, Body: `{"code":"card_declined"}`})
	srv.Script(key("xa-exhausted"), destination.Step{Status: 503, Body: `{"code":"unavailable"}`})
	srv.Script(key("xa-unknown"), destination.Step{Status: 201, Delay: 3 * time.Second, Apply: true})
	srv.Script(key("xa-resolved"), destination.Step{Status: 201, Delay: 3 * time.Second, Apply: true})
	srv.Script(key("xa-inprogress"), destination.Step{Status: 503, Header: map[string]string{"Retry-After": "600"}})

	// Conflict: the key is already bound to another fingerprint by a tombstone.
	env.Create(t, &actionsv1alpha1.ActionTombstone{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "xa-conflict"},
		Spec: actionsv1alpha1.ActionTombstoneSpec{
			Key: key("xa-conflict"), Fingerprint: "sha256:" + strings.Repeat("0", 64), Phase: actionsv1alpha1.PhaseSucceeded,
			StatusCode: 201, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour)),
		},
	})

	one := int32(1)
	exhausted := envtestutil.Action(ns, "xa-exhausted", "payments", "/charges", `{"amount":3}`)
	exhausted.Spec.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &one}
	for _, xa := range []*actionsv1alpha1.ExternalAction{
		envtestutil.Action(ns, "xa-succeeded", "payments", "/charges", `{"amount":1}`),
		envtestutil.Action(ns, "xa-failed", "payments", "/charges", `{"amount":2}`),
		exhausted,
		envtestutil.Action(ns, "xa-unknown", "slow", "/charges", `{"amount":4}`),
		envtestutil.Action(ns, "xa-resolved", "slow", "/charges", `{"amount":5}`),
		envtestutil.Action(ns, "xa-conflict", "payments", "/charges", `{"amount":6}`),
		envtestutil.Action(ns, "xa-inprogress", "busy", "/charges", `{"amount":7}`),
	} {
		env.Create(t, xa)
	}

	const wait = 60 * time.Second
	want := map[string]actionsv1alpha1.Phase{
		"xa-succeeded": actionsv1alpha1.PhaseSucceeded,
		"xa-failed":    actionsv1alpha1.PhaseFailed,
		"xa-exhausted": actionsv1alpha1.PhaseExhausted,
		"xa-unknown":   actionsv1alpha1.PhaseOutcomeUnknown,
		"xa-conflict":  actionsv1alpha1.PhaseConflict,
	}
	for name, phase := range want {
		env.WaitPhase(t, ns, name, phase, wait)
	}
	env.WaitFor(t, ns, "xa-inprogress", wait, "InProgress with a retry scheduled", func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.Phase == actionsv1alpha1.PhaseInProgress && xa.Status.NextAttemptAt != nil && xa.Status.Claim == nil
	})
	// The destination is now paused for 600s: a new action for it waits in Pending without a send.
	env.Create(t, envtestutil.Action(ns, "xa-pending", "busy", "/charges", `{"amount":8}`))
	env.WaitFor(t, ns, "xa-pending", wait, "Pending, delayed by the destination's pause", func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.Phase == actionsv1alpha1.PhasePending && xa.Status.NextAttemptAt != nil
	})
	if n := srv.Requests(key("xa-pending")); n != 0 {
		t.Fatalf("the paused destination received %d requests for xa-pending, want 0", n)
	}
	if n := srv.Requests(key("xa-conflict")); n != 0 {
		t.Fatalf("the destination received %d requests for the conflicting key, want 0", n)
	}

	// A person decides "retry" on the second OutcomeUnknown action: a new attempt under the same key.
	env.WaitPhase(t, ns, "xa-resolved", actionsv1alpha1.PhaseOutcomeUnknown, wait)
	env.WaitFor(t, ns, "xa-resolved", wait, "annotated", func(xa *actionsv1alpha1.ExternalAction) bool {
		xa.Annotations = map[string]string{actionsv1alpha1.AnnotationResolve: actionsv1alpha1.DecisionRetry}
		return env.Client.Update(ctx, xa) == nil
	})
	env.WaitPhase(t, ns, "xa-resolved", actionsv1alpha1.PhaseSucceeded, wait)

	names := map[actionsv1alpha1.Phase]string{
		actionsv1alpha1.PhasePending: "xa-pending", actionsv1alpha1.PhaseInProgress: "xa-inprogress",
	}
	for name, phase := range want {
		names[phase] = name
	}
	out := &realPhases{ns: ns, objs: map[actionsv1alpha1.Phase]*unstructured.Unstructured{}, metricsURL: "http://127.0.0.1:" + port + "/metrics"}
	for phase, name := range names {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(xaGVK)
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			t.Fatalf("reading %s back: %v", name, err)
		}
		if got, _, _ := unstructured.NestedString(u.Object, "status", "phase"); got != string(phase) {
			t.Fatalf("%s: phase %q, want %q", name, got, phase)
		}
		out.objs[phase] = u
	}
	return out
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return strconv.Itoa(port)
}

// allPhases lists the phases in CONTRACT order.
var allPhases = []actionsv1alpha1.Phase{
	actionsv1alpha1.PhasePending, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.PhaseSucceeded,
	actionsv1alpha1.PhaseFailed, actionsv1alpha1.PhaseOutcomeUnknown, actionsv1alpha1.PhaseExhausted,
	actionsv1alpha1.PhaseConflict,
}

// TestRealPhases drives the real controller into every phase once and checks how kstatus, the Argo CD
// health check and the Prometheus rules read the result.
func TestRealPhases(t *testing.T) {
	run := driveAllPhases(t)
	t.Run("kstatus", func(t *testing.T) { checkKstatus(t, run) })
	t.Run("argocd", func(t *testing.T) { checkArgoHealth(t, run) })
	t.Run("metrics", func(t *testing.T) { checkMetrics(t, run) })
}
