package retry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// spec.concurrency.maxInFlight bounds the requests in flight to a destination across namespaces: with a limit
// of 2 the destination never sees a third request at once; the actions that wait behind a full round for longer
// than the destination's timeout show reason ConcurrencyLimited (no claim meanwhile), and every action succeeds
// after one request.
func TestMaxInFlightBoundsConcurrentRequests(t *testing.T) {
	nsX, nsY := env.Namespace(t), env.Namespace(t)
	s := destination.New(destination.Options{CommitDelay: 300 * time.Millisecond})
	var cur, peak atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	cdName := "conc-" + nsX
	cd := &actionsv1alpha1.ClusterDestination{Spec: actionsv1alpha1.ClusterDestinationSpec{DestinationSpec: actionsv1alpha1.DestinationSpec{
		// A timeout of 1 s: a wait for room is shown once it has lasted longer than the destination's timeout.
		URL: ts.URL, Timeout: &metav1.Duration{Duration: time.Second}, Concurrency: &actionsv1alpha1.Concurrency{MaxInFlight: ptr(int32(2))}},
		Response: &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{}}}}
	cd.Name = cdName
	env.Create(t, cd)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cd) })
	env.StartManager(t, app.Options{})

	names := make([][2]string, 0, 16)
	for i := range 8 {
		names = append(names, [2]string{nsX, fmt.Sprintf("x-%d", i)}, [2]string{nsY, fmt.Sprintf("y-%d", i)})
	}
	for _, n := range names {
		xa := envtestutil.Action(n[0], n[1], cdName, "/orders", `{"n":1}`)
		xa.Spec.DestinationRef.Kind = "ClusterDestination"
		env.Create(t, xa)
	}
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("an action waiting with reason ConcurrencyLimited"), func() bool {
		for _, n := range names {
			xa := env.Get(t, n[0], n[1])
			c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling)
			if c != nil && c.Reason == actionsv1alpha1.ReasonConcurrencyLimited {
				if !strings.Contains(c.Message, "(concurrency)") || xa.Status.Claim != nil {
					t.Fatalf("%s/%s waits for concurrency with message %q and claim %+v; want \"(concurrency)\" and no claim",
						n[0], n[1], c.Message, xa.Status.Claim)
				}
				return true
			}
		}
		return false
	})
	for _, n := range names {
		xa := env.WaitPhase(t, n[0], n[1], actionsv1alpha1.PhaseSucceeded, time.Minute)
		if got := s.Requests(n[0] + "/" + n[1]); got != 1 || xa.Status.Attempts != 1 {
			t.Errorf("%s/%s: %d requests, %d attempts; want 1 and 1", n[0], n[1], got, xa.Status.Attempts)
		}
	}
	if p := peak.Load(); p > 2 {
		t.Fatalf("the destination saw %d requests at once; maxInFlight is 2", p)
	}
}
