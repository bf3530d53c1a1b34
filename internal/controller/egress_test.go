//go:build !unit

package controller_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// countedDestination starts the recording destination on 127.0.0.1 behind a counting listener.
func countedDestination(t *testing.T) (*destination.Server, *destination.CountingListener, string) {
	t.Helper()
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &destination.CountingListener{Listener: l}
	s := destination.New(destination.Options{})
	ts := httptest.NewUnstartedServer(s)
	ts.Listener = cl
	ts.Start()
	t.Cleanup(ts.Close)
	return s, cl, ts.URL
}

// destinationReady waits for the Destination's Ready condition to satisfy ok.
func destinationReady(t *testing.T, ns, name, what string, ok func(*metav1.Condition) bool) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	envtestutil.Eventually(t, 20*time.Second, func() string {
		return fmt.Sprintf("Destination %s/%s Ready condition %+v to be %s", ns, name, c, what)
	}, func() bool {
		d := &actionsv1alpha1.Destination{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			t.Fatal(err)
		}
		c = meta.FindStatusCondition(d.Status.Conditions, actionsv1alpha1.ConditionReady)
		return c != nil && ok(c)
	})
	return c
}

func egressDenied(c *metav1.Condition) bool {
	return c.Status == metav1.ConditionFalse && c.Reason == actionsv1alpha1.ReasonEgressDenied
}

// With the default egress policy a destination on 127.0.0.1 is refused: the Destination is
// Ready=False/EgressDenied (as is one named "localhost", which resolves to loopback, and one written as
// the IPv4-mapped literal [::ffff:127.0.0.1]); the action stalls (Stalled=True, EgressDenied, phase
// Pending) without an attempt or a connection. A manager whose policy allows 127.0.0.1/32 validates the
// Destination, and the action resumes by itself and is sent exactly once.
func TestEgressDeniedThenAllowed(t *testing.T) {
	ns := env.Namespace(t)
	srv, l, url := countedDestination(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	attempts := int32(3)
	env.CreateDestination(t, ns, "loop", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &attempts,
			InitialBackoff: durationp(200 * time.Millisecond), Jitter: actionsv1alpha1.JitterNone}
	})
	env.CreateDestination(t, ns, "by-name", "http://localhost:"+port, nil)
	env.CreateDestination(t, ns, "mapped", "http://[::ffff:127.0.0.1]:"+port, nil)
	stop := env.StartManager(t, app.Options{Holder: "egress-default", Egress: &egress.Config{}})

	c := destinationReady(t, ns, "loop", "False/EgressDenied", egressDenied)
	// 127.0.0.1 is also the envtest API server's address, the more specific entry (a /32).
	for _, want := range []string{"127.0.0.1", "Kubernetes API server", egress.FlagAllow} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Ready message %q does not name %q", c.Message, want)
		}
	}
	if c := destinationReady(t, ns, "by-name", "False/EgressDenied", egressDenied); !strings.Contains(c.Message, "localhost") {
		t.Errorf("Ready message %q does not name the host", c.Message)
	}
	destinationReady(t, ns, "mapped", "False/EgressDenied", egressDenied)

	env.Create(t, envtestutil.Action(ns, "pay", "loop", "/charges", `{"amount":1}`))
	// The validator's verdict stalls the action before any attempt: Stalled=True/EgressDenied in phase Pending,
	// the verdict in lastError (the ERROR column), nothing attempted, no connection.
	xa := env.WaitFor(t, ns, "pay", 30*time.Second, "stalled on EgressDenied", func(xa *actionsv1alpha1.ExternalAction) bool {
		return stalledOn(xa, actionsv1alpha1.ReasonEgressDenied)
	})
	if !strings.Contains(xa.Status.LastError, "127.0.0.1") {
		t.Errorf("lastError %q does not name the denied address", xa.Status.LastError)
	}
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("the denied action to stay stalled without attempts or connections"), func() bool {
		cur := env.Get(t, ns, "pay")
		return stalledOn(cur, actionsv1alpha1.ReasonEgressDenied) && l.Accepted() == 0 && srv.Summary().Requests == 0
	})
	stop()

	// The admin allows 127.0.0.1/32: the validator marks the Destination Ready, and that wakes the action,
	// which resumes by itself (no decision needed) and is sent exactly once.
	env.StartManager(t, app.Options{Holder: "egress-open", Egress: envtestutil.LoopbackEgress()})
	destinationReady(t, ns, "loop", "True", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	xa = env.WaitPhase(t, ns, "pay", actionsv1alpha1.PhaseSucceeded, 10*time.Second)
	if got := srv.Requests(ns + "/pay"); got != 1 || xa.Status.Attempts != 1 {
		t.Errorf("requests = %d, attempts %d after the policy allowed it, want 1 and 1", got, xa.Status.Attempts)
	}
	// A first attempt that succeeded has no history entry (the lean happy path): the response is its record.
	if len(xa.Status.AttemptHistory) != 0 || xa.Status.Response == nil || xa.Status.Response.StatusCode == 0 {
		t.Errorf("history %s, response %s; want a response and no history", envtestutil.JSON(xa.Status.AttemptHistory), envtestutil.JSON(xa.Status.Response))
	}
}
