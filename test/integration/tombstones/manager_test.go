package tombstones

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/tombstone"
	"github.com/actionledger/actionledger/internal/tombstone/objects"
	"github.com/actionledger/actionledger/internal/tombstone/postgres"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
	"github.com/actionledger/actionledger/test/pgtest"
)

// managed is a manager configuration for one store, and a store instance to inspect what it wrote.
type managed struct {
	name  string
	setup func(t *testing.T) (app.Options, tombstone.Store)
}

var pgLabel = map[string]string{"store": tombstone.StorePostgres}

var managers = []managed{
	{name: tombstone.StoreObjects, setup: func(t *testing.T) (app.Options, tombstone.Store) {
		return app.Options{}, &objects.Store{Client: env.Client, Reader: env.Client}
	}},
	{name: tombstone.StorePostgres, setup: func(t *testing.T) (app.Options, tombstone.Store) {
		srv := pgtest.StartT(t)
		return pgOptions(srv), openPG(t, srv.DSN())
	}},
}

func pgOptions(srv *pgtest.Server) app.Options {
	return app.Options{TombstoneStore: tombstone.StorePostgres, TombstoneStoreDSN: srv.DSN(),
		Postgres: postgres.Options{ExpireInterval: 300 * time.Millisecond, PingInterval: 500 * time.Millisecond}}
}

func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say(ns+"/"+name+" to be gone"), func() bool {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &actionsv1alpha1.ExternalAction{})
		return apierrors.IsNotFound(err)
	})
}

// objectTombstones counts the ActionTombstone objects of ns.
func objectTombstones(t *testing.T, ns string) int {
	t.Helper()
	list := &actionsv1alpha1.ActionTombstoneList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// DESIGN rules 6-8 through the real manager, the same table for both stores: a collected action leaves a
// tombstone with its outcome; the same manifest re-created inside the horizon gets that outcome back without a
// send; another body under the key is Conflict and sends nothing; after tombstoneTTL the tombstone is expired
// and the same name is a new action; an action deleted during its attempt waits for the outcome, and its
// tombstone records it.
func TestRulesSixToEight(t *testing.T) {
	for _, m := range managers {
		t.Run(m.name, func(t *testing.T) {
			ns := env.Namespace(t)
			opts, store := m.setup(t)
			srv, url := envtestutil.DestinationServer(t, destination.Options{})
			env.CreateDestination(t, ns, "billing", url, func(s *actionsv1alpha1.DestinationSpec) {
				s.Retention = &actionsv1alpha1.Retention{TombstoneTTL: &metav1.Duration{Duration: 6 * time.Second}}
			})
			slow, slowURL := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 2 * time.Second})
			env.CreateDestination(t, ns, "slow", slowURL, nil)
			env.StartManager(t, opts)
			ctx := context.Background()
			key := ns + "/invoice-7"
			manifest := func(body string) *actionsv1alpha1.ExternalAction {
				xa := envtestutil.Action(ns, "invoice-7", "billing", "/invoices", body)
				xa.Spec.TTLSecondsAfterFinished = new(int32(2))
				return xa
			}

			env.Create(t, manifest(`{"amount":100}`))
			first := env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
			waitGone(t, ns, "invoice-7")
			rec := lookup(t, store, ns, "invoice-7")
			if rec == nil || rec.Spec.Fingerprint != first.Status.Fingerprint || rec.Spec.UID != string(first.UID) ||
				rec.Spec.Phase != actionsv1alpha1.PhaseSucceeded || rec.Spec.StatusCode != 201 ||
				!rec.Spec.CompletedAt.Equal(first.Status.CompletedAt) ||
				!equality.Semantic.DeepEqual(rec.Spec.Response, first.Status.Response) {
				t.Fatalf("tombstone in %s = %+v, want the outcome of %s", m.name, rec, envtestutil.JSON(first.Status))
			}
			if m.name == tombstone.StorePostgres {
				if n := objectTombstones(t, ns); n != 0 {
					t.Errorf("%d ActionTombstone objects written with the postgres store, want 0", n)
				}
			}

			// Rule 7: same manifest, new UID, inside the horizon: the recorded outcome, nothing sent.
			env.Create(t, manifest(`{"amount":100}`))
			replayed := env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
			if replayed.Status.ReplayedFrom == nil || replayed.Status.ReplayedFrom.UID != string(first.UID) ||
				replayed.Status.Attempts != 0 || !equality.Semantic.DeepEqual(replayed.Status.Response, first.Status.Response) {
				t.Fatalf("re-created object's status = %s, want a replay of %s", envtestutil.JSON(replayed.Status), first.UID)
			}
			if n := srv.Requests(key); n != 1 {
				t.Fatalf("destination received %d requests after the replay, want 1", n)
			}
			waitGone(t, ns, "invoice-7")

			// Rule 6: another body under the key is Conflict; nothing is sent; the tombstone stays the original's.
			env.Create(t, manifest(`{"amount":200}`))
			conflict := env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseConflict, 30*time.Second)
			if n := srv.Requests(key); n != 1 {
				t.Fatalf("destination received %d requests after the conflicting re-create, want 1", n)
			}
			if err := env.Client.Delete(ctx, conflict); err != nil {
				t.Fatal(err)
			}
			waitGone(t, ns, "invoice-7")
			if rec := lookup(t, store, ns, "invoice-7"); rec == nil || rec.Spec.Fingerprint != first.Status.Fingerprint {
				t.Fatalf("after the Conflict object went the tombstone is %+v, want the original's", rec)
			}

			// After tombstoneTTL the tombstone is expired, and the same name is a new action: sent once more.
			envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the tombstone to expire"), func() bool {
				return lookup(t, store, ns, "invoice-7") == nil
			})
			env.Create(t, manifest(`{"amount":100}`))
			fresh := env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
			if fresh.Status.ReplayedFrom != nil || srv.Requests(key) != 2 {
				t.Fatalf("after the horizon: replayedFrom %+v, requests %d; want a new action, sent", fresh.Status.ReplayedFrom, srv.Requests(key))
			}

			// Rule 8: deleted while its attempt is open, the action waits for the outcome; the tombstone records it.
			env.Create(t, envtestutil.Action(ns, "refund-9", "slow", "/refunds", `{"amount":5}`))
			env.WaitFor(t, ns, "refund-9", 30*time.Second, "an open claim", func(xa *actionsv1alpha1.ExternalAction) bool {
				return xa.Status.Claim != nil
			})
			if err := env.Client.Delete(ctx, envtestutil.Action(ns, "refund-9", "slow", "", "")); err != nil {
				t.Fatal(err)
			}
			waitGone(t, ns, "refund-9")
			if rec := lookup(t, store, ns, "refund-9"); rec == nil || rec.Spec.Phase != actionsv1alpha1.PhaseSucceeded || rec.Spec.StatusCode != 201 {
				t.Fatalf("tombstone of the action deleted during its attempt = %+v, want Succeeded 201", rec)
			}
			if n := slow.Requests(ns + "/refund-9"); n != 1 {
				t.Fatalf("slow destination received %d requests, want 1", n)
			}
		})
	}
}

