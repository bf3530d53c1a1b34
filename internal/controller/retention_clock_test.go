package controller

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
)

// created201 answers every request with 201 and counts the requests.
type created201 struct{ n atomic.Int32 }

func (e *created201) Execute(_ context.Context, _ httpexec.Request, _ int) httpexec.Result {
	e.n.Add(1)
	return httpexec.Result{Written: true, WroteRequest: true, Response: &httpexec.Response{
		StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"x1"}`),
	}}
}

// Expiry is decided from status.completedAt and status.expiresAt written with the operator's own clock, never from a
// server timestamp: with the controller's clock ten minutes ahead of the API server's (creationTimestamp), nothing is
// collected before completedAt + ttl, and no tombstone before its expiresAt.
func TestRetentionUsesTheControllersClock(t *testing.T) {
	ctx := context.Background()
	server := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(server.Add(10 * time.Minute))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	serverMeta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "shop", Name: name, CreationTimestamp: metav1.NewTime(server)}
	}
	dest := &actionsv1alpha1.Destination{ObjectMeta: serverMeta("billing"), Spec: actionsv1alpha1.DestinationSpec{
		URL: "http://billing.invalid", Retention: &actionsv1alpha1.Retention{TombstoneTTL: &metav1.Duration{Duration: 5 * time.Minute}}}}
	ttl := int32(60)
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: serverMeta("invoice-7"), Spec: actionsv1alpha1.ExternalActionSpec{
		DestinationRef:          actionsv1alpha1.DestinationReference{Name: "billing"},
		Request:                 actionsv1alpha1.ActionRequest{Method: "POST", Path: "/invoices"},
		TTLSecondsAfterFinished: &ttl,
	}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&actionsv1alpha1.ExternalAction{}).WithObjects(dest, xa).Build()
	exec := &created201{}
	r := &ExternalActionReconciler{Client: c, APIReader: c, Scheme: scheme, Recorder: events.NewFakeRecorder(100), Clock: clk,
		Executor: exec, Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &InlineDispatcher{Clock: clk},
		Options: Options{Holder: "test", ClaimMargin: time.Second},
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xa)}
	reconcile := func() ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return res
	}
	get := func() (*actionsv1alpha1.ExternalAction, bool) {
		t.Helper()
		cur := &actionsv1alpha1.ExternalAction{}
		err := c.Get(ctx, req.NamespacedName, cur)
		if apierrors.IsNotFound(err) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return cur, true
	}

	for range 5 {
		if cur, _ := get(); cur.Status.Phase == actionsv1alpha1.PhaseSucceeded {
			break
		}
		reconcile()
	}
	done, _ := get()
	completed := clk.Now()
	if done.Status.Phase != actionsv1alpha1.PhaseSucceeded || exec.n.Load() != 1 {
		t.Fatalf("phase %s after %d request(s), want Succeeded after 1", done.Status.Phase, exec.n.Load())
	}
	if done.Status.CompletedAt == nil || !done.Status.CompletedAt.Time.Equal(completed) ||
		done.Status.ExpiresAt == nil || !done.Status.ExpiresAt.Time.Equal(completed.Add(time.Minute)) {
		t.Fatalf("completedAt %v, expiresAt %v; want the controller's clock %s and %s", done.Status.CompletedAt, done.Status.ExpiresAt,
			completed, completed.Add(time.Minute))
	}

	// Ten minutes past every server timestamp, but not past completedAt + ttl: kept, requeued for the rest.
	if res := reconcile(); res.RequeueAfter != time.Minute {
		t.Errorf("requeue after %s right after completion, want 1m", res.RequeueAfter)
	}
	clk.Step(59 * time.Second)
	if res := reconcile(); res.RequeueAfter != time.Second {
		t.Errorf("requeue after %s one second before expiry, want 1s", res.RequeueAfter)
	}
	if cur, ok := get(); !ok || !cur.DeletionTimestamp.IsZero() {
		t.Fatalf("collected before its expiresAt (exists %v)", ok)
	}
	var tss actionsv1alpha1.ActionTombstoneList
	if err := c.List(ctx, &tss); err != nil || len(tss.Items) != 0 {
		t.Fatalf("tombstones before expiry: %d (%v)", len(tss.Items), err)
	}

	// At expiresAt: deleted, the finalizer writes the tombstone and goes (each of the two collection steps is
	// handed to CollectPriority first, one reconcile more each: a workqueue would dequeue it behind any send).
	clk.Step(time.Second)
	for range 5 {
		if _, ok := get(); !ok {
			break
		}
		reconcile()
	}
	if _, ok := get(); ok {
		t.Fatal("not collected at its expiresAt")
	}
	ts := &actionsv1alpha1.ActionTombstone{}
	if err := c.Get(ctx, req.NamespacedName, ts); err != nil {
		t.Fatalf("tombstone: %v", err)
	}
	if !ts.Spec.CompletedAt.Time.Equal(completed) || !ts.Spec.ExpiresAt.Time.Equal(clk.Now().Add(5*time.Minute)) ||
		ts.Spec.Phase != actionsv1alpha1.PhaseSucceeded || ts.Spec.StatusCode != 201 || ts.Spec.UID != string(done.UID) {
		t.Fatalf("tombstone = %+v", ts.Spec)
	}

	// The tombstone collector uses the same clock and the tombstone's own expiresAt.
	tr := &TombstoneReconciler{Client: c, Clock: clk}
	res, err := tr.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter != 5*time.Minute {
		t.Fatalf("tombstone reconcile: requeue %s, err %v; want 5m", res.RequeueAfter, err)
	}
	clk.Step(5*time.Minute - time.Second)
	if _, err := tr.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, ts); err != nil {
		t.Fatalf("tombstone collected before its expiresAt: %v", err)
	}
	clk.Step(time.Second)
	if _, err := tr.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, ts); !apierrors.IsNotFound(err) {
		t.Fatalf("tombstone not collected at its expiresAt: %v", err)
	}
	if n := exec.n.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// An OutcomeUnknown action is never collected, even with an expiresAt from an older version or a hand edit.
func TestOutcomeUnknownNeverCollected(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	scheme := runtime.NewScheme()
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	past := metav1.NewTime(clk.Now().Add(-time.Hour))
	xa := &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "transfer-3", Finalizers: []string{actionsv1alpha1.Finalizer}},
		Status: actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseOutcomeUnknown, Fingerprint: "sha256:ab",
			IdempotencyKey: "shop/transfer-3", Attempts: 1, CompletedAt: &past, ExpiresAt: &past},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&actionsv1alpha1.ExternalAction{}).WithObjects(xa).Build()
	r := &ExternalActionReconciler{Client: c, APIReader: c, Scheme: scheme, Recorder: events.NewFakeRecorder(10), Clock: clk,
		Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &InlineDispatcher{Clock: clk},
		Options: Options{Holder: "test"},
	}
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xa)})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("reconcile: %+v, %v", res, err)
	}
	cur := &actionsv1alpha1.ExternalAction{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(xa), cur); err != nil || !cur.DeletionTimestamp.IsZero() {
		t.Fatalf("OutcomeUnknown was collected: %v, deletionTimestamp %v", err, cur.DeletionTimestamp)
	}
}

// A person's decision on an OutcomeUnknown action whose Destination is gone keeps the action's retention
// (spec.ttlSecondsAfterFinished, else the default): it is not collected at once.
func TestResolveWithoutDestinationKeepsRetention(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	scheme := runtime.NewScheme()
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ttl := int32(600)
	for _, tc := range []struct {
		name string
		ttl  *int32
		want time.Duration
	}{{"spec ttl", &ttl, 10 * time.Minute}, {"default", nil, destination.DefaultTTLAfterFinished}} {
		t.Run(tc.name, func(t *testing.T) {
			past := metav1.NewTime(clk.Now().Add(-time.Hour))
			xa := &actionsv1alpha1.ExternalAction{
				ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "transfer-4", Finalizers: []string{actionsv1alpha1.Finalizer},
					Annotations: map[string]string{actionsv1alpha1.AnnotationResolve: actionsv1alpha1.DecisionApplied}},
				Spec: actionsv1alpha1.ExternalActionSpec{DestinationRef: actionsv1alpha1.DestinationReference{Name: "gone"},
					Request: actionsv1alpha1.ActionRequest{Method: "POST", Path: "/t"}, TTLSecondsAfterFinished: tc.ttl},
				Status: actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseOutcomeUnknown, Fingerprint: "sha256:ab",
					IdempotencyKey: "shop/transfer-4", Attempts: 1, CompletedAt: &past},
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&actionsv1alpha1.ExternalAction{}).WithObjects(xa).Build()
			r := &ExternalActionReconciler{Client: c, APIReader: c, Scheme: scheme, Recorder: events.NewFakeRecorder(10), Clock: clk,
				Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &InlineDispatcher{Clock: clk},
				Options: Options{Holder: "test"},
			}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xa)}
			for range 3 {
				if _, err := r.Reconcile(ctx, req); err != nil {
					t.Fatalf("reconcile: %v", err)
				}
			}
			cur := &actionsv1alpha1.ExternalAction{}
			if err := c.Get(ctx, req.NamespacedName, cur); err != nil {
				t.Fatalf("the resolved action was collected at once: %v", err)
			}
			if cur.Status.Phase != actionsv1alpha1.PhaseSucceeded || cur.Status.ExpiresAt == nil ||
				!cur.Status.ExpiresAt.Time.Equal(clk.Now().Add(tc.want)) || !cur.DeletionTimestamp.IsZero() {
				t.Fatalf("phase %s, expiresAt %v, deletion %v; want Succeeded kept until now+%s", cur.Status.Phase,
					cur.Status.ExpiresAt, cur.DeletionTimestamp, tc.want)
			}
		})
	}
}
