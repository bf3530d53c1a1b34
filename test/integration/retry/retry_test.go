package retry_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// 503, 503, 201: Succeeded after exactly 3 attempts, each retry no earlier than its scheduled delay
// (initialBackoff 300ms, multiplier 2, no jitter: 300ms then 600ms), and the history shows all three.
func TestRetryUntilSuccess(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	key := ns + "/r-503"
	srv.Script(key, destination.Step{Status: 503}, destination.Step{Status: 503})
	env.CreateDestination(t, ns, "svc", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = policy(5, 300*time.Millisecond)
	})
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "r-503", "svc", "/orders", `{"n":1}`))
	xa := env.WaitPhase(t, ns, "r-503", actionsv1alpha1.PhaseSucceeded, 30*time.Second)

	log := srv.RequestLog(key)
	if len(log) != 3 || xa.Status.Attempts != 3 {
		t.Fatalf("requests = %d, status.attempts = %d, want 3 and 3", len(log), xa.Status.Attempts)
	}
	for i, g := range gaps(log) {
		want := 300 * time.Millisecond << i
		if g < want-tolerance {
			t.Errorf("gap before attempt %d = %v, want >= scheduled %v", i+2, g, want)
		}
		t.Logf("gap before attempt %d: %v (scheduled %v)", i+2, g, want)
	}
	h := xa.Status.AttemptHistory
	if len(h) != 3 {
		t.Fatalf("attemptHistory = %s, want 3 entries", envtestutil.JSON(h))
	}
	for i, want := range []int32{503, 503, 201} {
		if h[i].Number != int32(i+1) || h[i].StatusCode != want || h[i].FinishedAt == nil {
			t.Errorf("attemptHistory[%d] = %s, want attempt %d with status %d", i, envtestutil.JSON(h[i]), i+1, want)
		}
	}
	if h[0].Result != "Retryable" || h[2].Result != "Success" {
		t.Errorf("results = %q, %q, want Retryable, Success", h[0].Result, h[2].Result)
	}
	for _, r := range log {
		if r.Header.Get("Idempotency-Key") != key {
			t.Errorf("a retry carried key %q, want %q", r.Header.Get("Idempotency-Key"), key)
		}
	}
}

