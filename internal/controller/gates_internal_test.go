package controller

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/send"
)

// heldDispatcher is a Dispatcher whose room at every destination the test sets. It takes jobs without running
// them and keeps them, so that a test sees what was handed over: nothing leaves the process.
type heldDispatcher struct {
	room bool
	jobs []dispatch.Job[*send.Result]
	// woken are the keys the waiting room woke (the manager's dispatcher would enqueue them).
	mu    sync.Mutex
	woken []types.NamespacedName
}

func (d *heldDispatcher) wake(nn types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.woken = append(d.woken, nn)
}

func (d *heldDispatcher) wokenKeys() []types.NamespacedName {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.woken)
}

func (d *heldDispatcher) Submit(_ context.Context, job dispatch.Job[*send.Result]) error {
	d.jobs = append(d.jobs, job)
	return nil
}
func (d *heldDispatcher) HasRoom(string, string) bool     { return d.room }
func (d *heldDispatcher) Holds(types.NamespacedName) bool { return false }
func (d *heldDispatcher) InFlight(string) int             { return 1 }
func (d *heldDispatcher) Queued(string) int               { return 0 }

// reconcilingReason is the reason of xa's Reconciling condition ("" without one).
func reconcilingReason(xa *actionsv1alpha1.ExternalAction) string {
	if c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling); c != nil {
		return c.Reason
	}
	return ""
}

