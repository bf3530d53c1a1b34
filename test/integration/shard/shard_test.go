package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/shard"
	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	interval      = 200 * time.Millisecond
	leaseDuration = 1500 * time.Millisecond
)

// shardOptions are the options of the manager of shard name, with member Leases in leases and short timings.
func shardOptions(name, leases string) app.Options {
	return app.Options{
		WatchLabelSelector: shard.LabelKey + " in (" + name + ")",
		ShardNamespace:     leases, ShardInterval: interval, ShardLeaseDuration: leaseDuration,
	}
}

// createShard creates n actions named <shardName>-<i> on dest, labeled for shardName, in parallel with others.
func createShard(t *testing.T, wg *sync.WaitGroup, ns, dest, shardName string, n int) {
	wg.Go(func() {
		for i := range n {
			xa := envtestutil.Action(ns, fmt.Sprintf("%s-%03d", shardName, i), dest, "/orders", fmt.Sprintf(`{"n":%d}`, i))
			xa.Labels = map[string]string{shard.LabelKey: shardName}
			if err := env.Client.Create(context.Background(), xa); err != nil {
				t.Errorf("creating %s: %v", xa.Name, err)
			}
		}
	})
}

// succeeded counts the Succeeded actions of shardName in ns.
func succeeded(t *testing.T, ns, shardName string) int {
	var list actionsv1alpha1.ExternalActionList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{shard.LabelKey: shardName}); err != nil {
		t.Fatalf("listing: %v", err)
	}
	n := 0
	for _, xa := range list.Items {
		if xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
			n++
		}
	}
	return n
}

// Two shards send to one Destination with rateLimit 10/s, burst 2: in any second the destination sees at most
// burst + rate requests (each shard alone would allow that much, so two unshared shards send twice as many).
// When one shard stops, the other takes the whole rate once the stopped shard's member Lease has expired.
func TestShardsShareOneRateLimit(t *testing.T) {
	const (
		rate, burst = 10, 2
		n1, n2      = 80, 30
	)
	ns, leases := env.Namespace(t), env.Namespace(t)
	rec, url := newRecorder(t, 0)
	env.CreateDestination(t, ns, "limited", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RateLimit = &actionsv1alpha1.RateLimit{RequestsPerSecond: rate, Burst: new(int32(burst))}
	})
	env.StartManager(t, shardOptions("shard1", leases))
	stop2 := env.StartManager(t, shardOptions("shard2", leases))
	var wg sync.WaitGroup
	createShard(t, &wg, ns, "limited", "shard1", n1)
	createShard(t, &wg, ns, "limited", "shard2", n2)
	wg.Wait()

	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("30 requests at the destination"), func() bool {
		return rec.count() >= 30
	})
	if got := succeeded(t, ns, "shard2"); got < 5 {
		t.Fatalf("shard2 succeeded %d actions while both ran, want >= 5: the load is not on both shards", got)
	}
	stopped := time.Now()
	stop2()
	for i := range n1 {
		env.WaitPhase(t, ns, fmt.Sprintf("shard1-%03d", i), actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	}

	at := rec.arrivals()
	worst, start := busiest(at, time.Second)
	t.Logf("%d requests over %v; busiest second %d from %s (bound %d)", len(at), at[len(at)-1].Sub(at[0]), worst,
		start.Format(time.RFC3339Nano), burst+rate)
	if worst > burst+rate {
		t.Errorf("%d requests in the second from %s, want <= burst+rate = %d", worst, start.Format(time.RFC3339Nano), burst+rate)
	}
	// shard2's Lease expires leaseDuration after its last renewal; shard1 lists every interval.
	full := stopped.Add(leaseDuration + 3*interval)
	if got, bound := between(at, full, full.Add(2*time.Second)), 15; got < bound {
		t.Errorf("%d requests in the 2s from %s (after shard2's Lease expired), want >= %d: shard1 did not take the whole rate "+
			"(half of it allows at most 11)", got, full.Format(time.RFC3339Nano), bound)
	}
}

// Two shards send to one Destination with concurrency.maxInFlight 4 and slow answers: the destination never has
// more than 4 requests open at once (unshared, each shard would open 4).
func TestShardsShareMaxInFlight(t *testing.T) {
	const limit, n = 4, 16
	ns, leases := env.Namespace(t), env.Namespace(t)
	rec, url := newRecorder(t, 300*time.Millisecond)
	env.CreateDestination(t, ns, "narrow", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Concurrency = &actionsv1alpha1.Concurrency{MaxInFlight: new(int32(limit))}
	})
	env.StartManager(t, shardOptions("shard1", leases))
	env.StartManager(t, shardOptions("shard2", leases))
	var wg sync.WaitGroup
	createShard(t, &wg, ns, "narrow", "shard1", n)
	createShard(t, &wg, ns, "narrow", "shard2", n)
	wg.Wait()
	for _, s := range []string{"shard1", "shard2"} {
		for i := range n {
			env.WaitPhase(t, ns, fmt.Sprintf("%s-%03d", s, i), actionsv1alpha1.PhaseSucceeded, 60*time.Second)
		}
	}
	t.Logf("most requests in flight at once: %d (limit %d)", rec.maxInFlight(), limit)
	if got := rec.maxInFlight(); got > limit {
		t.Errorf("%d requests in flight at once, want <= maxInFlight = %d", got, limit)
	}
}