// C10: attempts are at least the scheduled delay apart whatever watch events arrive; exactly maxAttempts of
// them, then Exhausted. A 422 is a business rejection. Without key support a POST's 500 is uncertain.
func TestBudgetSpacingC10(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	srv.Script("", destination.Repeat(10, destination.Step{Status: 500, Body: `{"code":"boom"}`})...)
	env.CreateDestination(t, ns, "dedup", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true}
		s.RetryPolicy = policy(3, time.Second)
	})
	env.CreateDestination(t, ns, "plain", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: false}
		s.RetryPolicy = policy(3, time.Second)
	})
	env.StartManager(t, app.Options{})

	t.Run("always 500 with key support", func(t *testing.T) {
		key := ns + "/c10-500"
		env.Create(t, envtestutil.Action(ns, "c10-500", "dedup", "/charges", `{"amount":1}`))
		stop := touchLabels(t, ns, "c10-500", 100*time.Millisecond)
		xa := env.WaitPhase(t, ns, "c10-500", actionsv1alpha1.PhaseExhausted, 60*time.Second)
		edits := stop()
		if edits < 6 {
			t.Errorf("only %d label edits landed during the waits; the test did not exercise unrelated events", edits)
		}
		// Nothing may follow the last attempt: a short window to give a buggy controller the chance to send.
		time.Sleep(time.Second)
		log := srv.RequestLog(key)
		if len(log) != 3 || xa.Status.Attempts != 3 {
			t.Fatalf("requests = %d, attempts = %d, want exactly 3", len(log), xa.Status.Attempts)
		}
		for i, g := range gaps(log) {
			want := time.Second << i
			if g < want-tolerance {
				t.Errorf("gap before attempt %d = %v, want >= scheduled %v (sending must be gated on nextAttemptAt)", i+2, g, want)
			}
			t.Logf("gap before attempt %d: %v (scheduled %v), %d label edits in all", i+2, g, want, edits)
		}
		if r := stalledReason(xa); r != actionsv1alpha1.ReasonAttemptsExhausted {
			t.Errorf("Stalled reason = %q, want %s; conditions %s", r, actionsv1alpha1.ReasonAttemptsExhausted, envtestutil.JSON(xa.Status.Conditions))
		}
		if xa.Status.Response == nil || xa.Status.Response.StatusCode != 500 {
			t.Errorf("response = %s, want the last 500", envtestutil.JSON(xa.Status.Response))
		}
		env.WaitEvent(t, ns, "c10-500", corev1.EventTypeWarning, actionsv1alpha1.ReasonAttemptsExhausted, 15*time.Second)
	})

	t.Run("422 is a business rejection", func(t *testing.T) {
		key := ns + "/c10-422"
		srv.Script(key, destination.Step{Status: 422, Body: `{"code":"invalid_amount"}`})
		env.Create(t, envtestutil.Action(ns, "c10-422", "dedup", "/charges", `{"amount":-1}`))
		xa := env.WaitPhase(t, ns, "c10-422", actionsv1alpha1.PhaseFailed, 30*time.Second)
		if n := srv.Requests(key); n != 1 {
			t.Fatalf("requests = %d, want 1", n)
		}
		if xa.Status.Response == nil || xa.Status.Response.StatusCode != 422 || !strings.Contains(xa.Status.Response.Body, "invalid_amount") {
			t.Errorf("response = %s, want the 422 kept as the outcome", envtestutil.JSON(xa.Status.Response))
		}
		if r := stalledReason(xa); r != actionsv1alpha1.ReasonRejected {
			t.Errorf("Stalled reason = %q, want %s", r, actionsv1alpha1.ReasonRejected)
		}
	})

	t.Run("500 without key support is uncertain", func(t *testing.T) {
		key := ns + "/c10-unsafe"
		env.Create(t, envtestutil.Action(ns, "c10-unsafe", "plain", "/charges", `{"amount":2}`))
		xa := env.WaitPhase(t, ns, "c10-unsafe", actionsv1alpha1.PhaseOutcomeUnknown, 30*time.Second)
		time.Sleep(1500 * time.Millisecond) // longer than the 1s backoff: a buggy controller would resend here
		if n := srv.Requests(key); n != 1 {
			t.Fatalf("requests = %d, want 1 (an uncertain POST is never resent by itself)", n)
		}
		if h := xa.Status.AttemptHistory; len(h) != 1 || h[0].Result != "Uncertain" || h[0].StatusCode != 500 {
			t.Errorf("attemptHistory = %s, want one Uncertain 500", envtestutil.JSON(h))
		}
		if r := stalledReason(xa); r != actionsv1alpha1.ReasonOutcomeUnknown {
			t.Errorf("Stalled reason = %q, want %s", r, actionsv1alpha1.ReasonOutcomeUnknown)
		}
	})
}