// The send, the claimless send and the post-check pass the same limits (variant, toDestination): a destination
// without room in the dispatcher and a destination whose rate limit is spent hold all three, nothing is handed
// to the dispatcher, and the wait is counted (actionledger_delayed_total). A send records its delay
// (ConcurrencyLimited, RateLimited) with no claim written; a post-check, quiet, keeps its own status
// (PostCheckPending) and only waits. A rate-limit wait that ends within send.BriefWait is counted and waited by
// every variant, and written by none. A held action waits in the destination's waiting room: for a slot, or,
// for a token, until the limiter's time, when the room wakes it; its requeue is only the safety net. With room
// and a token, each is handed to the dispatcher once.
func TestVariantsPassTheSameLimits(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	variants := []struct {
		name  string
		dest  func(*actionsv1alpha1.DestinationSpec)
		check bool // an uncertain attempt whose claim expired: the ledger decides a post-check
		// claimed: the claim is stored once the job is handed over; kind tells the job's kind from its result.
		claimed bool
		kind    func(*send.Result) bool
	}{
		{name: "claimed send", claimed: true, kind: func(p *send.Result) bool { return p.Check == nil && p.Unclaimed == nil }},
		{name: "claimless send", kind: func(p *send.Result) bool { return p.Unclaimed != nil }, dest: func(s *actionsv1alpha1.DestinationSpec) {
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true, Claim: actionsv1alpha1.ClaimWhenUnsafe}
		}},
		{name: "post-check", check: true, claimed: true, kind: func(p *send.Result) bool { return p.Check != nil }, dest: func(s *actionsv1alpha1.DestinationSpec) {
			s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{Path: "/effects?key={key}",
				Applied: "response.statusCode == 200", NotApplied: "response.statusCode == 404"}
		}},
	}
	limits := []struct {
		name        string
		room, spent bool
		rps         int32  // the destination's requestsPerSecond (burst 1); 0: the fixture's 1/s
		reason      string // "": not held
		brief       bool   // the wait ends within send.BriefWait: waited, not written, by every variant
		// waited: how long the action has waited for room already (the room's record); a wait for room is shown
		// only past the destination's timeout (roomShown), before that waited like a brief one.
		waited time.Duration
	}{
		{name: "open", room: true},
		{name: "no room", reason: actionsv1alpha1.ReasonConcurrencyLimited, waited: time.Minute},
		{name: "no room, just begun", reason: actionsv1alpha1.ReasonConcurrencyLimited, brief: true},
		{name: "rate limit spent", room: true, spent: true, reason: actionsv1alpha1.ReasonRateLimited},
		{name: "rate limit spent briefly", room: true, spent: true, rps: 10, reason: actionsv1alpha1.ReasonRateLimited, brief: true},
	}
	for _, v := range variants {
		for _, l := range limits {
			t.Run(v.name+"/"+l.name, func(t *testing.T) {
				edit := func(s *actionsv1alpha1.DestinationSpec) {
					if v.dest != nil {
						v.dest(s)
					}
					if l.rps != 0 {
						s.RateLimit.RequestsPerSecond = l.rps
					}
				}
				r, d, c, xa := gateFixture(t, now, edit, v.check, l.room)
				destID := "Destination/shop/api"
				if l.waited > 0 {
					r.parts.room.Since(client.ObjectKeyFromObject(xa), now.Add(-l.waited))
				}
				if l.spent { // another action took the destination's one token
					rd, err := r.parts.resolver.Resolve(context.Background(), xa)
					if err != nil {
						t.Fatal(err)
					}
					if ok, _, _ := r.Limiter.Admit(rd.ID, rd.Limits, "shop", "shop/other", true, now); !ok {
						t.Fatal("the first token was refused")
					}
				}
				delayed := func() float64 {
					if l.reason == "" {
						return 0
					}
					return testutil.ToFloat64(metrics.Delayed.WithLabelValues(destID, l.reason))
				}
				before := delayed()
				res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xa)})
				if err != nil {
					t.Fatal(err)
				}
				if l.reason == actionsv1alpha1.ReasonRateLimited {
					wokenAtItsTime(t, r, d, client.ObjectKeyFromObject(xa), now, res)
				}
				got := &actionsv1alpha1.ExternalAction{}
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(xa), got); err != nil {
					t.Fatal(err)
				}
				if l.reason == "" {
					if len(d.jobs) != 1 {
						t.Fatalf("with room and a token: %d jobs handed to the dispatcher, want 1", len(d.jobs))
					}
					if !v.kind(d.jobs[0].NotRun(dispatch.ErrStartDeadline)) {
						t.Errorf("the job handed over is not a %s's", v.name)
					}
					if (got.Status.Claim != nil) != v.claimed {
						t.Errorf("claim stored: %v, want %v", got.Status.Claim != nil, v.claimed)
					}
					return
				}
				if len(d.jobs) != 0 {
					t.Errorf("held by %s: %d jobs handed to the dispatcher, want 0", l.reason, len(d.jobs))
				}
				if n := delayed() - before; n != 1 {
					t.Errorf("actionledger_delayed_total{reason=%q} grew by %v, want 1", l.reason, n)
				}
				if res.RequeueAfter <= 0 {
					t.Errorf("result %+v: want a requeue", res)
				}
				if l.brief && !v.check { // a post-check's own step is checked below
					if !equality.Semantic.DeepEqual(got.Status, xa.Status) {
						t.Errorf("held briefly by %s: status %+v; want the status as it was", l.reason, got.Status)
					}
					if l.reason == actionsv1alpha1.ReasonConcurrencyLimited && res.RequeueAfter >= 3*requeue.Room/2 {
						t.Errorf("held briefly for a slot: requeue after %v, want the waiting room's safety net "+
							"(requeue.Room, jittered): a completion wakes it first", res.RequeueAfter)
					}
					return
				}
				if !v.check {
					if got.Status.Claim != nil || reconcilingReason(got) != l.reason {
						t.Errorf("send held by %s: status %+v; want the delay recorded and no claim", l.reason, got.Status)
					}
					return
				}
				if reconcilingReason(got) != actionsv1alpha1.ReasonPostCheckPending || got.Status.Claim == nil {
					t.Errorf("post-check held by %s: status %+v; want its own status (PostCheckPending, the claim open), "+
						"the delay not recorded", l.reason, got.Status)
				}
				if l.reason == actionsv1alpha1.ReasonConcurrencyLimited &&
					(res.RequeueAfter < requeue.Room/2 || res.RequeueAfter >= 3*requeue.Room/2) {
					t.Errorf("post-check without room: requeue after %v, want the waiting room's safety net (requeue.Room, jittered)",
						res.RequeueAfter)
				}
			})
		}
	}
}

