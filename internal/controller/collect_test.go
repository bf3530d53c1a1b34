//go:build !unit

package controller_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/controller"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// listActions lists the actions of ns (a LIST: the API server's GET counts stay the manager's).
func listActions(t *testing.T, ns string) []actionsv1alpha1.ExternalAction {
	t.Helper()
	var l actionsv1alpha1.ExternalActionList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing actions: %v", err)
	}
	return l.Items
}

// waitSucceeded waits until n actions of ns are Succeeded, each after exactly attempts attempts (0: any number).
func waitSucceeded(t *testing.T, ns string, n int, attempts int32) {
	t.Helper()
	envtestutil.Eventually(t, 60*time.Second, envtestutil.Say(fmt.Sprintf("%d actions Succeeded", n)), func() bool {
		done := 0
		for _, xa := range listActions(t, ns) {
			if xa.Status.Phase == actionsv1alpha1.PhaseSucceeded && (attempts == 0 || xa.Status.Attempts == attempts) {
				done++
			}
		}
		return done == n
	})
}

func listTombstones(t *testing.T, ns string) []actionsv1alpha1.ActionTombstone {
	t.Helper()
	var l actionsv1alpha1.ActionTombstoneList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing tombstones: %v", err)
	}
	return l.Items
}

// requestCounts reads the API server's request counters that collection is judged by.
type requestCounts struct {
	actionGets, actionDeletes, actionPatches, tombstoneCreates, tombstoneUpdates, tombstoneGets float64
}

func readCounts(t *testing.T) requestCounts {
	t.Helper()
	return requestCounts{
		actionGets:       env.RequestCount(t, "externalactions", "GET", ""),
		actionDeletes:    env.RequestCount(t, "externalactions", "DELETE", ""),
		actionPatches:    env.RequestCount(t, "externalactions", "PATCH", ""),
		tombstoneCreates: env.RequestCount(t, "actiontombstones", "POST", ""),
		tombstoneUpdates: env.RequestCount(t, "actiontombstones", "PUT", ""),
		tombstoneGets:    env.RequestCount(t, "actiontombstones", "GET", ""),
	}
}

// offsetClock is the real clock moved forward by offset: timers stay real, so everything of the manager runs as
// usual, and a step of offset makes finished actions due at once.
type offsetClock struct {
	clock.RealClock
	offset atomic.Int64
}

