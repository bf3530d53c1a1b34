// Package retention tests garbage collection of finished actions, tombstones and the replay horizon
// (DESIGN rules 7 and 8, case C14) against a real kube-apiserver and etcd.
package retention

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/metrics"
	tombstonestore "github.com/actionledger/actionledger/internal/tombstone"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// env is the real control plane shared by this package's tests.
var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

func ttl(sec int32) *int32 { return new(sec) }

func retention(tombstoneTTL time.Duration) func(*actionsv1alpha1.DestinationSpec) {
	return func(s *actionsv1alpha1.DestinationSpec) {
		s.Retention = &actionsv1alpha1.Retention{TombstoneTTL: &metav1.Duration{Duration: tombstoneTTL}}
	}
}

// waitGone waits until the action no longer exists.
func waitGone(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	envtestutil.Eventually(t, timeout, envtestutil.Say(ns+"/"+name+" to be gone"), func() bool {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &actionsv1alpha1.ExternalAction{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("get %s/%s: %v", ns, name, err)
		}
		return apierrors.IsNotFound(err)
	})
}

// tombstone reads the tombstone of ns/name, or returns nil when there is none.
func tombstone(t *testing.T, ns, name string) *actionsv1alpha1.ActionTombstone {
	t.Helper()
	ts := &actionsv1alpha1.ActionTombstone{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get tombstone %s/%s: %v", ns, name, err)
	}
	return ts
}

// checkTombstone asserts the tombstone carries the finished object's identity and outcome, and that it was
// written no earlier than the object's expiry (the finalizer writes it after collection deleted the object).
func checkTombstone(t *testing.T, ts *actionsv1alpha1.ActionTombstone, xa *actionsv1alpha1.ExternalAction, collected bool) {
	t.Helper()
	if ts == nil {
		t.Fatalf("no tombstone for %s/%s", xa.Namespace, xa.Name)
	}
	s := ts.Spec
	if s.Key != xa.Status.IdempotencyKey || s.Fingerprint != xa.Status.Fingerprint || s.Phase != xa.Status.Phase ||
		s.UID != string(xa.UID) || !s.CompletedAt.Equal(xa.Status.CompletedAt) ||
		xa.Status.Response == nil || s.StatusCode != xa.Status.Response.StatusCode {
		t.Errorf("tombstone %s/%s = %s, want the identity and outcome of %s", ts.Namespace, ts.Name, envtestutil.JSON(s), envtestutil.JSON(xa.Status))
	}
	if !s.ExpiresAt.After(s.CompletedAt.Time) {
		t.Errorf("tombstone expiresAt %s is not after completedAt %s", s.ExpiresAt, s.CompletedAt)
	}
	if collected && ts.CreationTimestamp.Before(xa.Status.ExpiresAt) {
		t.Errorf("%s/%s was collected early: tombstone written at %s, object expired at %s",
			xa.Namespace, xa.Name, ts.CreationTimestamp, xa.Status.ExpiresAt)
	}
}

// rawTombstone GETs the tombstone as the API server serves it (the JSON it stores in etcd, plus resourceVersion).
func rawTombstone(t *testing.T, ns, name string) []byte {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/%s/namespaces/%s/actiontombstones/%s", strings.TrimSuffix(env.Config.Host, "/"),
		actionsv1alpha1.GroupVersion.Group, actionsv1alpha1.GroupVersion.Version, ns, name)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("raw GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}

// etcdValueSize reads the tombstone's value straight from etcd (its JSON gateway, /v3/kv/range) and returns its
// size in bytes, or -1 when etcd cannot be asked.
func etcdValueSize(t *testing.T, ns, name string) int {
	t.Helper()
	u := env.Env.ControlPlane.Etcd.URL
	if u == nil {
		return -1
	}
	key := fmt.Sprintf("/registry/%s/actiontombstones/%s/%s", actionsv1alpha1.GroupVersion.Group, ns, name)
	body := fmt.Sprintf(`{"key":%q}`, base64.StdEncoding.EncodeToString([]byte(key)))
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, u.String()+"/v3/kv/range", strings.NewReader(body))
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		KVs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.KVs) != 1 {
		return -1
	}
	v, err := base64.StdEncoding.DecodeString(out.KVs[0].Value)
	if err != nil {
		return -1
	}
	return len(v)
}