// wokenAtItsTime checks that the action key, held for a rate-limit token, waits in the destination's waiting room
// until the limiter's time, later than now, that its requeue res is only the safety net (requeue.Room, jittered,
// after that time), and that the room wakes it when the clock reaches that time, not before.
func wokenAtItsTime(t *testing.T, r *ExternalActionReconciler, d *heldDispatcher, key types.NamespacedName, now time.Time,
	res ctrl.Result) {
	t.Helper()
	until, ok := r.parts.room.Until(key)
	if !ok || !until.After(now) {
		t.Fatalf("held for a token: waiting room until %v (%v); want a time after now", until, ok)
	}
	if net := res.RequeueAfter - until.Sub(now); net < requeue.Room/2 || net >= 3*requeue.Room/2 {
		t.Errorf("held for a token until +%v: requeue after %v; want only the safety net, requeue.Room (jittered) after it",
			until.Sub(now), res.RequeueAfter)
	}
	clk := r.Clock.(*clocktesting.FakeClock)
	clk.SetTime(until.Add(-time.Millisecond))
	r.parts.room.Settle()
	if w := d.wokenKeys(); len(w) != 0 {
		t.Fatalf("woken %v before its time", w)
	}
	clk.SetTime(until)
	r.parts.room.Settle()
	if w := d.wokenKeys(); !slices.Equal(w, []types.NamespacedName{key}) {
		t.Fatalf("at its time the room woke %v; want %v", w, key)
	}
	clk.SetTime(now) // the rest of the case reads the fixture's time
}

// gateFixture is a reconciler on a fake client holding Destination shop/api (rate limit 1/s, burst 1; edit
// adjusts it) and action shop/a that POSTs to it: new, or (check) with attempt 1 uncertain, its claim expired.
func gateFixture(t *testing.T, now time.Time, edit func(*actionsv1alpha1.DestinationSpec), check, room bool) (
	*ExternalActionReconciler, *heldDispatcher, client.Client, *actionsv1alpha1.ExternalAction) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	burst := int32(1)
	dest := &actionsv1alpha1.Destination{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api"},
		Spec: actionsv1alpha1.DestinationSpec{URL: "https://api.shop.example/v1",
			RateLimit: &actionsv1alpha1.RateLimit{RequestsPerSecond: 1, Burst: &burst}}}
	if edit != nil {
		edit(&dest.Spec)
	}
	xa := &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute)),
			Finalizers: []string{actionsv1alpha1.Finalizer}},
		Spec: actionsv1alpha1.ExternalActionSpec{DestinationRef: actionsv1alpha1.DestinationReference{Name: "api"},
			Request: actionsv1alpha1.ActionRequest{Method: "POST", Path: "/charges"}},
	}
	if check {
		fp, err := fingerprint.Compute(&xa.Spec)
		if err != nil {
			t.Fatal(err)
		}
		xa.Status = actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseInProgress, Fingerprint: fp,
			IdempotencyKey: "shop/a", Attempts: 1, Claim: &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "gone",
				StartedAt: metav1.NewTime(now.Add(-50 * time.Second)), ExpiresAt: metav1.NewTime(now.Add(-10 * time.Second))}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&actionsv1alpha1.ExternalAction{}).
		WithObjects(dest, xa).Build()
	d := &heldDispatcher{room: room}
	clk := clocktesting.NewFakeClock(now)
	r := &ExternalActionReconciler{Client: c, APIReader: c, Scheme: scheme, Recorder: events.NewFakeRecorder(100), Clock: clk,
		Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: d, Options: Options{Holder: "test"}}
	r.once.Do(r.build)
	r.parts.room.Wakes(clk, d.wake)
	return r, d, c, xa
}
