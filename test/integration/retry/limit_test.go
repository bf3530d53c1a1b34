package retry_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// arrival is one request to the shared destination, with the namespace of its action.
type arrival struct {
	ns  string
	key string
	at  time.Time
}

// arrivals merges the request logs of keys, sorted by arrival time.
func arrivals(s *destination.Server, keys []string) []arrival {
	var out []arrival
	for _, k := range keys {
		for _, r := range s.RequestLog(k) {
			out = append(out, arrival{ns: k[:strings.IndexByte(k, '/')], key: k, at: r.At})
		}
	}
	slices.SortFunc(out, func(a, b arrival) int { return a.at.Compare(b.at) })
	return out
}

// C11: destination A (a ClusterDestination shared by two namespaces) allows 5 requests/s with burst 5. A never
// sees more than the token bucket allows, the two namespaces progress fairly, B (no limit) is not delayed by A's
// backlog, and one 429 Retry-After: 2 from A pauses every action of A while B goes on.
func TestSharedRateLimitC11(t *testing.T) {
	const (
		rate, burst = 5, 5
		perNS       = 20
	)
	nsX, nsY := env.Namespace(t), env.Namespace(t)
	srvA, urlA := envtestutil.DestinationServer(t, destination.Options{})
	srvB, urlB := envtestutil.DestinationServer(t, destination.Options{})
	cdName := "c11-a-" + nsX
	cd := &actionsv1alpha1.ClusterDestination{
		ObjectMeta: metav1.ObjectMeta{Name: cdName},
		Spec: actionsv1alpha1.ClusterDestinationSpec{DestinationSpec: actionsv1alpha1.DestinationSpec{
			URL:       urlA,
			RateLimit: &actionsv1alpha1.RateLimit{RequestsPerSecond: rate, Burst: ptr(int32(burst))},
		}, Response: &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{}}},
	}
	env.Create(t, cd)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cd) })
	env.CreateDestination(t, nsX, "b", urlB, nil)
	env.StartManager(t, app.Options{})

	actionA := func(ns, name string) *actionsv1alpha1.ExternalAction {
		xa := envtestutil.Action(ns, name, cdName, "/orders", `{"n":1}`)
		xa.Spec.DestinationRef.Kind = "ClusterDestination"
		return xa
	}

	// 20 actions in each namespace, created at once (one creator per namespace).
	keys := make([]string, 0, 2*perNS)
	var wg sync.WaitGroup
	for _, ns := range []string{nsX, nsY} {
		for i := range perNS {
			keys = append(keys, fmt.Sprintf("%s/a-%02d", ns, i))
		}
		wg.Go(func() {
			for i := range perNS {
				if err := env.Client.Create(context.Background(), actionA(ns, fmt.Sprintf("a-%02d", i))); err != nil {
					t.Errorf("creating %s/a-%02d: %v", ns, i, err)
				}
			}
		})
	}
	wg.Wait()
	env.Create(t, envtestutil.Action(nsX, "b-0", "b", "/orders", `{"n":2}`))

	var lastA time.Time
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		xa := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseSucceeded, 90*time.Second)
		if xa.Status.Attempts != 1 {
			t.Errorf("%s: attempts = %d, want 1", k, xa.Status.Attempts)
		}
		if xa.Status.CompletedAt.After(lastA) {
			lastA = xa.Status.CompletedAt.Time
		}
	}
	xb := env.WaitPhase(t, nsX, "b-0", actionsv1alpha1.PhaseSucceeded, 30*time.Second)

	got := arrivals(srvA, keys)
	if len(got) != 2*perNS {
		t.Fatalf("destination A received %d requests, want %d", len(got), 2*perNS)
	}
	// Token bucket bound: in any window [t_i, t_i+1s) at most burst + rate*1s requests.
	worst := 0
	for i := range got {
		n := 0
		for j := i; j < len(got) && got[j].at.Sub(got[i].at) < time.Second; j++ {
			n++
		}
		worst = max(worst, n)
		if n > burst+rate {
			t.Errorf("%d requests to A in the second after %s, want <= %d", n, got[i].at.Format(time.RFC3339Nano), burst+rate)
		}
	}
	t.Logf("A: %d requests over %v, busiest 1s window %d (bound %d)", len(got), got[len(got)-1].at.Sub(got[0].at), worst, burst+rate)

	// Fairness: both namespaces are served among A's first 20 requests.
	count := map[string]int{}
	for _, a := range got[:20] {
		count[a.ns]++
	}
	if count[nsX] < 7 || count[nsY] < 7 {
		t.Errorf("first 20 requests to A: %d from %s, %d from %s; want >= 7 each", count[nsX], nsX, count[nsY], nsY)
	}

	// B is not held behind A's backlog.
	bLog := srvB.RequestLog(nsX + "/b-0")
	if len(bLog) != 1 || !bLog[0].At.Before(got[len(got)-1].at) || !xb.Status.CompletedAt.Time.Before(lastA) {
		t.Errorf("B's request at %v (completed %v), A's last request at %v (last completion %v): B waited for A's backlog",
			bLog, xb.Status.CompletedAt, got[len(got)-1].at, lastA)
	}

	// One 429 Retry-After: 2 from A pauses every action of A; B goes on.
	p0 := nsX + "/p-0"
	srvA.Script(p0, destination.Step{Status: 429, Header: map[string]string{"Retry-After": "2"}})
	env.Create(t, actionA(nsX, "p-0"))
	env.WaitFor(t, nsX, "p-0", 30*time.Second, "the 429 recorded", func(xa *actionsv1alpha1.ExternalAction) bool {
		return len(xa.Status.AttemptHistory) >= 1
	})
	at429 := srvA.RequestLog(p0)[0].At
	pausedKeys := []string{p0}
	for i := 1; i <= 6; i++ {
		ns := []string{nsX, nsY}[i%2]
		name := fmt.Sprintf("p-%d", i)
		env.Create(t, actionA(ns, name))
		pausedKeys = append(pausedKeys, ns+"/"+name)
	}
	env.Create(t, envtestutil.Action(nsX, "b-1", "b", "/orders", `{"n":3}`))
	env.WaitFor(t, nsY, "p-1", 30*time.Second, "Reconciling reason RateLimited during the pause", func(xa *actionsv1alpha1.ExternalAction) bool {
		return reconcilingReason(xa) == actionsv1alpha1.ReasonRateLimited || xa.Status.Phase.Terminal()
	})
	for _, k := range pausedKeys {
		ns, name, _ := strings.Cut(k, "/")
		env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	}
	env.WaitPhase(t, nsX, "b-1", actionsv1alpha1.PhaseSucceeded, 30*time.Second)

	after := arrivals(srvA, pausedKeys)
	if len(after) != len(pausedKeys)+1 {
		t.Fatalf("A received %d requests for the paused batch, want %d (one 429 and one per action)", len(after), len(pausedKeys)+1)
	}
	resume := at429.Add(2 * time.Second)
	for _, a := range after[1:] {
		if a.at.Before(resume.Add(-tolerance)) {
			t.Errorf("%s reached A at %s, inside the pause that ends at %s", a.key, a.at.Format(time.RFC3339Nano), resume.Format(time.RFC3339Nano))
		}
	}
	b1 := srvB.RequestLog(nsX + "/b-1")
	if len(b1) != 1 || !b1[0].At.Before(after[1].at) {
		t.Errorf("B's request (%v) did not go before A's first request after the pause (%s): B was delayed by A's pause", b1, after[1].at)
	}
	t.Logf("429 at %s; A resumed at %s (+%v); B served at +%v", at429.Format(time.RFC3339Nano), after[1].at.Format(time.RFC3339Nano),
		after[1].at.Sub(at429), b1[0].At.Sub(at429))
}