func (c *offsetClock) Now() time.Time                  { return c.RealClock.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// n finished actions become due for collection (the manager's clock passes their expiresAt, then an annotation
// wakes each one), and what their collection costs is counted by the real API server: no read of an action (no
// GET of externalactions), one tombstone write per action (one POST, no AlreadyExists from a second write, no
// PUT, no read of the tombstone), and the finalizer protocol's two writes (the delete and the finalizer's
// removal), each tombstone bound to its action's identity and outcome.
func TestCollectionWritesOneTombstoneAndReadsNoAction(t *testing.T) {
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "billing", url, nil)
	clk := &offsetClock{}
	// The API server's request counts are global: the manager is a shard that watches only this test's actions
	// (the label selector), so what earlier tests left, due too on this clock, is not collected by it.
	startOwnShard(t, ns, app.Options{Clock: clk})
	ctx := context.Background()
	const n = 6
	for i := range n {
		xa := ownShard(ns, envtestutil.Action(ns, fmt.Sprintf("invoice-%d", i), "billing", "/invoices", `{"amount":1}`))
		xa.Spec.TTLSecondsAfterFinished = new(int32(600))
		env.Create(t, xa)
	}
	waitSucceeded(t, ns, n, 0)
	// Counted before the clock moves: a reconcile already under way (a watch event of the last status write)
	// may collect an action as soon as it is due.
	before := readCounts(t)
	clk.offset.Store(int64(601 * time.Second))
	for _, xa := range listActions(t, ns) {
		patch := client.MergeFrom(xa.DeepCopy())
		xa.Annotations = map[string]string{"example.com/wake": "now"}
		if err := env.Client.Patch(ctx, &xa, patch); err != nil {
			t.Fatal(err)
		}
	}
	envtestutil.Eventually(t, 60*time.Second, envtestutil.Say(fmt.Sprintf("%d actions collected, %d tombstones", n, n)), func() bool {
		return len(listActions(t, ns)) == 0 && len(listTombstones(t, ns)) == n
	})
	after := readCounts(t)
	if d := after.actionGets - before.actionGets; d != 0 {
		t.Errorf("%v GETs of ExternalActions to collect %d, want 0 (collection decides on the cached copy)", d, n)
	}
	if d := after.tombstoneCreates - before.tombstoneCreates; d != n {
		t.Errorf("%v tombstone creates for %d actions, want one each", d, n)
	}
	if d := after.tombstoneUpdates - before.tombstoneUpdates; d != 0 {
		t.Errorf("%v tombstone updates, want 0", d)
	}
	if d := after.tombstoneGets - before.tombstoneGets; d != 0 {
		t.Errorf("%v tombstone GETs, want 0 (no second write reads it back)", d)
	}
	if d := after.actionDeletes - before.actionDeletes; d != n {
		t.Errorf("%v deletes of ExternalActions, want %d (one collection each)", d, n)
	}
	if d := after.actionPatches - before.actionPatches - n; d != n {
		t.Errorf("%v patches of ExternalActions besides the test's %d annotations, want %d (the finalizer's removal)", d, n, n)
	}
	for _, ts := range listTombstones(t, ns) {
		if ts.Spec.Phase != actionsv1alpha1.PhaseSucceeded || ts.Spec.UID == "" || ts.Spec.Response == nil ||
			ts.Spec.Response.Body == "" {
			t.Errorf("tombstone %s = %+v, want the Succeeded outcome with its uid and response body", ts.Name, ts.Spec)
		}
	}
}

// newStale serves the ExternalAction of snapshot's name from snapshot (a cache that has not seen the newest
// version); everything else goes to live.
func newStale(live client.WithWatch, snapshot *actionsv1alpha1.ExternalAction) client.WithWatch {
	return interceptor.NewClient(live, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey,
		obj client.Object, opts ...client.GetOption) error {
		if x, ok := obj.(*actionsv1alpha1.ExternalAction); ok && key.Name == snapshot.Name && key.Namespace == snapshot.Namespace {
			snapshot.DeepCopyInto(x)
			return nil
		}
		return c.Get(ctx, key, obj, opts...)
	}})
}

