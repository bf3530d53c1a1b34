package apicost

import (
	"context"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// finalizerUpdates counts the Updates (PUT of the object, not of /status) of ExternalActions the API server has
// answered: the manager's only Update of an ExternalAction is the one that adds the finalizer.
func finalizerUpdates(t *testing.T) float64 {
	t.Helper()
	return env.RequestCount(t, "externalactions", "PUT", "")
}

// runOne creates one action against a fresh destination, waits until it Succeeded, and returns the create
// response's finalizers and the number of ExternalAction Updates made meanwhile.
func runOne(t *testing.T, ns, name string) (created []string, updates float64) {
	t.Helper()
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, name, url, nil)
	before := finalizerUpdates(t)
	xa := envtestutil.Action(ns, name, name, "/orders", `{"n":1}`)
	env.Create(t, xa)
	created = slices.Clone(xa.Finalizers)
	done := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if !slices.Contains(done.Finalizers, actionsv1alpha1.Finalizer) {
		t.Fatalf("succeeded action %s has finalizers %v, want %s", name, done.Finalizers, actionsv1alpha1.Finalizer)
	}
	return created, finalizerUpdates(t) - before
}

// TestFinalizerAtAdmission covers both paths of DESIGN rule 8's finalizer: without the shipped
// MutatingAdmissionPolicy (clusters before Kubernetes 1.36) the manager adds it with one Update; with it, the
// create response already carries it, existing finalizers are kept, none is duplicated, and the manager makes
// no Update at all.
func TestFinalizerAtAdmission(t *testing.T) {
	ns := env.Namespace(t)
	env.StartManager(t, app.Options{})

	t.Run("without the policy the manager adds it", func(t *testing.T) {
		created, updates := runOne(t, ns, "no-policy")
		if slices.Contains(created, actionsv1alpha1.Finalizer) {
			t.Fatalf("create response has the finalizer without the policy: %v", created)
		}
		if updates < 1 {
			t.Fatalf("the manager made %v ExternalAction Updates, want the one that adds the finalizer", updates)
		}
	})

	remove := env.InstallFinalizerPolicy(t, ns)

	t.Run("existing finalizers are kept and none is duplicated", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			finalizers []string
			want       []string
		}{
			{"none", nil, []string{actionsv1alpha1.Finalizer}},
			{"other", []string{"example.com/keep"}, []string{"example.com/keep", actionsv1alpha1.Finalizer}},
			{"already", []string{actionsv1alpha1.Finalizer}, []string{actionsv1alpha1.Finalizer}},
			{"both", []string{"example.com/keep", actionsv1alpha1.Finalizer}, []string{"example.com/keep", actionsv1alpha1.Finalizer}},
		} {
			xa := envtestutil.Action(ns, "probe-"+tc.name, "none", "/", "")
			xa.Finalizers = tc.finalizers
			if err := env.Client.Create(context.Background(), xa, client.DryRunAll); err != nil {
				t.Fatalf("%s: dry-run create: %v", tc.name, err)
			}
			if !slices.Equal(xa.Finalizers, tc.want) {
				t.Errorf("%s: created with finalizers %v, want %v", tc.name, xa.Finalizers, tc.want)
			}
		}
	})

	t.Run("with the policy the manager makes no Update", func(t *testing.T) {
		created, updates := runOne(t, ns, "with-policy")
		if !slices.Equal(created, []string{actionsv1alpha1.Finalizer}) {
			t.Fatalf("create response has finalizers %v, want [%s] from the policy", created, actionsv1alpha1.Finalizer)
		}
		if updates != 0 {
			t.Fatalf("the manager made %v ExternalAction Updates with the policy installed, want 0", updates)
		}
	})

	remove()
	t.Run("removed again, the manager adds it again", func(t *testing.T) {
		if _, updates := runOne(t, ns, "removed"); updates < 1 {
			t.Fatalf("the manager made %v ExternalAction Updates after the policy went, want 1", updates)
		}
	})
}
