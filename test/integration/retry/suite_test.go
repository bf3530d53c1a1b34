// Package retry_test holds the envtest integration tests of retries (issue 4): backoff spacing, the failure
// classifier end to end, Retry-After, deadlines, the shared per-destination rate limit and pause, and the rule
// that an action's retryPolicy may only tighten its destination's.
package retry_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// env is the real control plane (kube-apiserver + etcd) shared by this package's tests.
var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

// tolerance absorbs clock granularity between the destination's arrival stamps and the controller's clock.
const tolerance = 20 * time.Millisecond

func ptr[T any](v T) *T { return new(v) }

// policy returns a destination retry policy without jitter, so the scheduled delays are known.
func policy(maxAttempts int32, initial time.Duration) *actionsv1alpha1.RetryPolicy {
	return &actionsv1alpha1.RetryPolicy{
		MaxAttempts:    ptr(maxAttempts),
		InitialBackoff: &metav1.Duration{Duration: initial},
		Jitter:         actionsv1alpha1.JitterNone,
	}
}

// gaps returns the time between consecutive requests of log.
func gaps(log []destination.Received) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(log); i++ {
		out = append(out, log[i].At.Sub(log[i-1].At))
	}
	return out
}

// stalledReason returns the reason of a True Stalled condition, "" otherwise.
func stalledReason(xa *actionsv1alpha1.ExternalAction) string {
	c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionStalled)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Reason
}

// reconcilingReason returns the reason of a True Reconciling condition, "" otherwise.
func reconcilingReason(xa *actionsv1alpha1.ExternalAction) string {
	c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Reason
}

// touchLabels edits a label on ns/name every interval until stop is called (unrelated watch events). It
// returns stop, which also reports how many edits were written.
func touchLabels(t *testing.T, ns, name string, interval time.Duration) (stop func() int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var edits atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			xa := &actionsv1alpha1.ExternalAction{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, xa); err != nil {
				continue
			}
			if xa.Labels == nil {
				xa.Labels = map[string]string{}
			}
			xa.Labels["touched"] = time.Now().Format("150405.000000")
			if env.Client.Update(ctx, xa) == nil {
				edits.Add(1)
			}
		}
	}()
	var stopped atomic.Bool
	stop = func() int64 {
		if stopped.CompareAndSwap(false, true) {
			cancel()
			<-done
		}
		return edits.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// closedPort returns a loopback address on which nothing listens (a listener opened, then closed).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