// A reconcile that decides collection on a stale cached copy (trimmed, as the manager's cache holds finished
// actions) deletes nothing that changed since: the delete's resourceVersion precondition refuses a changed object
// and its UID precondition a re-created one of the same name. The live object stays, without a deletion mark,
// and collection reads nothing from the API server.
func TestCollectionFromAStaleCopyDeletesNoChangedObject(t *testing.T) {
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "billing", url, nil)
	ctx := context.Background()
	live, err := client.NewWithWatch(env.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	reader := interceptor.NewClient(live, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey,
		obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*actionsv1alpha1.ExternalAction); ok {
			reads.Add(1)
		}
		return c.Get(ctx, key, obj, opts...)
	}})
	reconciler := func(c client.Client) *controller.ExternalActionReconciler {
		return &controller.ExternalActionReconciler{
			Client: controller.GuardTrimmed(c), APIReader: reader, Scheme: app.Scheme, Recorder: fakeEventRecorder(), Clock: clock.RealClock{},
			Executor: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy())),
			Limiter:  limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &controller.InlineDispatcher{Clock: clock.RealClock{}},
			Options: controller.Options{Holder: "stale-test", ClaimMargin: time.Second},
		}
	}
	xa := envtestutil.Action(ns, "invoice", "billing", "/invoices", `{"amount":1}`)
	xa.Spec.TTLSecondsAfterFinished = new(int32(0))
	env.Create(t, xa)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(xa)}
	fresh := reconciler(live)
	for range 6 {
		if env.Get(t, ns, "invoice").Status.Phase == actionsv1alpha1.PhaseSucceeded {
			break
		}
		if _, err := fresh.Reconcile(ctx, req); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	done := env.Get(t, ns, "invoice")
	if done.Status.Phase != actionsv1alpha1.PhaseSucceeded {
		t.Fatalf("phase %s, want Succeeded", done.Status.Phase)
	}
	trimmed, err := controller.TrimFinished(done.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	snapshot := trimmed.(*actionsv1alpha1.ExternalAction)

	// collectTwice runs the two reconciles of a collection (the turn at CollectPriority, then the delete) on the
	// stale copy and asserts that the live object is still there, not being deleted, and that nothing was read.
	collectTwice := func(what string) {
		t.Helper()
		stale := reconciler(newStale(live, snapshot))
		reads.Store(0)
		for range 2 {
			if _, err := stale.Reconcile(ctx, req); err != nil {
				t.Fatalf("%s: reconcile on the stale copy: %v", what, err)
			}
		}
		cur := env.Get(t, ns, "invoice")
		if !cur.DeletionTimestamp.IsZero() {
			t.Fatalf("%s: a stale copy (resourceVersion %s, uid %s) deleted the object at resourceVersion %s, uid %s", what,
				snapshot.ResourceVersion, snapshot.UID, cur.ResourceVersion, cur.UID)
		}
		if n := reads.Load(); n != 0 {
			t.Errorf("%s: collection read %d ExternalAction(s) from the API server, want 0", what, n)
		}
	}

	// The object changed after the cache's copy: a label added by a person.
	cur := env.Get(t, ns, "invoice")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Labels = map[string]string{"team": "billing"}
	if err := env.Client.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	collectTwice("changed object")

	// The object was deleted and a new one of the same name created (no status yet): the old UID deletes nothing.
	patch = client.MergeFrom(cur.DeepCopy())
	controllerutil.RemoveFinalizer(cur, actionsv1alpha1.Finalizer)
	if err := env.Client.Patch(ctx, cur, patch); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, cur); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the first object gone"), func() bool {
		err := env.Client.Get(ctx, req.NamespacedName, &actionsv1alpha1.ExternalAction{})
		return apierrors.IsNotFound(err)
	})
	again := envtestutil.Action(ns, "invoice", "billing", "/invoices", `{"amount":1}`)
	controllerutil.AddFinalizer(again, actionsv1alpha1.Finalizer)
	env.Create(t, again)
	collectTwice("re-created object")

	// The same two reconciles on the current copy collect it: the preconditions, not the reconciler, held back.
	snapshot = env.Get(t, ns, "invoice")
	snapshot.Status = *done.Status.DeepCopy()
	current := reconciler(newStale(live, snapshot))
	for range 2 {
		if _, err := current.Reconcile(ctx, req); err != nil {
			t.Fatalf("reconcile on the current copy: %v", err)
		}
	}
	if env.Get(t, ns, "invoice").DeletionTimestamp.IsZero() {
		t.Fatal("the current copy did not collect the object")
	}
}

// deleteGate holds the first delete of an ExternalAction (a collection) until released, then records, for every
// later delete, whether the awaited send had reached the destination.
type deleteGate struct {
	armed    atomic.Bool
	once     sync.Once
	blocked  chan struct{}
	release  chan struct{}
	sent     func() bool
	mu       sync.Mutex
	deletes  int // after the release
	tooEarly int // of them, before the send
}

// gatedClient is the manager's client with deletes through gate.
type gatedClient struct {
	client.Client
	gate *deleteGate
}

func (c gatedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.gate.delete(ctx, c.Client, obj, opts...)
}

