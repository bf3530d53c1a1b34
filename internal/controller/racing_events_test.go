//go:build !unit

package controller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
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
	"github.com/actionledger/actionledger/internal/tombstone"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// downStore is a tombstone store that cannot answer (PostgreSQL down).
type downStore struct{}

var errStoreDown = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

func (downStore) Name() string { return tombstone.StorePostgres }
func (downStore) Lookup(context.Context, *actionsv1alpha1.ExternalAction) (*tombstone.Record, error) {
	return nil, errStoreDown
}
func (downStore) Write(context.Context, *tombstone.Record, types.UID) error { return errStoreDown }
func (downStore) Expire(context.Context, time.Time, int) (int, error)       { return 0, errStoreDown }

// With the tombstone store down, two reconcilers (two managers during a leader overlap, or a reconcile on a
// lagging cache) decide on the same copy of a new action at the same moment, several rounds: the
// TombstoneStoreUnavailable transition is written once and announced by one Warning Event, from the write that
// won; the loser's Conflict emits nothing, and later reconciles of the written status emit nothing either.
func TestTombstoneStoreDownOneWarningWithRacingReconcilers(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, nil)
	ctx := context.Background()
	xa := envtestutil.Action(ns, "racing", "payments", "/charges", `{"amount":1}`)
	controllerutil.AddFinalizer(xa, actionsv1alpha1.Finalizer)
	env.Create(t, xa)
	snapshot := env.Get(t, ns, "racing") // the copy both decide on: no status yet

	rec := events.NewFakeRecorder(100)
	live, err := client.NewWithWatch(env.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	reconciler := func(holder string, stale bool) *controller.ExternalActionReconciler {
		c := live
		if stale {
			c = interceptor.NewClient(live, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey,
				obj client.Object, opts ...client.GetOption) error {
				if x, ok := obj.(*actionsv1alpha1.ExternalAction); ok && key.Name == "racing" {
					snapshot.DeepCopyInto(x)
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			}})
		}
		return &controller.ExternalActionReconciler{
			Client: c, APIReader: live, Scheme: app.Scheme, Recorder: annotated{rec}, Clock: clock.RealClock{},
			Executor: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy())),
			Limiter:  limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &controller.InlineDispatcher{Clock: clock.RealClock{}},
			Options: controller.Options{Holder: holder, ClaimMargin: time.Second, TombstoneStore: downStore{}},
		}
	}
	racers := []*controller.ExternalActionReconciler{reconciler("holder-a", true), reconciler("holder-b", true)}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(snapshot)}
	for round := range 3 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, r := range racers {
			wg.Go(func() {
				<-start
				if _, err := r.Reconcile(ctx, req); err != nil && !strings.Contains(err.Error(), "tombstone") {
					t.Errorf("round %d: reconcile: %v", round, err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	fresh := reconciler("holder-c", false)
	for range 2 {
		if _, err := fresh.Reconcile(ctx, req); err != nil && !strings.Contains(err.Error(), "tombstone") {
			t.Errorf("reconcile on the written status: %v", err)
		}
	}

	got := env.Get(t, ns, "racing")
	if c := meta.FindStatusCondition(got.Status.Conditions, actionsv1alpha1.ConditionReconciling); c == nil ||
		c.Reason != actionsv1alpha1.ReasonTombstoneStoreUnavailable {
		t.Fatalf("status %s: want Reconciling with reason TombstoneStoreUnavailable", envtestutil.JSON(got.Status))
	}
	warnings := 0
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, actionsv1alpha1.ReasonTombstoneStoreUnavailable) {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("%d TombstoneStoreUnavailable Events, want 1 (one per transition)", warnings)
	}
	if n := srv.Requests(ns + "/racing"); n != 0 {
		t.Errorf("the destination got %d requests while the store was down, want 0", n)
	}
}
