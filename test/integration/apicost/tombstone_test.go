package apicost

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// tombstoneGets counts the API server's answers to GETs of single ActionTombstones.
func tombstoneGets(t *testing.T) float64 { return env.RequestCount(t, "actiontombstones", "GET", "") }

// deleteAction deletes ns/name and waits until it is gone (its finalizer wrote the tombstone first).
func deleteAction(t *testing.T, ns, name string) {
	t.Helper()
	xa := &actionsv1alpha1.ExternalAction{}
	xa.Namespace, xa.Name = ns, name
	if err := env.Client.Delete(context.Background(), xa); err != nil {
		t.Fatalf("deleting %s/%s: %v", ns, name, err)
	}
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say(ns+"/"+name+" to be gone"), func() bool {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &actionsv1alpha1.ExternalAction{})
		return apierrors.IsNotFound(err)
	})
}

// recreate creates the same action again at once and waits until it is Succeeded: it must be a replay of the
// tombstone, with no second request to the destination.
func recreate(t *testing.T, srv *destination.Server, ns, name string) {
	t.Helper()
	env.Create(t, envtestutil.Action(ns, name, "d", "/orders", `{"n":7}`))
	xa := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if xa.Status.ReplayedFrom == nil {
		t.Errorf("%s: re-created action succeeded without replayedFrom: %s", name, envtestutil.JSON(xa.Status))
	}
	if got := srv.Requests(ns + "/" + name); got != 1 {
		t.Fatalf("%s: the destination saw %d requests for the key, want 1 (the re-created object must replay)", name, got)
	}
}

// TestTombstoneLookupWithoutRead: new keys are proven to have no tombstone without a GET (the happy path makes
// none), and a key re-created right after another manager wrote its tombstone and released the object is
// replayed, never sent again: by a manager that watched the deletion, and by one started just after it.
func TestTombstoneLookupWithoutRead(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "d", url, nil)
	stopA := env.StartManager(t, app.Options{Holder: "manager-a"})
	stopB := env.StartManager(t, app.Options{Holder: "manager-b"})

	t.Run("happy path: no live tombstone read", func(t *testing.T) {
		const n = 20
		before := tombstoneGets(t)
		for i := range n {
			env.Create(t, envtestutil.Action(ns, fmt.Sprintf("new-%d", i), "d", "/orders", fmt.Sprintf(`{"n":%d}`, i)))
		}
		for i := range n {
			env.WaitPhase(t, ns, fmt.Sprintf("new-%d", i), actionsv1alpha1.PhaseSucceeded, 30*time.Second)
		}
		if gets := tombstoneGets(t) - before; gets != 0 {
			t.Fatalf("%v live tombstone GETs for %d new actions, want 0", gets, n)
		}
	})

	t.Run("re-created at once, seen by a manager that watched the deletion", func(t *testing.T) {
		env.Create(t, envtestutil.Action(ns, "again", "d", "/orders", `{"n":7}`))
		env.WaitPhase(t, ns, "again", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
		deleteAction(t, ns, "again")
		stopA() // whichever manager finalized it, B alone sees the new object
		recreate(t, srv, ns, "again")
	})

	t.Run("re-created at once, seen by a manager started after the deletion", func(t *testing.T) {
		env.Create(t, envtestutil.Action(ns, "later", "d", "/orders", `{"n":7}`))
		env.WaitPhase(t, ns, "later", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
		deleteAction(t, ns, "later") // B finalizes it
		stopB()
		env.StartManager(t, app.Options{Holder: "manager-c"})
		recreate(t, srv, ns, "later")
	})
}
