//go:build !unit

package controller_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/deadletter"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// rejecting is a destination that answers every request 422: an action to it ends Failed at its first attempt.
func rejecting(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// deadLettering makes a Destination dead-letter its Failed actions to sink.
func deadLettering(sink actionsv1alpha1.DestinationReference) func(*actionsv1alpha1.DestinationSpec) {
	return func(s *actionsv1alpha1.DestinationSpec) {
		s.DeadLetter = &actionsv1alpha1.DeadLetterSink{DestinationRef: sink}
	}
}

// clusterSink creates a deduplicating ClusterDestination at url (keyFormat the default {namespace}/{name}),
// after mutate, deleted when the test ends.
func clusterSink(t *testing.T, name, url string, mutate func(*actionsv1alpha1.DestinationSpec)) {
	t.Helper()
	cd := &actionsv1alpha1.ClusterDestination{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: actionsv1alpha1.ClusterDestinationSpec{
			DestinationSpec: actionsv1alpha1.DestinationSpec{URL: url,
				Idempotency: &actionsv1alpha1.IdempotencyConfig{Supported: true}},
			Response: &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{}},
		}}
	if mutate != nil {
		mutate(&cd.Spec.DestinationSpec)
	}
	env.Create(t, cd)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cd) })
}

func deadLetterState(t *testing.T, ns, name string, want actionsv1alpha1.DeadLetterState) *actionsv1alpha1.ExternalAction {
	t.Helper()
	return env.WaitFor(t, ns, name, 30*time.Second, "status.deadLetter.state "+string(want), func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.DeadLetter != nil && xa.Status.DeadLetter.State == want
	})
}

// A dead-letter sink with OAuth2 that refuses the first token with a 401 gets the record on the retry, with a
// new token: the delivery drops the refused token and retries the 401 once, as an attempt does (issue 34 item 2).
// Before the one send path, the record ended Failed on the 401 and the refused token stayed cached.
func TestDeadLetterOAuth2SinkRefusedTokenIsRenewed(t *testing.T) {
	te := newTokenEndpoint(t)
	sink := newBearerAPI(t, te)
	sink.refuseFirst.Store(true)
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	oauthDestination(t, ns, "cases", sink.URL, te.URL+"/oauth2/token", 3)
	env.CreateDestination(t, ns, "pay", rejecting(t), deadLettering(actionsv1alpha1.DestinationReference{Name: "cases"}))
	env.Create(t, envtestutil.Action(ns, "refund-1", "pay", "/refunds", `{"order":1}`))

	xa := deadLetterState(t, ns, "refund-1", actionsv1alpha1.DeadLetterDelivered)
	if xa.Status.Phase != actionsv1alpha1.PhaseFailed {
		t.Errorf("the action is %s, want Failed (unchanged by its delivery)", xa.Status.Phase)
	}
	if dl := xa.Status.DeadLetter; dl.Attempts != 2 || dl.StatusCode != http.StatusCreated {
		t.Errorf("status.deadLetter = %s; want delivered by attempt 2 (201) after the refused token's 401", envtestutil.JSON(dl))
	}
	if issued := te.tokens(); len(issued) != 2 || sink.requests.Load() != 2 || sink.applied.Load() != 1 {
		t.Errorf("tokens issued %d, sink requests %d, applied %d: want 2, 2, 1 (a new token for the retry)",
			len(issued), sink.requests.Load(), sink.applied.Load())
	}
	assertNoToken(t, dumpOf(t, ns, "refund-1"), te.tokens())
}

// Issue 33 row 5: team-a's own Destination sends the key team-b/{name}, so its action's key is team-b's; both
// dead-letter to one deduplicating ClusterDestination sink. The records' keys are the sink's keyFormat for each
// action (namespace/name), so the two records arrive under distinct keys and both are applied: team-a cannot
// make the sink answer team-b's record from its own.
func TestDeadLetterKeyAtSharedSinkIsTheSinks(t *testing.T) {
	sink, sinkURL := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	cdName := "dl-shared-" + env.Namespace(t)
	clusterSink(t, cdName, sinkURL, nil)
	env.StartManager(t, app.Options{})
	teamA, teamB := env.Namespace(t), env.Namespace(t)
	ref := actionsv1alpha1.DestinationReference{Kind: "ClusterDestination", Name: cdName}
	payURL := rejecting(t)
	env.CreateDestination(t, teamA, "pay", payURL, func(s *actionsv1alpha1.DestinationSpec) {
		deadLettering(ref)(s)
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{KeyFormat: teamB + "/{name}"}
	})
	env.CreateDestination(t, teamB, "pay", payURL, deadLettering(ref))
	env.Create(t, envtestutil.Action(teamB, "pay-1", "pay", "/payments", `{"amount":1}`))
	deadLetterState(t, teamB, "pay-1", actionsv1alpha1.DeadLetterDelivered)
	env.Create(t, envtestutil.Action(teamA, "pay-1", "pay", "/payments", `{"amount":999}`))
	forged := deadLetterState(t, teamA, "pay-1", actionsv1alpha1.DeadLetterDelivered)

	if forged.Status.IdempotencyKey != teamB+"/pay-1" {
		t.Fatalf("team-a's action key is %q, want %q (its own keyFormat)", forged.Status.IdempotencyKey, teamB+"/pay-1")
	}
	for _, c := range []struct{ ns, key string }{{teamA, teamA + "/pay-1/dead-letter"}, {teamB, teamB + "/pay-1/dead-letter"}} {
		if got := env.Get(t, c.ns, "pay-1").Status.DeadLetter.IdempotencyKey; got != c.key {
			t.Errorf("%s: status.deadLetter.idempotencyKey %q, want %q (the sink's keyFormat)", c.ns, got, c.key)
		}
		log := sink.RequestLog(c.key)
		if len(log) != 1 || log[0].Replayed || !log[0].Applied || log[0].Header.Get("Ce-Id") != c.key {
			t.Errorf("%s: the sink got %d request(s) under %s (replayed %v); want one record applied, the key as its id",
				c.ns, len(log), c.key, len(log) == 1 && log[0].Replayed)
		}
	}
}

