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
	"github.com/actionledger/actionledger/internal/httpexec"
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
// the IPv4-mapped literal [::ffff:127.0.0.1]); the action's attempts record EgressDenied, are not sent
// (no connection ever reaches the listener) and end Exhausted. A manager whose policy allows
// 127.0.0.1/32 validates the Destination and, after resolve=retry, sends the action exactly once.
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
	xa := env.WaitPhase(t, ns, "pay", actionsv1alpha1.PhaseExhausted, 30*time.Second)
	if xa.Status.Attempts != attempts || len(xa.Status.AttemptHistory) != int(attempts) {
		t.Fatalf("attempts %d, history %s, want %d attempts", xa.Status.Attempts, envtestutil.JSON(xa.Status.AttemptHistory), attempts)
	}
	for i, h := range xa.Status.AttemptHistory {
		if h.ErrorClass != string(httpexec.ClassEgressDenied) || h.Result != "NotSent" || h.StatusCode != 0 {
			t.Errorf("attemptHistory[%d] = %s, want errorClass EgressDenied, result NotSent", i, envtestutil.JSON(h))
		}
	}
	if n := l.Accepted(); n != 0 || srv.Summary().Requests != 0 {
		t.Fatalf("the denied destination accepted %d connections and %d requests, want 0", n, srv.Summary().Requests)
	}
	stop()

	// The admin allows 127.0.0.1/32; a person asks for a retry.
	env.StartManager(t, app.Options{Holder: "egress-open", Egress: envtestutil.LoopbackEgress()})
	destinationReady(t, ns, "loop", "True", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	cur := env.Get(t, ns, "pay")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Annotations = map[string]string{actionsv1alpha1.AnnotationResolve: actionsv1alpha1.DecisionRetry}
	if err := env.Client.Patch(context.Background(), cur, patch); err != nil {
		t.Fatal(err)
	}
	xa = env.WaitPhase(t, ns, "pay", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got := srv.Requests(ns + "/pay"); got != 1 {
		t.Errorf("requests = %d after the retry, want 1", got)
	}
	if last := xa.Status.AttemptHistory[len(xa.Status.AttemptHistory)-1]; last.StatusCode == 0 || last.ErrorClass != "" {
		t.Errorf("last attempt %s, want a response", envtestutil.JSON(last))
	}
}