// C07: a 429 whose Retry-After is an HTTP-date about 2s ahead: no second request before that date, and
// status.nextAttemptAt shows a time no earlier than it while waiting.
func TestRetryAfterHTTPDateC07(t *testing.T) {
	ns := env.Namespace(t)
	inner := destination.New(destination.Options{})
	key := ns + "/c07"
	var date atomic.Value // time.Time of the Retry-After date sent
	var first atomic.Bool
	// The date is computed when the request arrives, from the real clock, so manager start-up time cannot eat it.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == key && first.CompareAndSwap(false, true) {
			d := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second) // whole seconds, 2-3s ahead
			date.Store(d)
			inner.Script(key, destination.Step{Status: 429, Header: map[string]string{"Retry-After": d.UTC().Format(http.TimeFormat)}})
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	env.CreateDestination(t, ns, "svc", ts.URL, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = policy(5, 100*time.Millisecond)
	})
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "c07", "svc", "/orders", `{"n":7}`))
	waiting := env.WaitFor(t, ns, "c07", 30*time.Second, "a scheduled retry after the 429", func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.Attempts >= 1 && xa.Status.NextAttemptAt != nil || xa.Status.Attempts >= 2
	})
	xa := env.WaitPhase(t, ns, "c07", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	d := date.Load().(time.Time)
	if waiting.Status.Attempts == 1 {
		if next := waiting.Status.NextAttemptAt.Time; next.Before(d) {
			t.Errorf("status.nextAttemptAt = %s, before the Retry-After date %s", next.UTC(), d.UTC())
		}
	} else {
		t.Logf("the wait was not observed (the poll missed it); checking the request times only")
	}
	log := inner.RequestLog(key)
	if len(log) != 2 {
		t.Fatalf("requests = %d, want 2", len(log))
	}
	if log[1].At.Before(d) {
		t.Errorf("second request at %s, before the Retry-After date %s", log[1].At.UTC().Format(time.RFC3339Nano), d.UTC())
	}
	if h := xa.Status.AttemptHistory; len(h) != 2 || h[0].StatusCode != 429 || h[0].RetryAfter != d.UTC().Format(http.TimeFormat) {
		t.Errorf("attemptHistory = %s, want the 429 with its Retry-After", envtestutil.JSON(h))
	}
}

// C08: a Retry-After past the deadline ends the action Exhausted at once, with the reason; a negative
// Retry-After counts as absent, so the normal backoff applies.
func TestAbsurdRetryAfterC08(t *testing.T) {
	ns := env.Namespace(t)
	// Separate destinations: a 429 pauses its whole destination for the Retry-After.
	s1, url1 := envtestutil.DestinationServer(t, destination.Options{})
	s2, url2 := envtestutil.DestinationServer(t, destination.Options{})
	s3, url3 := envtestutil.DestinationServer(t, destination.Options{})
	for name, url := range map[string]string{"hour": url1, "negative": url2, "huge": url3} {
		env.CreateDestination(t, ns, name, url, func(s *actionsv1alpha1.DestinationSpec) {
			s.RetryPolicy = policy(5, 300*time.Millisecond)
			s.RetryPolicy.Deadline = &metav1.Duration{Duration: 10 * time.Minute}
		})
	}
	s1.Script(ns+"/c08-3600", destination.Step{Status: 429, Header: map[string]string{"Retry-After": "3600"}})
	s2.Script(ns+"/c08-neg", destination.Step{Status: 429, Header: map[string]string{"Retry-After": "-5"}})
	s3.Script(ns+"/c08-huge", destination.Step{Status: 429, Header: map[string]string{"Retry-After": "99999999999"}})
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "c08-3600", "hour", "/x", `{}`))
	env.Create(t, envtestutil.Action(ns, "c08-neg", "negative", "/x", `{}`))
	env.Create(t, envtestutil.Action(ns, "c08-huge", "huge", "/x", `{}`))

	for name, s := range map[string]*destination.Server{"c08-3600": s1, "c08-huge": s3} {
		xa := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseExhausted, 30*time.Second)
		if n := s.Requests(ns + "/" + name); n != 1 {
			t.Errorf("%s: requests = %d, want 1", name, n)
		}
		if r := stalledReason(xa); r != actionsv1alpha1.ReasonRetryAfterPastDeadline {
			t.Errorf("%s: Stalled reason = %q, want %s", name, r, actionsv1alpha1.ReasonRetryAfterPastDeadline)
		}
		if xa.Status.NextAttemptAt != nil || xa.Status.CompletedAt == nil {
			t.Errorf("%s: nextAttemptAt = %v, completedAt = %v; want none and set", name, xa.Status.NextAttemptAt, xa.Status.CompletedAt)
		}
		c := xa.Status.Conditions[0]
		for _, cond := range xa.Status.Conditions {
			if cond.Type == actionsv1alpha1.ConditionStalled {
				c = cond
			}
		}
		if !strings.Contains(c.Message, "deadline") {
			t.Errorf("%s: Stalled message %q does not say why", name, c.Message)
		}
	}

	xa := env.WaitPhase(t, ns, "c08-neg", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	log := s2.RequestLog(ns + "/c08-neg")
	if len(log) != 2 || xa.Status.Attempts != 2 {
		t.Fatalf("requests = %d, attempts = %d, want 2", len(log), xa.Status.Attempts)
	}
	if g := log[1].At.Sub(log[0].At); g < 300*time.Millisecond-tolerance {
		t.Errorf("gap after Retry-After -5 = %v, want the normal backoff (>= 300ms)", g)
	}
}

