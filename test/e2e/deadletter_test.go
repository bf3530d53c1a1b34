package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/deadletter"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// exhausting is a destination spec mutation: every attempt answers 503 (scripted on the server), two attempts,
// a short backoff, and spec.deadLetter to the Destination sink.
func exhausting(sink actionsv1alpha1.DestinationReference) func(*actionsv1alpha1.DestinationSpec) {
	return func(s *actionsv1alpha1.DestinationSpec) {
		two := int32(2)
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &two, InitialBackoff: seconds(100 * time.Millisecond),
			MaxBackoff: seconds(200 * time.Millisecond), Jitter: actionsv1alpha1.JitterNone}
		s.DeadLetter = &actionsv1alpha1.DeadLetterSink{DestinationRef: sink, Path: "/dead-letters"}
	}
}

// waitDeadLetter waits until status.deadLetter is in state want.
func waitDeadLetter(t *testing.T, env *envtestutil.Env, ns, name string, want actionsv1alpha1.DeadLetterState,
	timeout time.Duration) *actionsv1alpha1.ExternalAction {
	t.Helper()
	return env.WaitFor(t, ns, name, timeout, "status.deadLetter.state "+string(want), func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.DeadLetter != nil && xa.Status.DeadLetter.State == want
	})
}

// An action that exhausts delivers exactly one CloudEvent to its sink even when the manager is SIGKILLed while
// the delivery is in flight: the claim in status.deadLetter outlives the process, the next manager finds it
// expired (DESIGN rule 3), and since the sink deduplicates on the key it resends under the same key
// (<key>/dead-letter), which the sink answers from its record without a second effect. The action's phase is
// never changed by the delivery.
func TestDeadLetterAcrossManagerKill(t *testing.T) {
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Env.Stop() })
	kubeconfig := env.Kubeconfig(t)

	pay, payURL := envtestutil.DestinationServer(t, destination.Options{})
	sink, sinkURL := envtestutil.DestinationServer(t, destination.Options{Dedup: true, CommitDelay: 3 * time.Second})
	ns := env.Namespace(t)
	key := ns + "/refund-9"
	pay.Script(key, destination.Repeat(5, destination.Step{Status: 503, Body: `{"error":"busy"}`})...)
	env.CreateDestination(t, ns, "sink", sinkURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Timeout = seconds(8 * time.Second)
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true}
	})
	env.CreateDestination(t, ns, "pay", payURL, exhausting(actionsv1alpha1.DestinationReference{Name: "sink"}))
	mgr := startManager(t, kubeconfig)

	env.Create(t, envtestutil.Action(ns, "refund-9", "pay", "/refunds", `{"order":9}`))
	dlKey := key + deadletter.KeySuffix
	envtestutil.Eventually(t, time.Minute, envtestutil.Say("the dead-letter delivery in flight at the sink"),
		func() bool { return sink.Requests(dlKey) == 1 })
	xa := env.Get(t, ns, "refund-9")
	if dl := xa.Status.DeadLetter; dl == nil || dl.State != actionsv1alpha1.DeadLetterDelivering || dl.Claim == nil {
		t.Fatalf("while the delivery is in flight, status.deadLetter = %s; want its claim written before the send", envtestutil.JSON(xa.Status.DeadLetter))
	}
	mgr.kill() // SIGKILL mid-delivery: the claim stays open, no outcome is recorded

	startManager(t, kubeconfig)
	xa = waitDeadLetter(t, env, ns, "refund-9", actionsv1alpha1.DeadLetterDelivered, time.Minute)
	if got := sink.Effects(dlKey); got != 1 {
		t.Errorf("the sink applied %d dead-letter records for %s, want exactly 1", got, key)
	}
	log := sink.RequestLog(dlKey)
	if len(log) != 2 || !log[1].Replayed {
		t.Errorf("sink requests: %d (second replayed: %v); want the killed delivery and one resend answered from the sink's record",
			len(log), len(log) == 2 && log[1].Replayed)
	}
	dl := xa.Status.DeadLetter
	if dl.Attempts != 2 || dl.StatusCode != 201 || dl.DeliveredAt == nil || dl.IdempotencyKey != dlKey || dl.Sink != "Destination/"+ns+"/sink" {
		t.Errorf("status.deadLetter = %s", envtestutil.JSON(dl))
	}
	if xa.Status.Phase != actionsv1alpha1.PhaseExhausted || xa.Status.Attempts != 2 {
		t.Errorf("the action is %s after %d attempts; want Exhausted after 2, unchanged by the delivery", xa.Status.Phase, xa.Status.Attempts)
	}
	if got := pay.Requests(key); got != 2 {
		t.Errorf("the action's destination got %d requests, want 2: the delivery never re-sends the request", got)
	}
	checkCloudEvent(t, log[0], ns, xa)
}

