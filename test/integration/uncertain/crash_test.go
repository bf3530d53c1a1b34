package uncertain

import (
	"context"
	"testing"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// crashAfterSend performs the real request, then blocks until its manager stops: the response was read but the
// outcome is never recorded by that manager (C02: killed after accept, before the outcome write).
type crashAfterSend struct{ real httpexec.Executor }

func (e crashAfterSend) Execute(ctx context.Context, req httpexec.Request, maxBody int) httpexec.Result {
	e.real.Execute(ctx, req, maxBody)
	<-ctx.Done()
	return httpexec.Result{Err: ctx.Err(), ErrorClass: httpexec.ClassCanceled, Written: true}
}

// hangBeforeSend blocks until its manager stops without reaching the destination (C06: the claim is written,
// then the process dies before sending).
type hangBeforeSend struct{}

func (hangBeforeSend) Execute(ctx context.Context, _ httpexec.Request, _ int) httpexec.Result {
	<-ctx.Done()
	return httpexec.Result{Err: ctx.Err(), ErrorClass: httpexec.ClassCanceled}
}

// C02: the destination applied and answered, the manager died before writing the outcome. A new manager (new
// holder) finds the open claim after its expiry: with key support it resends with the same key and the
// destination applies nothing new; without support and without a post-check it is OutcomeUnknown, never resent.
func TestCrashAfterAccept(t *testing.T) {
	ns := env.Namespace(t)
	dedupSrv, dedupURL := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	plainSrv, plainURL := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "dedup", dedupURL, fast(2*time.Second, true))
	env.CreateDestination(t, ns, "plain", plainURL, fast(2*time.Second, false))
	// A shutdown grace of 1ns: for the sends in flight the stop is a crash (nothing is awaited or recorded).
	stop := env.StartManager(t, app.Options{Holder: "crash-1", ShutdownGrace: time.Nanosecond,
		Executor: crashAfterSend{real: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy()))}})

	env.Create(t, envtestutil.Action(ns, "with-key", "dedup", "/charges", `{"amount":1}`))
	env.Create(t, envtestutil.Action(ns, "without-key", "plain", "/charges", `{"amount":2}`))
	withKey, withoutKey := ns+"/with-key", ns+"/without-key"
	envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("both requests applied"), func() bool {
		return dedupSrv.Effects(withKey) == 1 && plainSrv.Effects(withoutKey) == 1
	})
	for _, name := range []string{"with-key", "without-key"} {
		xa := env.Get(t, ns, name)
		if c := xa.Status.Claim; c == nil || c.Holder != "crash-1" || c.Attempt != 1 || len(xa.Status.AttemptHistory) != 0 {
			t.Fatalf("%s: want an open claim of crash-1 and no recorded outcome, got %+v", name, xa.Status)
		}
	}
	stop()
	env.StartManager(t, app.Options{Holder: "restart-2"})

	xa := env.WaitPhase(t, ns, "with-key", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got := dedupSrv.Effects(withKey); got != 1 {
		t.Errorf("with key support: effects = %d, want 1", got)
	}
	log := dedupSrv.RequestLog(withKey)
	if len(log) != 2 || !log[1].Replayed {
		t.Errorf("with key support: %d requests (second replayed: %v), want the original and one replayed resend", len(log), len(log) == 2 && log[1].Replayed)
	}
	sameKey(t, log, withKey)
	if h := xa.Status.AttemptHistory; len(h) != 2 || h[0].Result != "Uncertain" || h[0].ErrorClass != "ClaimExpired" || h[1].StatusCode != 201 {
		t.Errorf("with key support: history = %+v", h)
	}

	u := env.WaitPhase(t, ns, "without-key", actionsv1alpha1.PhaseOutcomeUnknown, 30*time.Second)
	if !stalled(u) {
		t.Errorf("without key support: not Stalled: %+v", u.Status.Conditions)
	}
	time.Sleep(time.Second) // a short window in which a buggy controller would resend; the assertion is on the count
	if got := plainSrv.Requests(withoutKey); got != 1 {
		t.Errorf("without key support: requests = %d, want 1 (never resent by itself)", got)
	}
}