// C14: ttlSecondsAfterFinished collects the object (not before its expiry) and leaves a tombstone; the same
// manifest re-created inside the horizon replays the outcome without a send; another body is Conflict; after
// tombstoneTTL the tombstone is collected and the same name is a new action, sent once more.
func TestTTLTombstoneReplayAndHorizon(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "billing", url, retention(6*time.Second))
	env.StartManager(t, app.Options{})
	ctx := context.Background()
	key := ns + "/invoice-7"
	manifest := func(body string) *actionsv1alpha1.ExternalAction {
		xa := envtestutil.Action(ns, "invoice-7", "billing", "/invoices", body)
		xa.Spec.TTLSecondsAfterFinished = ttl(2)
		return xa
	}

	env.Create(t, manifest(`{"amount":100}`))
	first := env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	// It still exists right after Succeeded, and expires exactly ttlSecondsAfterFinished after completedAt.
	if first.Status.CompletedAt == nil || first.Status.ExpiresAt == nil ||
		first.Status.ExpiresAt.Sub(first.Status.CompletedAt.Time) != 2*time.Second {
		t.Fatalf("completedAt %v, expiresAt %v: want expiresAt = completedAt + 2s", first.Status.CompletedAt, first.Status.ExpiresAt)
	}
	waitGone(t, ns, "invoice-7", 30*time.Second)
	ts := tombstone(t, ns, "invoice-7")
	checkTombstone(t, ts, first, true)
	if ts.Spec.Key != key || ts.Spec.Phase != actionsv1alpha1.PhaseSucceeded || ts.Spec.StatusCode != 201 {
		t.Errorf("tombstone = %s", envtestutil.JSON(ts.Spec))
	}
	if d := ts.Spec.ExpiresAt.Sub(ts.CreationTimestamp.Time); d < 5*time.Second || d > 7*time.Second {
		t.Errorf("tombstone horizon = %s after it was written, want tombstoneTTL 6s", d)
	}

	// Bytes per tombstone, as stored (the API server stores custom resources as JSON in etcd).
	raw := rawTombstone(t, ns, "invoice-7")
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	delete(obj["metadata"].(map[string]any), "managedFields")
	lean, _ := json.Marshal(obj)
	specJSON, _ := json.Marshal(ts.Spec)
	t.Logf("tombstone size: %d bytes as served (with managedFields), %d without managedFields, spec %d, etcd value %d (key %d chars of namespace+name)",
		len(raw), len(lean), len(specJSON), etcdValueSize(t, ns, "invoice-7"), len(ns)+len("invoice-7"))
	if len(raw) > 2048 {
		t.Errorf("a tombstone takes %d bytes; it should stay small (< 2 KiB)", len(raw))
	}

	// Same manifest, new UID, inside the horizon: the recorded outcome, nothing sent (C14).
	env.Create(t, manifest(`{"amount":100}`))
	replayed := env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if replayed.UID == first.UID || replayed.Status.ReplayedFrom == nil || replayed.Status.ReplayedFrom.UID != string(first.UID) {
		t.Fatalf("re-created object: uid %s, replayedFrom %+v; want replayedFrom.uid %s", replayed.UID, replayed.Status.ReplayedFrom, first.UID)
	}
	if replayed.Status.Attempts != 0 || replayed.Status.Response == nil || replayed.Status.Response.StatusCode != 201 {
		t.Errorf("replayed status = %s", envtestutil.JSON(replayed.Status))
	}
	if n := srv.Requests(key); n != 1 {
		t.Fatalf("destination received %d requests for %s after the replay, want 1", n, key)
	}
	// The replayed copy is collected too; its going extends the horizon, and the tombstone still names the original.
	waitGone(t, ns, "invoice-7", 30*time.Second)
	ts2 := tombstone(t, ns, "invoice-7")
	checkTombstone(t, ts2, first, false)
	if !ts2.Spec.ExpiresAt.After(ts.Spec.ExpiresAt.Time) {
		t.Errorf("tombstone expiresAt %s after the replayed copy went, want later than %s", ts2.Spec.ExpiresAt, ts.Spec.ExpiresAt)
	}

	// Another body under the same name: Conflict, a Warning Event, no request; the tombstone is left as it was.
	env.Create(t, manifest(`{"amount":200}`))
	conflict := env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseConflict, 30*time.Second)
	if conflict.Status.ExpiresAt != nil {
		t.Errorf("a Conflict object has expiresAt %s; it must wait for its owner", conflict.Status.ExpiresAt)
	}
	env.WaitEvent(t, ns, "invoice-7", corev1.EventTypeWarning, actionsv1alpha1.ReasonFingerprintConflict, 15*time.Second)
	if n := srv.Requests(key); n != 1 {
		t.Fatalf("destination received %d requests after the conflicting re-create, want 1", n)
	}
	if err := env.Client.Delete(ctx, conflict); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "invoice-7", 30*time.Second)
	if ts3 := tombstone(t, ns, "invoice-7"); ts3 == nil || ts3.Spec.Fingerprint != first.Status.Fingerprint || ts3.Spec.UID != string(first.UID) {
		t.Fatalf("after deleting the Conflict object the tombstone is %+v, want the original's", ts3)
	}

	// After tombstoneTTL the tombstone is collected, and the same name is a new action: sent once more.
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the tombstone to be collected"), func() bool { return tombstone(t, ns, "invoice-7") == nil })
	if now := time.Now(); now.Before(ts2.Spec.ExpiresAt.Time) {
		t.Fatalf("tombstone collected at %s, before its expiresAt %s", now, ts2.Spec.ExpiresAt)
	}
	env.Create(t, manifest(`{"amount":100}`))
	fresh := env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if fresh.Status.ReplayedFrom != nil || fresh.Status.Attempts != 1 {
		t.Errorf("after the horizon: replayedFrom %+v, attempts %d; want a new action", fresh.Status.ReplayedFrom, fresh.Status.Attempts)
	}
	if n := srv.Requests(key); n != 2 {
		t.Fatalf("destination received %d requests after the horizon, want 2 (the same key is a new action)", n)
	}
}