// checkCloudEvent checks one delivery as the sink received it: CloudEvents 1.0 binary mode, the key as the
// idempotency key and the event id, and the record's fields.
func checkCloudEvent(t *testing.T, r destination.Received, ns string, xa *actionsv1alpha1.ExternalAction) {
	t.Helper()
	key := ns + "/" + xa.Name
	h := r.Header
	for name, want := range map[string]string{
		"Ce-Specversion": "1.0", "Ce-Type": deadletter.EventType, "Ce-Id": key + deadletter.KeySuffix,
		"Ce-Source":       "/apis/actions.actionledger.dev/v1alpha1/namespaces/" + ns + "/externalactions/" + xa.Name,
		"Idempotency-Key": key + deadletter.KeySuffix, "Content-Type": "application/json",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("sink header %s = %q, want %q", name, got, want)
		}
	}
	if r.Method != "POST" || r.Path != "/dead-letters" {
		t.Errorf("sink request %s %s, want POST /dead-letters", r.Method, r.Path)
	}
	var rec deadletter.Record
	if err := json.Unmarshal(r.Body, &rec); err != nil {
		t.Fatalf("the record is not JSON: %v\n%s", err, r.Body)
	}
	st := xa.Status
	if rec.Key != key || rec.Fingerprint != st.Fingerprint || rec.Phase != st.Phase || rec.Attempts != st.Attempts ||
		rec.StatusCode != 503 || rec.Body != `{"error":"busy"}` || rec.Reason != actionsv1alpha1.ReasonAttemptsExhausted ||
		rec.BodySHA256 == "" || rec.CompletedAt == nil {
		t.Errorf("record %s; want the key, fingerprint, phase, reason, attempts, last status code and body of %s", r.Body, envtestutil.JSON(st))
	}
}

