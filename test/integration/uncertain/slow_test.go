package uncertain

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// C03: the destination takes 3s to commit, the attempt timeout is 1s. The timeout is uncertain, the resend with
// the same key meets 409 idempotency_key_in_use (wait and ask again), then the stored 201: one effect.
func TestSlowDestinationWithDedup(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true, CommitDelay: 3 * time.Second})
	env.CreateDestination(t, ns, "slow", url, fast(time.Second, true))
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "pay-slow", "slow", "/charges", `{"amount":100}`))
	xa := env.WaitPhase(t, ns, "pay-slow", actionsv1alpha1.PhaseSucceeded, 40*time.Second)

	key := ns + "/pay-slow"
	if got := srv.Effects(key); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
	log := srv.RequestLog(key)
	if len(log) < 2 {
		t.Fatalf("requests = %d, want the timed-out first attempt and at least one resend", len(log))
	}
	sameKey(t, log, key)
	if !log[len(log)-1].Replayed || xa.Status.Response == nil || xa.Status.Response.StatusCode != 201 ||
		xa.Status.Response.Headers["Idempotent-Replayed"] != "true" {
		t.Errorf("final answer not the stored 201: replayed=%v response=%+v", log[len(log)-1].Replayed, xa.Status.Response)
	}
	h := xa.Status.AttemptHistory
	if len(h) < 2 || h[0].Result != "Uncertain" || h[0].ErrorClass == "" {
		t.Errorf("first attempt should be recorded uncertain (timeout): %+v", h)
	}
	if int(xa.Status.Attempts) != len(log) {
		t.Errorf("status.attempts = %d, destination saw %d requests", xa.Status.Attempts, len(log))
	}
}

// C03 variant: a proxy answers 504 after the request was applied. With key support the 504 is retried with the
// same key and the destination replays the stored 201: one effect.
func TestGatewayTimeoutAfterApplyWithDedup(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	key := ns + "/pay-504"
	srv.Script(key, destination.Step{Status: 504, Apply: true, Body: `{"error":"gateway timeout"}`})
	env.CreateDestination(t, ns, "gw", url, fast(5*time.Second, true))
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "pay-504", "gw", "/charges", `{"amount":100}`))
	xa := env.WaitPhase(t, ns, "pay-504", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got := srv.Effects(key); got != 1 {
		t.Fatalf("effects = %d, want 1", got)
	}
	if got := srv.Requests(key); got != 2 {
		t.Errorf("requests = %d, want 2 (504, then the replayed 201)", got)
	}
	sameKey(t, srv.RequestLog(key), key)
	if h := xa.Status.AttemptHistory; len(h) != 2 || h[0].StatusCode != 504 || h[1].StatusCode != 201 {
		t.Errorf("history = %+v", h)
	}
}

// Without key support and without a post-check a POST that times out is OutcomeUnknown: Stalled, a Warning
// Event, and never re-sent.
func TestTimeoutWithoutKeySupportIsOutcomeUnknown(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	key := ns + "/pay-unk"
	srv.Script(key, destination.Step{Delay: 3 * time.Second, Apply: true, Status: 201})
	env.CreateDestination(t, ns, "plain", url, fast(time.Second, false))
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "pay-unk", "plain", "/charges", `{"amount":100}`))
	xa := env.WaitPhase(t, ns, "pay-unk", actionsv1alpha1.PhaseOutcomeUnknown, 30*time.Second)
	if !stalled(xa) || xa.Status.Claim != nil || xa.Status.ExpiresAt != nil {
		t.Errorf("status = %+v", xa.Status)
	}
	if h := xa.Status.AttemptHistory; len(h) != 1 || h[0].Result != "Uncertain" {
		t.Errorf("history = %+v", h)
	}
	env.WaitEvent(t, ns, "pay-unk", corev1.EventTypeWarning, actionsv1alpha1.ReasonOutcomeUnknown, 20*time.Second)
	// The destination commits late; afterwards nothing may be re-sent. Wait for the commit (a condition), then
	// keep watching a short window in which a buggy controller would resend.
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the late commit"), func() bool { return srv.Effects(key) == 1 })
	time.Sleep(2 * time.Second)
	if got := srv.Requests(key); got != 1 {
		t.Fatalf("requests = %d, want exactly 1 ever", got)
	}
	if xa := env.Get(t, ns, "pay-unk"); xa.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown || xa.Status.Attempts != 1 {
		t.Errorf("later status = %+v", xa.Status)
	}
}

// A post-check settles uncertain attempts: (a) a timed-out request that the destination applied late is proven
// applied; (b) a reset connection that applied nothing is proven not applied and re-sent once.
func TestPostCheck(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	applied, notApplied := ns+"/pc-applied", ns+"/pc-not-applied"
	srv.Script(applied, destination.Step{Delay: 1500 * time.Millisecond, Apply: true, Status: 201})
	srv.Script(notApplied, destination.Step{CloseConn: true})
	env.CreateDestination(t, ns, "checked", url, fast(time.Second, false, postCheck))
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "pc-applied", "checked", "/charges", `{"amount":1}`))
	env.Create(t, envtestutil.Action(ns, "pc-not-applied", "checked", "/charges", `{"amount":2}`))

	a := env.WaitPhase(t, ns, "pc-applied", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got := srv.Requests(applied); got != 1 {
		t.Errorf("(a) requests = %d, want 1 (the post-check proved it applied)", got)
	}
	if got := srv.Effects(applied); got != 1 {
		t.Errorf("(a) effects = %d, want 1", got)
	}
	if h := a.Status.AttemptHistory; len(h) != 1 || h[0].Result != "Applied" || a.Status.Response == nil || a.Status.Response.StatusCode != 200 {
		t.Errorf("(a) history %+v response %+v", h, a.Status.Response)
	}

	b := env.WaitPhase(t, ns, "pc-not-applied", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got := srv.Effects(notApplied); got != 1 {
		t.Errorf("(b) effects = %d, want 1", got)
	}
	if got := srv.Requests(notApplied); got != 2 {
		t.Errorf("(b) requests = %d, want 2 (reset, then the resend)", got)
	}
	sameKey(t, srv.RequestLog(notApplied), notApplied)
	if h := b.Status.AttemptHistory; len(h) != 2 || h[0].Result != "NotApplied" || h[1].StatusCode != 201 {
		t.Errorf("(b) history = %s %+v", historyResults(b), h)
	}
}