func (g *deleteGate) delete(ctx context.Context, c client.Client, obj client.Object, opts ...client.DeleteOption) error {
	if _, ok := obj.(*actionsv1alpha1.ExternalAction); ok && g.armed.Load() {
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.blocked)
			<-g.release
		} else {
			g.mu.Lock()
			g.deletes++
			if !g.sent() {
				g.tooEarly++
			}
			g.mu.Unlock()
		}
	}
	return c.Delete(ctx, obj, opts...)
}

// A send is not queued behind a backlog of collections. One worker; a backlog of finished actions made due for
// collection (their ttlSecondsAfterFinished set to 0); the first collection's delete is held while a new action
// is created; once released, the worker claims and sends the new action before it deletes any other action of
// the backlog. The assertion is on order (which delete came before the send), never on time.
func TestSendIsNotQueuedBehindCollection(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "billing", url, nil)
	ctx := context.Background()
	newKey := ns + "/urgent" // the default key format, {namespace}/{name}
	gate := &deleteGate{blocked: make(chan struct{}), release: make(chan struct{}), sent: func() bool { return srv.Requests(newKey) > 0 }}

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: app.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{&actionsv1alpha1.ExternalAction{}: {Transform: controller.TrimFinished}}}})
	if err != nil {
		t.Fatal(err)
	}
	r := &controller.ExternalActionReconciler{
		Client:    controller.GuardTrimmed(gatedClient{Client: mgr.GetClient(), gate: gate}),
		APIReader: mgr.GetAPIReader(), Scheme: app.Scheme, Recorder: fakeEventRecorder(), Clock: clock.RealClock{},
		Executor: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy())),
		Limiter:  limiter.NewRegistry(), Exprs: expr.NewCache(16), Dispatcher: &controller.InlineDispatcher{Clock: clock.RealClock{}},
		// CollectionRate 0: no collection goes in line with the sends, so every one of the backlog waits.
		Options: controller.Options{Holder: "priority-test", ClaimMargin: time.Second, MaxConcurrentReconciles: 1, SkipNameValidation: true,
			CollectionRate: new(0.0)},
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := mgr.Start(mctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-stopped })

	const backlog = 12
	for i := range backlog {
		env.Create(t, envtestutil.Action(ns, fmt.Sprintf("old-%02d", i), "billing", "/invoices", `{"amount":1}`))
	}
	envtestutil.Eventually(t, 60*time.Second, envtestutil.Say("the backlog Succeeded"), func() bool {
		items := listActions(t, ns)
		for i := range items {
			if items[i].Status.Phase != actionsv1alpha1.PhaseSucceeded {
				return false
			}
		}
		return len(items) == backlog
	})
	gate.armed.Store(true)
	for _, xa := range listActions(t, ns) {
		patch := client.MergeFrom(xa.DeepCopy())
		xa.Spec.TTLSecondsAfterFinished = new(int32(0))
		if err := env.Client.Patch(ctx, &xa, patch); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-gate.blocked:
	case <-time.After(60 * time.Second):
		t.Fatal("no collection began")
	}
	// The worker is held inside a collection; the new action's create reaches the manager's cache (and its queue).
	env.Create(t, envtestutil.Action(ns, "urgent", "billing", "/invoices", `{"amount":2}`))
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the new action in the manager's cache"), func() bool {
		return mgr.GetCache().Get(ctx, client.ObjectKey{Namespace: ns, Name: "urgent"}, &actionsv1alpha1.ExternalAction{}) == nil
	})
	close(gate.release)
	envtestutil.Eventually(t, 60*time.Second, envtestutil.Say("the backlog collected and the new action sent"), func() bool {
		return len(listActions(t, ns)) <= 1 && gate.sent()
	})
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if gate.deletes != backlog-1 {
		t.Errorf("%d deletes after the held one, want %d (the rest of the backlog)", gate.deletes, backlog-1)
	}
	if gate.tooEarly != 0 {
		t.Errorf("%d of the backlog's %d collections ran before the new action was sent, want none", gate.tooEarly, gate.deletes)
	}
}