// sample sums the gauge or counter samples of name whose labels include want, from the manager's registry (the
// manager runs in this process); -1 when there is none.
func sample(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := ctrlmetrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatal(err)
	}
	v, found := 0.0, false
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, val := range want {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == val }) {
					continue next
				}
			}
			found = true
			v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	if !found {
		return -1
	}
	return v
}

// While PostgreSQL is down, a first send waits (Reconciling, reason TombstoneStoreUnavailable; the metric says
// the store is down) and nothing reaches the destination; an action past its first sight keeps going (its
// retry needs no lookup). Once PostgreSQL is back, the waiting action is looked up and sent, once.
func TestPostgresDownFirstSendWaits(t *testing.T) {
	ns := env.Namespace(t)
	pg := pgtest.StartT(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "svc", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: new(int32(3)),
			InitialBackoff: &metav1.Duration{Duration: 3 * time.Second}, Jitter: actionsv1alpha1.JitterNone}
	})
	env.StartManager(t, pgOptions(pg))

	env.Create(t, envtestutil.Action(ns, "warm", "svc", "/orders", `{"n":0}`))
	env.WaitPhase(t, ns, "warm", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	srv.Script(ns+"/retrying", destination.Step{Status: 503})
	env.Create(t, envtestutil.Action(ns, "retrying", "svc", "/orders", `{"n":1}`))
	env.WaitFor(t, ns, "retrying", 30*time.Second, "its first attempt", func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.Attempts == 1
	})

	if err := pg.Shutdown(); err != nil {
		t.Fatal(err)
	}
	key := ns + "/new-1"
	env.Create(t, envtestutil.Action(ns, "new-1", "svc", "/orders", `{"n":2}`))
	waiting := env.WaitFor(t, ns, "new-1", 30*time.Second, "reason TombstoneStoreUnavailable", func(xa *actionsv1alpha1.ExternalAction) bool {
		c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == actionsv1alpha1.ReasonTombstoneStoreUnavailable
	})
	if waiting.Status.Fingerprint != "" || waiting.Status.Attempts != 0 || waiting.Status.Phase != actionsv1alpha1.PhasePending {
		t.Errorf("waiting action's status = %s, want Pending with no fingerprint bound and no attempt", envtestutil.JSON(waiting.Status))
	}
	env.WaitEvent(t, ns, "new-1", corev1.EventTypeWarning, actionsv1alpha1.ReasonTombstoneStoreUnavailable, 15*time.Second)
	if v := sample(t, "actionledger_tombstone_store_up", pgLabel); v != 0 {
		t.Errorf("actionledger_tombstone_store_up{store=postgres} = %v while the database is down, want 0", v)
	}
	if v := sample(t, "actionledger_tombstone_store_errors_total", map[string]string{"store": tombstone.StorePostgres, "op": "lookup"}); v < 1 {
		t.Errorf("actionledger_tombstone_store_errors_total{store=postgres,op=lookup} = %v, want failed lookups counted", v)
	}
	// The action past its first sight retries and finishes while the database is down.
	env.WaitPhase(t, ns, "retrying", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	envtestutil.Consistently(t, 3*time.Second, envtestutil.Say("no request for the action whose lookup is unanswered"),
		func() bool { return srv.Requests(key) == 0 })

	if err := pg.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	env.WaitPhase(t, ns, "new-1", actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	if n := srv.Requests(key); n != 1 {
		t.Fatalf("destination received %d requests for %s, want 1", n, key)
	}
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the store gauge to be 1 again"), func() bool {
		return sample(t, "actionledger_tombstone_store_up", pgLabel) == 1
	})
}

