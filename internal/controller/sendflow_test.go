package controller

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/requeue"
)

// heldExecutor holds the first request until release is closed (or ctx ends), then answers 201; any later
// request (a resend or a post-check) is answered 404 at once. It counts requests.
type heldExecutor struct {
	n       atomic.Int32
	started chan struct{}
	release chan struct{}
}

func (e *heldExecutor) Execute(ctx context.Context, _ httpexec.Request, _ int) httpexec.Result {
	if e.n.Add(1) > 1 {
		return httpexec.Result{Written: true, WroteRequest: true, Response: &httpexec.Response{StatusCode: http.StatusNotFound}}
	}
	e.started <- struct{}{}
	select {
	case <-e.release:
	case <-ctx.Done():
		return httpexec.Result{Written: true, WroteRequest: true, Err: ctx.Err(), ErrorClass: httpexec.ClassTimeout}
	}
	return httpexec.Result{Written: true, WroteRequest: true, Response: &httpexec.Response{StatusCode: http.StatusCreated}}
}

// While the dispatcher holds an attempt, the reconciles that follow its claim wait: no second claim, no
// resend and no post-check or OutcomeUnknown, even after the claim's expiry has passed on the controller's
// clock. When the outcome comes back it is recorded: Succeeded after one request.
func TestReconcileWaitsWhileTheDispatcherHoldsTheAttempt(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "shop", Name: name, CreationTimestamp: metav1.NewTime(clk.Now())}
	}
	dest := &actionsv1alpha1.Destination{ObjectMeta: meta("billing"), Spec: actionsv1alpha1.DestinationSpec{
		URL: "http://billing.invalid", Timeout: &metav1.Duration{Duration: 20 * time.Second},
		Reconciliation: &actionsv1alpha1.ReconciliationCheck{Path: "/check", Applied: "true", NotApplied: "false"}}}
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: meta("invoice-9"), Spec: actionsv1alpha1.ExternalActionSpec{
		DestinationRef: actionsv1alpha1.DestinationReference{Name: "billing"},
		Request:        actionsv1alpha1.ActionRequest{Method: "POST", Path: "/invoices"},
	}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&actionsv1alpha1.ExternalAction{}).WithObjects(dest, xa).Build()
	exec := &heldExecutor{started: make(chan struct{}, 4), release: make(chan struct{})}
	r := &ExternalActionReconciler{Client: c, APIReader: c, Scheme: scheme, Recorder: events.NewFakeRecorder(100), Clock: clk,
		Executor: exec, Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16),
		Options: Options{Holder: "test", ClaimMargin: time.Second},
	}
	d, err := NewManagerDispatcher(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Dispatcher = d
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xa)}
	get := func() *actionsv1alpha1.ExternalAction {
		t.Helper()
		cur := &actionsv1alpha1.ExternalAction{}
		if err := c.Get(ctx, req.NamespacedName, cur); err != nil {
			t.Fatal(err)
		}
		return cur
	}
	reconcile := func() ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return res
	}

	for i := 0; get().Status.Claim == nil; i++ {
		if i == 5 {
			t.Fatalf("no claim after 5 reconciles: %+v", get().Status)
		}
		if res := reconcile(); get().Status.Claim != nil && res.RequeueAfter <= 0 {
			t.Fatalf("the claiming reconcile returned %+v; want a requeue at the claim's expiry as a safety net", res)
		}
	}
	select {
	case <-exec.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the dispatcher never started the send")
	}
	claim := get().Status.Claim.DeepCopy()

	// The reconciles right after the claim, then more past its expiry (the controller's clock only). None polls:
	// the outcome wakes the object (d.outcomes below), so the requeue is only the requeue.Held safety net
	// (issue 35: a 50 ms poll cost a claimed action one reconcile per 50 ms of destination latency).
	for _, step := range []time.Duration{0, 0, time.Minute, time.Hour} {
		clk.Step(step)
		if res := reconcile(); res.RequeueAfter != requeue.Held {
			t.Fatalf("a reconcile while the dispatcher holds the attempt returned %+v; want the safety net %s, not a poll", res, requeue.Held)
		}
		cur := get()
		if cur.Status.Attempts != 1 || cur.Status.Claim == nil || *cur.Status.Claim != *claim || cur.Status.Phase.Terminal() {
			t.Fatalf("while the dispatcher holds attempt 1 (clock +%s) the status moved: %+v", step, cur.Status)
		}
	}
	if n := exec.n.Load(); n != 1 {
		t.Fatalf("%d requests while the attempt is held, want 1", n)
	}

	close(exec.release)
	select {
	case <-d.outcomes: // what wakes the object in a manager
	case <-time.After(10 * time.Second):
		t.Fatal("the outcome never came back")
	}
	reconcile()
	done := get()
	if done.Status.Phase != actionsv1alpha1.PhaseSucceeded || done.Status.Attempts != 1 || exec.n.Load() != 1 {
		t.Fatalf("phase %s, %d attempts, %d requests; want Succeeded, 1, 1", done.Status.Phase, done.Status.Attempts, exec.n.Load())
	}
}