// DESIGN rule 8: an action deleted by hand while its attempt is open keeps its finalizer until the outcome is
// recorded; then the tombstone is written; then the object goes.
func TestDeleteWaitsForOpenClaim(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 2 * time.Second})
	env.CreateDestination(t, ns, "slow", url, retention(time.Hour))
	env.StartManager(t, app.Options{})
	ctx := context.Background()
	key := ns + "/refund-9"

	env.Create(t, envtestutil.Action(ns, "refund-9", "slow", "/refunds", `{"amount":5}`))
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the request to reach the destination"), func() bool { return srv.Requests(key) == 1 })
	xa := env.Get(t, ns, "refund-9")
	if err := env.Client.Delete(ctx, xa); err != nil {
		t.Fatal(err)
	}
	held := env.Get(t, ns, "refund-9")
	// Checked after the read: the destination had not committed yet, so the outcome cannot have been recorded.
	if srv.Effects(key) != 0 {
		t.Fatalf("the destination committed before the deletion was observed; CommitDelay too short for this machine")
	}
	if held.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(held, actionsv1alpha1.Finalizer) ||
		held.Status.Claim == nil || held.Status.Phase != actionsv1alpha1.PhaseInProgress {
		t.Fatalf("while the attempt is open: deletionTimestamp %v, finalizers %v, claim %+v, phase %s",
			held.DeletionTimestamp, held.Finalizers, held.Status.Claim, held.Status.Phase)
	}
	if tombstone(t, ns, "refund-9") != nil {
		t.Fatalf("a tombstone was written before the outcome was known")
	}

	waitGone(t, ns, "refund-9", 30*time.Second)
	ts := tombstone(t, ns, "refund-9") // written before the finalizer went, so present the moment the object is gone
	if ts == nil {
		t.Fatal("the object is gone without a tombstone")
	}
	if ts.Spec.Phase != actionsv1alpha1.PhaseSucceeded || ts.Spec.StatusCode != 201 || ts.Spec.UID != string(xa.UID) ||
		ts.Spec.Key != key || ts.Spec.CompletedAt == nil || ts.Spec.Fingerprint == "" {
		t.Errorf("tombstone = %s, want the recorded outcome (Succeeded, 201) of uid %s", envtestutil.JSON(ts.Spec), xa.UID)
	}
	if r, e := srv.Requests(key), srv.Effects(key); r != 1 || e != 1 {
		t.Errorf("destination: %d requests, %d effects; want 1 and 1", r, e)
	}
}

// A manager restart in the middle of collection loses no tombstone and deletes nothing early.
func TestRestartDuringCollection(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "bulk", url, retention(time.Hour))
	stop := env.StartManager(t, app.Options{})

	const n = 10
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("order-%d", i)
		xa := envtestutil.Action(ns, names[i], "bulk", "/orders", fmt.Sprintf(`{"n":%d}`, i))
		xa.Spec.TTLSecondsAfterFinished = ttl(3)
		env.Create(t, xa)
	}
	done := map[string]*actionsv1alpha1.ExternalAction{}
	envtestutil.Eventually(t, 60*time.Second, envtestutil.Say("all actions to succeed"), func() bool {
		for _, name := range names {
			if done[name] != nil {
				continue
			}
			xa := &actionsv1alpha1.ExternalAction{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, xa); err != nil {
				t.Fatalf("get %s: %v", name, err)
			}
			if xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
				done[name] = xa
			}
		}
		return len(done) == n
	})
	stop()
	env.StartManager(t, app.Options{})

	for _, name := range names {
		waitGone(t, ns, name, 60*time.Second)
	}
	for _, name := range names {
		xa := done[name]
		checkTombstone(t, tombstone(t, ns, name), xa, true)
		if r := srv.Requests(ns + "/" + name); r != 1 {
			t.Errorf("%s: %d requests, want 1", name, r)
		}
	}
}