// A refused connection proves nothing was sent (DESIGN rule 4): retried up to maxAttempts, then Exhausted, every
// attempt recorded with errorClass Dial.
func TestDialRefusedIsRetried(t *testing.T) {
	ns := env.Namespace(t)
	env.CreateDestination(t, ns, "gone", "http://"+closedPort(t), func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = policy(3, 100*time.Millisecond)
	})
	env.StartManager(t, app.Options{})
	env.Create(t, envtestutil.Action(ns, "dial", "gone", "/x", `{"n":1}`))
	xa := env.WaitPhase(t, ns, "dial", actionsv1alpha1.PhaseExhausted, 30*time.Second)
	if xa.Status.Attempts != 3 {
		t.Errorf("attempts = %d, want 3", xa.Status.Attempts)
	}
	if r := stalledReason(xa); r != actionsv1alpha1.ReasonAttemptsExhausted {
		t.Errorf("Stalled reason = %q, want %s", r, actionsv1alpha1.ReasonAttemptsExhausted)
	}
	h := xa.Status.AttemptHistory
	if len(h) != 3 {
		t.Fatalf("attemptHistory = %s, want 3 entries", envtestutil.JSON(h))
	}
	for _, r := range h {
		if r.ErrorClass != "Dial" || r.Result != "NotSent" || r.StatusCode != 0 {
			t.Errorf("attempt %d = %s, want errorClass Dial, result NotSent", r.Number, envtestutil.JSON(r))
		}
	}
}

// spec.retryPolicy may only tighten the destination's: looser is InvalidSpec (naming the field), nothing sent;
// tighter is honoured.
func TestActionPolicyOnlyTightens(t *testing.T) {
	ns := env.Namespace(t)
	s, url := envtestutil.DestinationServer(t, destination.Options{})
	s.Script("", destination.Repeat(10, destination.Step{Status: 503})...)
	env.CreateDestination(t, ns, "svc", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = policy(3, 100*time.Millisecond)
	})
	env.StartManager(t, app.Options{})

	loose := envtestutil.Action(ns, "loose", "svc", "/x", `{}`)
	loose.Spec.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: new(int32(10))}
	tight := envtestutil.Action(ns, "tight", "svc", "/x", `{}`)
	tight.Spec.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: new(int32(2))}
	env.Create(t, loose)
	env.Create(t, tight)

	xa := env.WaitPhase(t, ns, "loose", actionsv1alpha1.PhaseFailed, 30*time.Second)
	if r := stalledReason(xa); r != actionsv1alpha1.ReasonInvalidSpec {
		t.Errorf("Stalled reason = %q, want %s", r, actionsv1alpha1.ReasonInvalidSpec)
	}
	if !strings.Contains(xa.Status.LastError, "maxAttempts") || !strings.Contains(xa.Status.LastError, "retryPolicy") {
		t.Errorf("message %q does not name the field", xa.Status.LastError)
	}
	if n := s.Requests(ns + "/loose"); n != 0 {
		t.Errorf("loose: requests = %d, want 0", n)
	}

	xa = env.WaitPhase(t, ns, "tight", actionsv1alpha1.PhaseExhausted, 30*time.Second)
	if n := s.Requests(ns + "/tight"); n != 2 || xa.Status.Attempts != 2 {
		t.Errorf("tight: requests = %d, attempts = %d, want 2", n, xa.Status.Attempts)
	}
	if r := stalledReason(xa); r != actionsv1alpha1.ReasonAttemptsExhausted {
		t.Errorf("tight: Stalled reason = %q, want %s", r, actionsv1alpha1.ReasonAttemptsExhausted)
	}
}