// A sink that answers 500 is retried within its own retry policy and status.deadLetter says so at each step;
// a sink that keeps failing ends Failed after its last attempt. A ClusterDestination sink whose namespaceSelector
// does not admit the action's namespace is refused before anything is sent (reason NamespaceNotAllowed), and
// the API server refuses a ClusterDestination whose deadLetter names a namespaced Destination.
func TestDeadLetterRetriesAndRefusal(t *testing.T) {
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Env.Stop() })
	kubeconfig := env.Kubeconfig(t)

	rejecting, rejURL := envtestutil.DestinationServer(t, destination.Options{})
	sink, sinkURL := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	ns := env.Namespace(t)
	for _, n := range []string{"flaky", "down", "outside", "own"} {
		rejecting.Script(ns+"/"+n, destination.Step{Status: 422, Body: `{"error":"invalid account"}`})
	}
	sink.Script(ns+"/flaky"+deadletter.KeySuffix, destination.Repeat(2, destination.Step{Status: 500})...)
	sink.Script(ns+"/down"+deadletter.KeySuffix, destination.Repeat(10, destination.Step{Status: 500})...)
	three := int32(3)
	env.CreateDestination(t, ns, "sink", sinkURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true} // a 500 is then retried directly
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &three, InitialBackoff: seconds(time.Second),
			MaxBackoff: seconds(time.Second), Jitter: actionsv1alpha1.JitterNone}
	})
	env.CreateDestination(t, ns, "shop", rejURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.DeadLetter = &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{Name: "sink"},
			Mode: actionsv1alpha1.CloudEventStructured}
	})
	env.CreateDestination(t, ns, "guarded", rejURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.DeadLetter = &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{
			Kind: "ClusterDestination", Name: "admins-sink-" + ns}}
	})
	cd := &actionsv1alpha1.ClusterDestination{ObjectMeta: metav1.ObjectMeta{Name: "admins-sink-" + ns}}
	cd.Spec.URL = sinkURL
	cd.Spec.Response = &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{}}
	cd.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"dead-letters": "allowed"}}
	env.Create(t, cd)
	bad := &actionsv1alpha1.ClusterDestination{ObjectMeta: metav1.ObjectMeta{Name: "bad-" + ns}}
	bad.Spec.URL = sinkURL
	bad.Spec.Response = &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{}}
	bad.Spec.DeadLetter = &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{Name: "sink"}}
	if err := env.Client.Create(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "must name a ClusterDestination") {
		t.Errorf("a ClusterDestination whose deadLetter names a Destination: %v; want the admission message", err)
	}
	startManager(t, kubeconfig)

	env.Create(t, envtestutil.Action(ns, "flaky", "shop", "/orders", `{"n":1}`))
	env.Create(t, envtestutil.Action(ns, "down", "shop", "/orders", `{"n":2}`))
	env.Create(t, envtestutil.Action(ns, "outside", "guarded", "/orders", `{"n":3}`))
	// An action's own spec.deadLetter overrides its destination's: the same sink, in binary mode, at another path.
	own := envtestutil.Action(ns, "own", "shop", "/orders", `{"n":4}`)
	own.Spec.DeadLetter = &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{Name: "sink"}, Path: "/own-cases"}
	env.Create(t, own)

	// While retried: Pending with the 500 and the reason.
	env.WaitFor(t, ns, "flaky", time.Minute, "a delivery retry scheduled after a 500", func(xa *actionsv1alpha1.ExternalAction) bool {
		dl := xa.Status.DeadLetter
		return dl != nil && dl.State == actionsv1alpha1.DeadLetterPending && dl.StatusCode == 500 &&
			dl.Reason == actionsv1alpha1.ReasonDeadLetterRetrying && dl.NextAttemptAt != nil
	})
	xa := waitDeadLetter(t, env, ns, "flaky", actionsv1alpha1.DeadLetterDelivered, time.Minute)
	if dl := xa.Status.DeadLetter; dl.Attempts != 3 || dl.StatusCode != 201 || xa.Status.Phase != actionsv1alpha1.PhaseFailed {
		t.Errorf("flaky: %s in phase %s; want delivered by attempt 3 with the phase still Failed", envtestutil.JSON(dl), xa.Status.Phase)
	}
	if got := sink.Requests(ns + "/flaky" + deadletter.KeySuffix); got != 3 {
		t.Errorf("flaky: the sink got %d deliveries, want 3", got)
	}
	if r := sink.RequestLog(ns + "/flaky" + deadletter.KeySuffix)[0]; !strings.HasPrefix(r.Header.Get("Content-Type"), "application/cloudevents+json") {
		t.Errorf("structured mode: Content-Type %q", r.Header.Get("Content-Type"))
	}
	xa = waitDeadLetter(t, env, ns, "down", actionsv1alpha1.DeadLetterFailed, time.Minute)
	if dl := xa.Status.DeadLetter; dl.Attempts != 3 || dl.StatusCode != 500 || dl.Reason != actionsv1alpha1.ReasonDeadLetterFailed {
		t.Errorf("down: %s; want Failed after 3 attempts with status 500", envtestutil.JSON(dl))
	}

	ownXA := waitDeadLetter(t, env, ns, "own", actionsv1alpha1.DeadLetterDelivered, time.Minute)
	ownXA.Spec.DeadLetter.Path = "/elsewhere"
	if err := env.Client.Update(context.Background(), ownXA); err == nil || !strings.Contains(err.Error(), "spec.deadLetter is immutable") {
		t.Errorf("changing spec.deadLetter: %v; want the immutability message", err)
	}
	if log := sink.RequestLog(ns + "/own" + deadletter.KeySuffix); len(log) != 1 || log[0].Path != "/own-cases" ||
		log[0].Header.Get("Ce-Id") != ns+"/own"+deadletter.KeySuffix {
		t.Errorf("own spec.deadLetter: %d deliveries (path %v); want one binary-mode delivery to /own-cases", len(log), log)
	}
	xa = waitDeadLetter(t, env, ns, "outside", actionsv1alpha1.DeadLetterRefused, time.Minute)
	if dl := xa.Status.DeadLetter; dl.Reason != actionsv1alpha1.ReasonNamespaceNotAllowed || dl.Attempts != 0 || dl.Claim != nil {
		t.Errorf("outside: %s; want Refused with reason NamespaceNotAllowed and nothing claimed", envtestutil.JSON(dl))
	}
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("nothing sent to a sink that does not admit the namespace"), func() bool {
		return sink.Requests(ns+"/outside"+deadletter.KeySuffix) == 0
	})
	out := kubectl(t, kubeconfig, "", "get", "xa", "outside", "-n", ns, "-o", "jsonpath={.status.deadLetter.message}")
	if !strings.Contains(out, "namespaceSelector") {
		t.Errorf("status.deadLetter.message %q does not say why", out)
	}
}

