package retry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// spec.concurrency.maxInFlight bounds the requests in flight to a destination across namespaces: with a limit
// of 2 the destination never sees a third request at once; the actions that wait behind a full round hold no
// claim meanwhile and, their waits being shorter than the destination's timeout, write no ConcurrencyLimited;
// every action succeeds after one request.
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
		URL: ts.URL, Concurrency: &actionsv1alpha1.Concurrency{MaxInFlight: ptr(int32(2))}},
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
	// While they run: no action is claimed before it has room (at most 2 + 2 queued hold a claim at once), and none
	// writes ConcurrencyLimited: their waits (about 2 s) are a burst's queue, shorter than the destination's
	// timeout (30 s), after which a wait for room is shown (send.RoomShown; the shown wait is tested in
	// internal/controller, TestVariantsPassTheSameLimits).
	done := make(chan struct{})
	var limited, maxClaimed atomic.Int32
	go func() {
		defer close(done)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			succeeded, claimed := 0, int32(0)
			for _, n := range names {
				xa := &actionsv1alpha1.ExternalAction{}
				if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: n[0], Name: n[1]}, xa); err != nil {
					continue
				}
				if c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling); c != nil &&
					c.Reason == actionsv1alpha1.ReasonConcurrencyLimited {
					limited.Add(1)
				}
				if xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
					succeeded++
				} else if xa.Status.Claim != nil {
					claimed++
				}
			}
			if claimed > maxClaimed.Load() {
				maxClaimed.Store(claimed)
			}
			if succeeded == len(names) {
				return
			}
		}
	}()
	for _, n := range names {
		xa := env.WaitPhase(t, n[0], n[1], actionsv1alpha1.PhaseSucceeded, time.Minute)
		if got := s.Requests(n[0] + "/" + n[1]); got != 1 || xa.Status.Attempts != 1 {
			t.Errorf("%s/%s: %d requests, %d attempts; want 1 and 1", n[0], n[1], got, xa.Status.Attempts)
		}
	}
	<-done
	if n := limited.Load(); n != 0 {
		t.Errorf("ConcurrencyLimited seen %d times; want none for waits shorter than the destination's timeout", n)
	}
	t.Logf("at most %d unfinished actions held a claim at once", maxClaimed.Load())
	// In flight (2), queued behind them (2, and one more for a namespace with none queued), the outcomes back and
	// not yet recorded (their claims stay until the write), and reconciles that saw room at the same moment (the
	// room check and the claim are two steps, which the dispatcher's queue absorbs): well under 16, which every
	// action would hold at once if a wait for room held a claim.
	if m := maxClaimed.Load(); m > 12 {
		t.Errorf("%d unfinished actions held a claim at once; want at most those in flight, queued behind them and "+
			"being recorded (without the room, all 16)", m)
	}
	if p := peak.Load(); p > 2 {
		t.Fatalf("the destination saw %d requests at once; maxInFlight is 2", p)
	}
}
