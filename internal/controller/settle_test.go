//go:build !unit

package controller_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/shard"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// The outcomes of claimed attempts against a destination that answers at once are recorded without a read of
// the action from the API server (no GET of externalactions over the whole send path), whether the outcome is
// recorded in the reconcile that claimed or, through the mailbox, by a later one whose cached copy may not show
// the claim yet (it is written over the copy the claim write returned); each is recorded with one claim write
// and one outcome write. The API server's request counts are global, so the manager is a shard that watches only
// this test's actions (the label selector): what earlier tests left in their namespaces is not reconciled by it.
func TestSendRecordsOutcomesWithoutReadingTheAction(t *testing.T) {
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "billing", url, nil)
	startOwnShard(t, ns, app.Options{})
	const n = 20
	before := env.RequestCount(t, "externalactions", "GET", "")
	beforePuts := env.RequestCount(t, "externalactions", "PUT", "status")
	for i := range n {
		env.Create(t, ownShard(ns, envtestutil.Action(ns, fmt.Sprintf("invoice-%d", i), "billing", "/invoices", `{"amount":1}`)))
	}
	waitSucceeded(t, ns, n, 1)
	gets := env.RequestCount(t, "externalactions", "GET", "") - before
	puts := env.RequestCount(t, "externalactions", "PUT", "status") - beforePuts
	t.Logf("%v GETs and %v status writes of ExternalActions for %d actions", gets, puts, n)
	if gets != 0 {
		t.Errorf("%v GETs of ExternalActions for %d actions (%.2f per action), want 0", gets, n, gets/n)
	}
	if puts != 2*n {
		t.Errorf("%v status writes for %d actions, want %d (a claim and an outcome each)", puts, n, 2*n)
	}
}

// A burst of actions a little above the destination's rateLimit waits for it without a status write: each wait
// ends within send.BriefWait, so every action is recorded with its claim and its outcome and nothing else, while
// the waits are counted (actionledger_delayed_total, reason RateLimited). Recording each wait as RateLimited
// cost one more status write per delayed action, when the API server was busiest. The waits are at most
// (n - burst) / requestsPerSecond = 0.8 s.
func TestBriefRateLimitWaitsWriteNoStatus(t *testing.T) {
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	burst := int32(2)
	env.CreateDestination(t, ns, "paced", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RateLimit = &actionsv1alpha1.RateLimit{RequestsPerSecond: 10, Burst: &burst}
	})
	startOwnShard(t, ns, app.Options{})
	const n = 10
	delayed := func() float64 {
		return testutil.ToFloat64(metrics.Delayed.WithLabelValues("Destination/"+ns+"/paced", actionsv1alpha1.ReasonRateLimited))
	}
	waits, beforePuts := delayed(), env.RequestCount(t, "externalactions", "PUT", "status")
	for i := range n {
		env.Create(t, ownShard(ns, envtestutil.Action(ns, fmt.Sprintf("order-%d", i), "paced", "/orders", `{"n":1}`)))
	}
	waitSucceeded(t, ns, n, 0)
	waits = delayed() - waits
	puts := env.RequestCount(t, "externalactions", "PUT", "status") - beforePuts
	t.Logf("%v rate-limit waits and %v status writes for %d actions", waits, puts, n)
	if waits < 1 {
		t.Fatalf("no send waited for the rate limit (%d actions created at once against 10/s, burst 2): the test proved nothing", n)
	}
	if puts != 2*n {
		t.Errorf("%v status writes for %d actions after %v brief rate-limit waits, want %d (a claim and an outcome each)", puts, n, waits, 2*n)
	}
}

// startOwnShard starts a manager with o that is a shard of ns's own actions (those ownShard labels), with its
// member Lease in ns: the API server's request counts are global, and a manager of every namespace would also
// reconcile what earlier tests left in theirs.
func startOwnShard(t *testing.T, ns string, o app.Options) {
	t.Helper()
	o.WatchLabelSelector = shard.LabelKey + " in (" + ns + ")"
	o.ShardNamespace = ns
	o.ShardInterval, o.ShardLeaseDuration = 200*time.Millisecond, 1500*time.Millisecond
	env.StartManager(t, o)
}

// ownShard labels xa for the manager startOwnShard started for ns.
func ownShard(ns string, xa *actionsv1alpha1.ExternalAction) *actionsv1alpha1.ExternalAction {
	xa.Labels = map[string]string{shard.LabelKey: ns}
	return xa
}