// An outage of PostgreSQL is an expected wait (docs/tombstones.md): while it lasts, neither a first send
// waiting for its lookup nor a finished action due for collection logs an error or a stack trace (the manager
// requeues them without returning an error to controller-runtime), the manager logs one line when the store
// becomes unreachable and one when it is back, with the number of actions that waited, and both actions go
// on once it is back.
func TestPostgresOutageLogsNoErrors(t *testing.T) {
	ns := env.Namespace(t)
	pg := pgtest.StartT(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "svc", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Retention = &actionsv1alpha1.Retention{TTLAfterFinished: &metav1.Duration{Duration: 3 * time.Second}}
	})
	out := &envtestutil.SyncBuffer{}
	o := pgOptions(pg)
	o.Logger = zap.New(zap.WriteTo(out), zap.JSONEncoder(), zap.Level(zapcore.InfoLevel), zap.StacktraceLevel(zapcore.ErrorLevel))
	env.StartManager(t, o)

	env.Create(t, envtestutil.Action(ns, "due", "svc", "/orders", `{"n":1}`))
	done := env.WaitPhase(t, ns, "due", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if err := pg.Shutdown(); err != nil {
		t.Fatal(err)
	}
	fresh := envtestutil.Action(ns, "new-1", "svc", "/orders", `{"n":2}`)
	// Kept for 5 minutes once it succeeds: the wait for it below must not race its own collection on a loaded
	// machine (the Destination's retention is 3 s).
	fresh.Spec.TTLSecondsAfterFinished = new(int32(300))
	env.Create(t, fresh)
	// The collection is due 3 s after the outcome; it waits for the store for 5 s more.
	until := done.Status.ExpiresAt.Add(5 * time.Second)
	envtestutil.Consistently(t, time.Until(until), envtestutil.Say("the due action kept while its tombstone cannot be written"), func() bool {
		return env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "due"}, &actionsv1alpha1.ExternalAction{}) == nil
	})
	log := out.String()
	errs, traces := strings.Count(log, `"level":"error"`), strings.Count(log, `"stacktrace"`)
	t.Logf("during the outage: %d ERROR lines, %d stack traces", errs, traces)
	if errs != 0 || traces != 0 {
		t.Errorf("%d ERROR lines and %d stack traces in the manager's log during the outage, want 0:\n%s", errs, traces, firstLines(log, `"level":"error"`, 3))
	}
	if n := strings.Count(log, "Tombstone store became unreachable"); n != 1 {
		t.Errorf("%d lines saying the store became unreachable, want 1", n)
	}

	if err := pg.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "due")
	env.WaitPhase(t, ns, "new-1", actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	log = out.String()
	back := firstLines(log, "Tombstone store is reachable again", 5)
	if n := strings.Count(log, "Tombstone store is reachable again"); n != 1 || !strings.Contains(back, `"waitingActions":2`) {
		t.Errorf("%d lines saying the store is back, want 1 with waitingActions 2 (the lookup and the collection): %s", n, back)
	}
	if n := strings.Count(log, `"level":"error"`); n != 0 {
		t.Errorf("%d ERROR lines in the manager's log, want 0:\n%s", n, firstLines(log, `"level":"error"`, 3))
	}
}

// firstLines returns up to n lines of log that contain s.
func firstLines(log, s string, n int) string {
	var out []string
	for l := range strings.Lines(log) {
		if strings.Contains(l, s) && len(out) < n {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
