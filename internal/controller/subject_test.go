//go:build !unit

package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/controller"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/subject"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// blindReconciler is a reconciler (no dispatcher: sends inline) whose cache lags so far that it lists no action
// at all: the creation-order check sees nobody, and only the subject Lease keeps two actions apart.
func blindReconciler(t *testing.T, holder string) *controller.ExternalActionReconciler {
	t.Helper()
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	blind := interceptor.NewClient(direct, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*actionsv1alpha1.ExternalActionList); ok {
				return nil // a lagging informer: nothing seen yet
			}
			return c.List(ctx, list, opts...)
		},
	})
	return &controller.ExternalActionReconciler{
		Client: blind, APIReader: direct, Scheme: app.Scheme,
		Recorder: fakeEventRecorder(), Clock: clock.RealClock{}, Executor: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy())),
		Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &controller.InlineDispatcher{Clock: clock.RealClock{}},
		Options: controller.Options{Holder: holder, ClaimMargin: time.Second},
	}
}

// Two reconcilers (two managers) that see no other action in their caches: while one action's send is in
// flight under the subject's Lease, the other action on the subject sends nothing; it is sent once the first
// outcome is recorded and the Lease released.
func TestSubjectLeaseHoldsAgainstBlindCaches(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	srv.Script(ns+"/charge", destination.Step{Delay: 2 * time.Second}) // then the normal 201
	env.CreateDestination(t, ns, "payments", url, func(s *actionsv1alpha1.DestinationSpec) { s.Timeout = durationp(10 * time.Second) })
	for _, n := range []string{"charge", "refund"} {
		xa := envtestutil.Action(ns, n, "payments", "/"+n, `{"order":19}`)
		xa.Spec.Subject = "order/19"
		env.Create(t, xa)
	}
	ctx := context.Background()
	a, b := blindReconciler(t, "manager-a"), blindReconciler(t, "manager-b")
	reconcile := func(r *controller.ExternalActionReconciler, name string) {
		t.Helper()
		for range 3 { // finalizer, then the claim (or the wait)
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
				t.Errorf("reconcile %s: %v", name, err)
			}
			if env.Get(t, ns, name).Status.Phase != "" {
				return
			}
		}
	}

	var wg sync.WaitGroup
	wg.Go(func() { reconcile(a, "charge") }) // sends inline: holds the reconcile for the 2s of the send
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the charge is in flight"), func() bool {
		return srv.Requests(ns+"/charge") == 1
	})
	reconcile(b, "refund")
	refund := env.Get(t, ns, "refund")
	if got := srv.Requests(ns + "/refund"); got != 0 || refund.Status.Claim != nil ||
		!meta.IsStatusConditionTrue(refund.Status.Conditions, actionsv1alpha1.ConditionReconciling) ||
		meta.FindStatusCondition(refund.Status.Conditions, actionsv1alpha1.ConditionReconciling).Reason != actionsv1alpha1.ReasonWaitingForSubject {
		t.Fatalf("while the charge was in flight the refund got %d requests; status %s", got, envtestutil.JSON(refund.Status))
	}
	wg.Wait()
	if p := env.Get(t, ns, "charge").Status.Phase; p != actionsv1alpha1.PhaseSucceeded {
		t.Fatalf("charge phase %s", p)
	}
	if _, err := b.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "refund"}}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests(ns + "/refund"); got != 1 {
		t.Fatalf("after the charge finished the refund got %d requests, want 1", got)
	}
	if p := env.Get(t, ns, "refund").Status.Phase; p != actionsv1alpha1.PhaseSucceeded {
		t.Fatalf("refund phase %s", p)
	}
}

// A Lease whose release was missed (a crash between the outcome and the release) is taken over once a fresh
// read shows its holder gone or finished; one whose holder is still unfinished is not.
func TestSubjectLeaseTakenOverFromGoneOrFinishedHolder(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, nil)
	ctx := context.Background()
	r := blindReconciler(t, "manager-a")
	// "done" finished (Succeeded) earlier; "busy" is unfinished (its status is never written: no reconcile).
	done := envtestutil.Action(ns, "done", "payments", "/done", `{}`)
	env.Create(t, done)
	for range 2 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(done)}); err != nil {
			t.Fatal(err)
		}
	}
	done = env.Get(t, ns, "done")
	if done.Status.Phase != actionsv1alpha1.PhaseSucceeded {
		t.Fatalf("done: %s", done.Status.Phase)
	}
	busy := envtestutil.Action(ns, "busy", "payments", "/busy", `{}`)
	env.Create(t, busy)
	busy = env.Get(t, ns, "busy")

	for i, tc := range []struct {
		holder string
		taken  bool
	}{
		{"ghost/00000000-0000-0000-0000-000000000000", true}, // gone
		{"done/" + string(done.UID), true},                   // finished, outcome recorded
		{"done/another-uid", true},                           // re-created under the same name
		{"busy/" + string(busy.UID), false},                  // unfinished: keeps holding
	} {
		subj := fmt.Sprintf("order/%d", i)
		holder := tc.holder
		if err := env.Client.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: subject.LeaseName(subj)},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("next-%d", i)
		xa := envtestutil.Action(ns, name, "payments", "/"+name, `{}`)
		xa.Spec.Subject = subj
		env.Create(t, xa)
		for range 2 {
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xa)}); err != nil {
				t.Fatal(err)
			}
		}
		sent := srv.Requests(ns+"/"+name) == 1
		if sent != tc.taken {
			t.Errorf("Lease held by %s: sent %v, want %v (status %s)", tc.holder, sent, tc.taken, envtestutil.JSON(env.Get(t, ns, name).Status))
		}
		l := &coordinationv1.Lease{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: subject.LeaseName(subj)}, l)
		switch {
		case tc.taken && !apierrors.IsNotFound(err):
			t.Errorf("Lease of %s after the new holder finished: %v %+v, want released", subj, err, l.Spec)
		case !tc.taken && (err != nil || *l.Spec.HolderIdentity != tc.holder):
			t.Errorf("Lease of %s: %v %+v, want still held by %s", subj, err, l.Spec, tc.holder)
		}
	}
}