// A dead letter is never lost: the record an action owes is recorded in its status when it finishes, and holds
// the action until the record is delivered or a person gives it up, whatever becomes of the destinations. Two
// actions exhaust and owe a record to the sink, whose first answer to each is a 503 (retried in 10 s). The sink
// Destination is then deleted while both records are pending:
//   - "kept" (ttlSecondsAfterFinished 1) is past its expiresAt and still there, Stalled with reason
//     DeadLetterSinkUnavailable naming the sink; once the sink is created again its record is delivered exactly
//     once, and only then is the action collected.
//   - "dropped" is deleted by a person: the deletion waits for its record, until the person gives the record up
//     (actions.actionledger.dev/dead-letter=give-up), which is recorded (Event DeadLetterGivenUp) and lets it go.
func TestDeadLetterHeldWhileTheSinkIsGone(t *testing.T) {
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Env.Stop() })
	kubeconfig := env.Kubeconfig(t)
	ctx := context.Background()

	pay, payURL := envtestutil.DestinationServer(t, destination.Options{})
	sink, sinkURL := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	ns := env.Namespace(t)
	names := []string{"kept", "dropped"}
	for _, n := range names {
		pay.Script(ns+"/"+n, destination.Repeat(5, destination.Step{Status: 503, Body: `{"error":"busy"}`})...)
		sink.Script(ns+"/"+n+deadletter.KeySuffix, destination.Step{Status: 503})
	}
	five := int32(5)
	sinkSpec := func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true}
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &five, InitialBackoff: seconds(10 * time.Second),
			MaxBackoff: seconds(10 * time.Second), Jitter: actionsv1alpha1.JitterNone}
	}
	env.CreateDestination(t, ns, "sink", sinkURL, sinkSpec)
	env.CreateDestination(t, ns, "pay", payURL, exhausting(actionsv1alpha1.DestinationReference{Name: "sink"}))
	startManager(t, kubeconfig)

	kept := envtestutil.Action(ns, "kept", "pay", "/refunds", `{"order":1}`)
	one := int32(1)
	kept.Spec.TTLSecondsAfterFinished = &one
	env.Create(t, kept)
	env.Create(t, envtestutil.Action(ns, "dropped", "pay", "/refunds", `{"order":2}`))
	for _, n := range names {
		env.WaitFor(t, ns, n, time.Minute, "the first delivery answered 503, the next one scheduled", func(xa *actionsv1alpha1.ExternalAction) bool {
			dl := xa.Status.DeadLetter
			return dl != nil && dl.State == actionsv1alpha1.DeadLetterPending && dl.StatusCode == 503 && dl.NextAttemptAt != nil
		})
	}
	if err := env.Client.Delete(ctx, &actionsv1alpha1.Destination{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sink"}}); err != nil {
		t.Fatalf("deleting the sink: %v", err)
	}

	sinkID := "Destination/" + ns + "/sink"
	xa := env.WaitFor(t, ns, "kept", time.Minute, "Stalled DeadLetterSinkUnavailable naming the sink", func(xa *actionsv1alpha1.ExternalAction) bool {
		c := conditionOf(xa, actionsv1alpha1.ConditionStalled)
		return c != nil && c.Reason == actionsv1alpha1.ReasonDeadLetterSinkUnavailable && strings.Contains(c.Message, sinkID)
	})
	if dl := xa.Status.DeadLetter; dl.State != actionsv1alpha1.DeadLetterRefused || dl.Sink != sinkID || dl.Path != "/dead-letters" {
		t.Errorf("kept: status.deadLetter %s; want Refused, the sink and path as recorded when the action finished", envtestutil.JSON(dl))
	}
	if exp := xa.Status.ExpiresAt; exp == nil || !time.Now().After(exp.Time) {
		t.Fatalf("kept: expiresAt %v is not past; the test must wait past it", exp)
	}
	envtestutil.Consistently(t, 3*time.Second, envtestutil.Say("kept, past its expiresAt with its record owed, is not collected"), func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(kept), &actionsv1alpha1.ExternalAction{}) == nil
	})

	// A person deletes "dropped": the deletion waits for the record owed, until the person gives it up.
	dropped := env.Get(t, ns, "dropped")
	if err := env.Client.Delete(ctx, dropped); err != nil {
		t.Fatalf("deleting dropped: %v", err)
	}
	env.WaitFor(t, ns, "dropped", time.Minute, "deletion held, Stalled naming the sink", func(xa *actionsv1alpha1.ExternalAction) bool {
		c := conditionOf(xa, actionsv1alpha1.ConditionStalled)
		return !xa.DeletionTimestamp.IsZero() && c != nil && c.Reason == actionsv1alpha1.ReasonDeadLetterSinkUnavailable
	})
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("dropped's deletion waits for its record"), func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(dropped), &actionsv1alpha1.ExternalAction{}) == nil
	})
	env.Annotate(t, ns, "dropped", map[string]string{actionsv1alpha1.AnnotationDeadLetter: actionsv1alpha1.DeadLetterGiveUp,
		actionsv1alpha1.AnnotationDeadLetterReason: "case opened by hand"})
	gone(t, env, ns, "dropped")
	env.WaitEvent(t, ns, "dropped", corev1.EventTypeWarning, actionsv1alpha1.ReasonDeadLetterGivenUp, 10*time.Second)

	// The sink comes back: kept's record is delivered exactly once, then kept is collected.
	env.CreateDestination(t, ns, "sink", sinkURL, sinkSpec)
	gone(t, env, ns, "kept")
	if got := sink.Effects(ns + "/kept" + deadletter.KeySuffix); got != 1 {
		t.Errorf("kept: the sink applied %d dead-letter records, want exactly 1", got)
	}
	if got := sink.Requests(ns + "/kept" + deadletter.KeySuffix); got != 2 {
		t.Errorf("kept: the sink got %d deliveries, want 2 (the 503, then the delivery)", got)
	}
	if got := sink.Requests(ns + "/dropped" + deadletter.KeySuffix); got != 1 {
		t.Errorf("dropped: the sink got %d deliveries, want only the first 503 (the record was given up)", got)
	}
	env.WaitEvent(t, ns, "kept", corev1.EventTypeNormal, actionsv1alpha1.ReasonDeadLetterDelivered, 10*time.Second)
}

// conditionOf is the condition t of xa, or nil.
func conditionOf(xa *actionsv1alpha1.ExternalAction, t string) *metav1.Condition {
	for i := range xa.Status.Conditions {
		if xa.Status.Conditions[i].Type == t {
			return &xa.Status.Conditions[i]
		}
	}
	return nil
}

// gone waits until the action ns/name no longer exists.
func gone(t *testing.T, env *envtestutil.Env, ns, name string) {
	t.Helper()
	var last *actionsv1alpha1.ExternalAction
	envtestutil.Eventually(t, time.Minute, func() string {
		return ns + "/" + name + " gone; last " + envtestutil.JSON(last)
	}, func() bool {
		last = &actionsv1alpha1.ExternalAction{}
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, last))
	})
}