// Many actions failing at once, each dead-lettering to one sink: the records pass the sink's rate limit like
// attempts (issue 33 row 6), so the sink receives them no faster than it allows and the waits are counted
// (actionledger_delayed_total, reason RateLimited); with a retry budget that allows no retry, a record the sink
// answered 503 is not retried (RetryBudgetExhausted, no attempt spent) where it would have been without it.
func TestDeadLetterRecordsPassTheSinksLimits(t *testing.T) {
	sink, sinkURL := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	one, zero := int32(1), int32(0)
	env.CreateDestination(t, ns, "paced", sinkURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.RateLimit = &actionsv1alpha1.RateLimit{RequestsPerSecond: 1, Burst: &one}
	})
	payURL := rejecting(t)
	env.CreateDestination(t, ns, "pay", payURL, deadLettering(actionsv1alpha1.DestinationReference{Name: "paced"}))
	names := []string{"r0", "r1", "r2", "r3", "r4"}
	for _, n := range names {
		env.Create(t, envtestutil.Action(ns, n, "pay", "/refunds", `{"n":"`+n+`"}`))
	}
	var arrived []time.Time
	for _, n := range names {
		deadLetterState(t, ns, n, actionsv1alpha1.DeadLetterDelivered)
		log := sink.RequestLog(ns + "/" + n + deadletter.KeySuffix)
		if len(log) != 1 {
			t.Fatalf("%s: %d deliveries, want 1", n, len(log))
		}
		arrived = append(arrived, log[0].At)
	}
	slices.SortFunc(arrived, func(a, b time.Time) int { return a.Compare(b) })
	// One per second with a burst of one: five records take at least four seconds (less half a second for the
	// way from the admission to the sink).
	if span := arrived[len(arrived)-1].Sub(arrived[0]); span < 3500*time.Millisecond {
		t.Errorf("five records reached a sink limited to 1/s within %s, want at least 4s", span)
	}
	if n := testutil.ToFloat64(metrics.Delayed.WithLabelValues("Destination/"+ns+"/paced", actionsv1alpha1.ReasonRateLimited)); n < 1 {
		t.Errorf("no record waited for the sink's rate limit (delayed %v)", n)
	}

	// A budget of no retries: each record is sent once, answered 503, and waits on the budget, spending nothing.
	env.CreateDestination(t, ns, "strict", sinkURL, func(s *actionsv1alpha1.DestinationSpec) {
		three := int32(3)
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &three, InitialBackoff: durationp(100 * time.Millisecond),
			MaxBackoff: durationp(200 * time.Millisecond)}
		s.RetryBudget = &actionsv1alpha1.RetryBudget{RetryPercent: &zero, MinRetriesPerSecond: &zero}
	})
	env.CreateDestination(t, ns, "pay-strict", payURL, deadLettering(actionsv1alpha1.DestinationReference{Name: "strict"}))
	for _, n := range []string{"s0", "s1"} {
		sink.Script(ns+"/"+n+deadletter.KeySuffix, destination.Repeat(5, destination.Step{Status: http.StatusServiceUnavailable})...)
		env.Create(t, envtestutil.Action(ns, n, "pay-strict", "/refunds", `{"n":"`+n+`"}`))
	}
	for _, n := range []string{"s0", "s1"} {
		env.WaitFor(t, ns, n, 30*time.Second, "status.deadLetter waiting on the retry budget", func(xa *actionsv1alpha1.ExternalAction) bool {
			dl := xa.Status.DeadLetter
			return dl != nil && dl.Reason == actionsv1alpha1.ReasonRetryBudgetExhausted
		})
	}
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("a record retried past the sink's retry budget"), func() bool {
		return sink.Requests(ns+"/s0"+deadletter.KeySuffix) == 1 && sink.Requests(ns+"/s1"+deadletter.KeySuffix) == 1
	})
	for _, n := range []string{"s0", "s1"} {
		if dl := env.Get(t, ns, n).Status.DeadLetter; dl.Attempts != 1 || dl.State != actionsv1alpha1.DeadLetterPending || dl.Claim != nil {
			t.Errorf("%s: status.deadLetter = %s; want Pending after one attempt, no claim", n, envtestutil.JSON(dl))
		}
	}
}