// An action relabeled out of its shard while its attempt is in flight still gets its outcome recorded by the
// shard that sent it (read live: it is no longer in that shard's cache), although no manager watches its new
// shard: the claim is not left open for another shard to treat as uncertain.
func TestOutcomeRecordedAfterMoveDuringSend(t *testing.T) {
	ns, rec, _ := moveDuringSend(t, "moving", nil)
	got := env.WaitPhase(t, ns, "moving", actionsv1alpha1.PhaseSucceeded, 20*time.Second)
	if got.Labels[shard.LabelKey] != "shard2" || got.Status.Attempts != 1 || rec.count() != 1 {
		t.Errorf("label %q, attempts %d, requests %d: want shard2, 1, 1", got.Labels[shard.LabelKey], got.Status.Attempts, rec.count())
	}
}

// moveDuringSend starts a shard1 manager, creates action name (changed by edit) for shard1 on a destination
// that holds each request for 1 s, and relabels it to shard2 (which no manager watches) while its request is
// at the destination.
func moveDuringSend(t *testing.T, name string, edit func(*actionsv1alpha1.ExternalAction)) (string, *recorder, *actionsv1alpha1.ExternalAction) {
	t.Helper()
	ns, leases := env.Namespace(t), env.Namespace(t)
	rec, url := newRecorder(t, time.Second)
	env.CreateDestination(t, ns, "slow", url, nil)
	env.StartManager(t, shardOptions("shard1", leases))
	xa := envtestutil.Action(ns, name, "slow", "/orders", `{"n":1}`)
	xa.Labels = map[string]string{shard.LabelKey: "shard1"}
	if edit != nil {
		edit(xa)
	}
	env.Create(t, xa)
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the request at the destination"), func() bool {
		return rec.count() == 1
	})
	patch := []byte(`{"metadata":{"labels":{"` + shard.LabelKey + `":"shard2"}}}`)
	if err := env.Client.Patch(context.Background(), xa, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("relabeling: %v", err)
	}
	return ns, rec, xa
}

// An action with spec.outputs relabeled out of its shard while its attempt is in flight: the shard that sent it
// holds the output values, records the outcome and writes the outputs on the live object, although the action
// is no longer in its cache and no manager watches its new shard; it never ends OutputLost.
func TestOutputsWrittenAfterMoveDuringSend(t *testing.T) {
	ns, rec, xa := moveDuringSend(t, "moving-out", func(xa *actionsv1alpha1.ExternalAction) {
		xa.Spec.Outputs = &actionsv1alpha1.ActionOutputs{SecretName: "moving-out",
			Values: map[string]actionsv1alpha1.OutputExpression{"ok": "response.body.ok"}}
	})
	got := &actionsv1alpha1.ExternalAction{}
	envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("status.outputs recorded"), func() bool {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(xa), got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Outputs != nil
	})
	if got.Status.Outputs.Reason != actionsv1alpha1.ReasonOutputsWritten || rec.count() != 1 {
		t.Fatalf("outputs %+v after %d requests: want OutputsWritten after 1", got.Status.Outputs, rec.count())
	}
	sec := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "moving-out"}, sec); err != nil {
		t.Fatalf("the output Secret: %v", err)
	}
	if string(sec.Data["ok"]) != "true" {
		t.Errorf("output Secret data %v, want ok=true", sec.Data)
	}
}