// OutcomeUnknown has no expiresAt and is never collected before a person decides; after the decision the
// usual retention applies and the tombstone records the decided outcome.
func TestOutcomeUnknownIsNotCollected(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "legacy", url, retention(time.Hour))
	env.StartManager(t, app.Options{})
	ctx := context.Background()
	key := ns + "/transfer-3"
	// A 500 to a POST without key support is uncertain (DESIGN rule 4); no post-check: OutcomeUnknown.
	srv.Script(key, destination.Step{Status: 500, Apply: true})

	xa := envtestutil.Action(ns, "transfer-3", "legacy", "/transfers", `{"amount":7}`)
	// 4 s: long enough that the poll below sees Succeeded before the collection, on a busy machine too (with 1 s
	// a poll that came late missed it and found the object gone).
	xa.Spec.TTLSecondsAfterFinished = ttl(4)
	env.Create(t, xa)
	unknown := env.WaitPhase(t, ns, "transfer-3", actionsv1alpha1.PhaseOutcomeUnknown, 30*time.Second)
	if unknown.Status.ExpiresAt != nil {
		t.Fatalf("OutcomeUnknown has expiresAt %s; it must wait for a person", unknown.Status.ExpiresAt)
	}
	// The one window where nothing must happen: twice the TTL, so a collector keyed on completedAt or
	// creationTimestamp + ttl would have deleted it. Checked throughout, every 50 ms.
	var still *actionsv1alpha1.ExternalAction
	envtestutil.Consistently(t, 8*time.Second, func() string {
		return fmt.Sprintf("OutcomeUnknown kept, not collected (deletionTimestamp %v, phase %s)", still.DeletionTimestamp, still.Status.Phase)
	}, func() bool {
		still = env.Get(t, ns, "transfer-3")
		return still.DeletionTimestamp.IsZero() && still.Status.Phase == actionsv1alpha1.PhaseOutcomeUnknown && tombstone(t, ns, "transfer-3") == nil
	})

	// A person decides: applied. Now the action is Succeeded, expires ttl after the decision, and is collected.
	still.Annotations = map[string]string{actionsv1alpha1.AnnotationResolve: actionsv1alpha1.DecisionApplied}
	if err := env.Client.Update(ctx, still); err != nil {
		t.Fatal(err)
	}
	decided := env.WaitPhase(t, ns, "transfer-3", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if decided.Status.ExpiresAt == nil || decided.Status.ExpiresAt.Sub(decided.Status.CompletedAt.Time) != 4*time.Second {
		t.Errorf("after the decision: completedAt %v, expiresAt %v; want expiresAt = completedAt + 4s", decided.Status.CompletedAt, decided.Status.ExpiresAt)
	}
	waitGone(t, ns, "transfer-3", 30*time.Second)
	checkTombstone(t, tombstone(t, ns, "transfer-3"), decided, true)
	if r := srv.Requests(key); r != 1 {
		t.Errorf("destination received %d requests, want 1", r)
	}
}

// Deleting a namespace: the API server refuses new objects in a terminating namespace, so no tombstone can be
// written there (and the namespace's tombstones go with it). The finalizer must still let the action go, or the
// namespace would hang in Terminating forever.
func TestNamespaceDeletionIsNotBlocked(t *testing.T) {
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "billing", url, retention(time.Hour))
	env.StartManager(t, app.Options{})
	ctx := context.Background()

	env.Create(t, envtestutil.Action(ns, "invoice-1", "billing", "/invoices", `{"amount":1}`))
	xa := env.WaitPhase(t, ns, "invoice-1", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// envtest runs no namespace controller: delete the action as it would.
	if err := env.Client.Delete(ctx, xa); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, "invoice-1", 30*time.Second)
	// The refusal is the store's answer, not an outage: the store stays up (found on a real cluster, where the
	// namespace controller deletes the actions and the gauge stayed 0 until the next tombstone operation, enough
	// for ActionledgerTombstoneStoreDown to fire after 5 minutes of quiet).
	var up dto.Metric
	if err := metrics.TombstoneStoreUp.WithLabelValues(tombstonestore.StoreObjects).Write(&up); err != nil || up.GetGauge().GetValue() != 1 {
		t.Errorf("actionledger_tombstone_store_up after a namespace's deletion = %v (%v), want 1", up.GetGauge().GetValue(), err)
	}
}