// C02 variant: the first outcome write meets a 409 Conflict (the object changed while the request was in
// flight). The outcome is re-applied to a fresh copy and written; nothing is sent again.
func TestOutcomeWriteConflictIsRetried(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{CommitDelay: time.Second})
	env.CreateDestination(t, ns, "slowish", url, fast(5*time.Second, false))
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "pay-409", "slowish", "/charges", `{"amount":1}`))
	key := ns + "/pay-409"
	envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("the request in flight"), func() bool { return srv.Requests(key) == 1 })
	// Change the object while the request is in flight: the claim's resourceVersion is now stale.
	env.WaitFor(t, ns, "pay-409", 10*time.Second, "label update", func(xa *actionsv1alpha1.ExternalAction) bool {
		xa.Labels = map[string]string{"touched": "during-send"}
		return env.Client.Update(context.Background(), xa) == nil
	})
	if srv.Effects(key) != 0 {
		t.Fatal("the request committed before the label update; the conflict was not provoked")
	}
	xa := env.WaitPhase(t, ns, "pay-409", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if xa.Labels["touched"] != "during-send" || xa.Status.Attempts != 1 || len(xa.Status.AttemptHistory) != 0 || xa.Status.Response == nil {
		t.Errorf("labels %v status %+v", xa.Labels, xa.Status)
	}
	if got := srv.Requests(key); got != 1 {
		t.Errorf("requests = %d, want 1", got)
	}
}

// C06: the claim is written, then the manager stops before sending. The claim carries an absolute, non-zero
// expiry after its start; a new manager sends nothing before it, then follows rule 3 (repeat-safe: resend).
func TestStuckClaimWaitsForExpiry(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	env.CreateDestination(t, ns, "dedup", url, fast(3*time.Second, true))
	// A shutdown grace of 1ns: for the send in flight the stop is a crash (nothing is awaited or recorded).
	stop := env.StartManager(t, app.Options{Holder: "stuck-1", Executor: hangBeforeSend{}, ShutdownGrace: time.Nanosecond})

	env.Create(t, envtestutil.Action(ns, "stuck", "dedup", "/charges", `{"amount":1}`))
	xa := env.WaitFor(t, ns, "stuck", 20*time.Second, "a claim", func(x *actionsv1alpha1.ExternalAction) bool { return x.Status.Claim != nil })
	c := *xa.Status.Claim
	if c.ExpiresAt.IsZero() || !c.ExpiresAt.After(c.StartedAt.Time) || c.Holder != "stuck-1" || c.Attempt != 1 {
		t.Fatalf("claim = %+v, want an absolute expiry after startedAt", c)
	}
	if earliest := c.StartedAt.Add(3 * time.Second); c.ExpiresAt.Time.Before(earliest) {
		t.Errorf("claim expires at %v, before startedAt + timeout %v", c.ExpiresAt, earliest)
	}
	stop()
	env.StartManager(t, app.Options{Holder: "stuck-2"})

	done := env.WaitPhase(t, ns, "stuck", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	key := ns + "/stuck"
	log := srv.RequestLog(key)
	if len(log) != 1 || srv.Effects(key) != 1 {
		t.Fatalf("requests %d effects %d, want 1 and 1", len(log), srv.Effects(key))
	}
	if log[0].At.Before(c.ExpiresAt.Time) {
		t.Errorf("the new manager sent at %v, before the claim's expiry %v", log[0].At, c.ExpiresAt)
	}
	if h := done.Status.AttemptHistory; len(h) != 2 || h[0].ErrorClass != "ClaimExpired" || done.Status.Attempts != 2 {
		t.Errorf("history = %+v attempts %d", h, done.Status.Attempts)
	}
}