// Without --watch-label-selector a manager is no shard member: it writes no member Lease.
func TestUnshardedManagerWritesNoMemberLease(t *testing.T) {
	ns := env.Namespace(t)
	rec, url := newRecorder(t, 0)
	env.CreateDestination(t, ns, "plain", url, nil)
	env.StartManager(t, app.Options{ControllerNamespace: ns, ShardNamespace: ns, ShardInterval: interval})
	env.Create(t, envtestutil.Action(ns, "plain", "plain", "/orders", `{"n":1}`))
	env.WaitPhase(t, ns, "plain", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	var leases coordinationv1.LeaseList
	envtestutil.Consistently(t, 3*interval, envtestutil.Say("no member Lease"), func() bool {
		if err := env.Client.List(context.Background(), &leases, client.InNamespace(ns), client.HasLabels{shard.LabelMember}); err != nil {
			t.Fatal(err)
		}
		return len(leases.Items) == 0
	})
	if rec.count() != 1 {
		t.Errorf("requests %d, want 1", rec.count())
	}
}

// Relabeling the next 5 Pending actions of shard1 to shard2, while both shards work through a backlog on one
// Destination with rateLimit 5/s, burst 1, pauses neither shard: the moved keys give their places in shard1's
// queue up at once (not when their grace ends, 2 s later), so the 2 s after the move still see about the whole
// rate, and no second sees more than burst + rate (one limit across shards). The busiest and emptiest seconds
// are logged.
func TestShardMoveReleasesItsPlace(t *testing.T) {
	const (
		rate, burst = 5, 1
		n           = 20
		moved       = 5
	)
	ns, leases := env.Namespace(t), env.Namespace(t)
	rec, url := newRecorder(t, 0)
	env.CreateDestination(t, ns, "limited", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RateLimit = &actionsv1alpha1.RateLimit{RequestsPerSecond: rate, Burst: new(int32(burst))}
	})
	env.StartManager(t, shardOptions("shard1", leases))
	env.StartManager(t, shardOptions("shard2", leases))
	var wg sync.WaitGroup
	createShard(t, &wg, ns, "limited", "shard1", n)
	createShard(t, &wg, ns, "limited", "shard2", n)
	wg.Wait()
	// Both shards' Leases are seen and the rate is shared before the move.
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("both shards sending"), func() bool {
		return succeeded(t, ns, "shard1") >= 3 && succeeded(t, ns, "shard2") >= 3
	})
	var list actionsv1alpha1.ExternalActionList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{shard.LabelKey: "shard1"}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b actionsv1alpha1.ExternalAction) int { return strings.Compare(a.Name, b.Name) })
	patch := []byte(`{"metadata":{"labels":{"` + shard.LabelKey + `":"shard2"}}}`)
	moveStart := time.Now()
	move, left := 0, 0
	for i := range list.Items {
		xa := &list.Items[i]
		if xa.Status.Phase.Terminal() || xa.Status.Claim != nil {
			continue
		}
		if move == moved {
			left++
			continue
		}
		if err := env.Client.Patch(context.Background(), xa, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("relabeling %s: %v", xa.Name, err)
		}
		move++
	}
	if move < moved || left < 3 {
		t.Fatalf("%d actions moved with %d left in shard1: the backlog ran out before the move", move, left)
	}
	movedAt := time.Now()
	for _, s := range []string{"shard1", "shard2"} {
		for i := range n {
			env.WaitPhase(t, ns, fmt.Sprintf("%s-%03d", s, i), actionsv1alpha1.PhaseSucceeded, 60*time.Second)
		}
	}
	at := rec.arrivals()
	worst, start := busiest(at, time.Second)
	// The emptiest second among the 3 after the move, while the backlog lasts (about 4 s at 5/s).
	end := movedAt.Add(3 * time.Second)
	if last := at[len(at)-1].Add(-time.Second); last.Before(end) {
		end = last
	}
	emptiest, from := len(at), movedAt
	for w := movedAt; !w.After(end); w = w.Add(100 * time.Millisecond) {
		if got := between(at, w, w.Add(time.Second)); got < emptiest {
			emptiest, from = got, w
		}
	}
	two := between(at, movedAt, movedAt.Add(2*time.Second))
	before := between(at, moveStart.Add(-2*time.Second), moveStart)
	t.Logf("%d requests; busiest second %d from %s (bound %d); emptiest second after the move %d from %s; "+
		"%d in the 2 s after it, %d in the 2 s before it", len(at), worst, start.Format(time.RFC3339Nano), burst+rate,
		emptiest, from.Format(time.RFC3339Nano), two, before)
	if worst > burst+rate {
		t.Errorf("%d requests in the second from %s, want <= burst+rate = %d", worst, start.Format(time.RFC3339Nano), burst+rate)
	}
	// Measured on 2 shared cores: with the place released at once 10 requests in the 2 s after the move (the
	// emptiest second 3 to 4); with the moved keys holding their places until their grace ends, 5 to 6 (the
	// emptiest second 2: only the other shard's half of the rate). Under make test's parallel packages the fix
	// once gave 7, so the bound is 7: above the paused case, below the loaded one. (The 2 s before the move are
	// no steadier a reference: they include the shards' start, 6 to 9.)
	if bound := 2*rate - 3; two < bound {
		t.Errorf("%d requests in the 2 s after the move (%d in the 2 s before), want >= %d: a shard paused "+
			"(emptiest second %d from %s)", two, before, bound, emptiest, from.Format(time.RFC3339Nano))
	}
	if bound := rate / 2; emptiest < bound {
		t.Errorf("%d requests in the second from %s after the move, want >= %d: both shards paused", emptiest,
			from.Format(time.RFC3339Nano), bound)
	}
}
