package deadletter

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/retry"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func env(mut ...func(*ledger.Env)) ledger.Env {
	e := ledger.Env{Now: t0, Holder: "h1",
		Policy: retry.Policy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, Multiplier: 2,
			Jitter: retry.JitterNone, RetryOnStatus: retry.DefaultRetryOnStatus(), Deadline: t0.Add(time.Hour)},
		AttemptTimeout: 10 * time.Second, ClaimMargin: 2 * time.Second, Rand: func() float64 { return 0.5 }}
	for _, m := range mut {
		m(&e)
	}
	return e
}

func repeatSafe(e *ledger.Env) { e.RepeatSafe, e.KeySupported = true, true }

// claimedAt is a record due with delivery attempt n claimed at t0 by holder h0.
func claimedAt(t *testing.T, n int32, mut ...func(*ledger.Env)) *actionsv1alpha1.DeadLetterStatus {
	t.Helper()
	st := Begin("Destination/ns/sink", actionsv1alpha1.PhaseExhausted)
	st.Attempts = n - 1
	step := Keyed(Advance(st, env(mut...)), "ns/a/dead-letter")
	if step.Kind != ledger.KindSend {
		t.Fatalf("Advance of a due record: %s, want Send", step.Kind)
	}
	step.Status.Claim.Holder = "h0"
	return step.Status
}

func TestDue(t *testing.T) {
	for _, c := range []struct {
		phase  actionsv1alpha1.Phase
		phases []actionsv1alpha1.DeadLetterPhase
		want   bool
	}{
		{actionsv1alpha1.PhaseExhausted, nil, true},
		{actionsv1alpha1.PhaseFailed, nil, true},
		{actionsv1alpha1.PhaseOutcomeUnknown, nil, false}, // only when asked: a person may still decide
		{actionsv1alpha1.PhaseOutcomeUnknown, []actionsv1alpha1.DeadLetterPhase{"OutcomeUnknown"}, true},
		{actionsv1alpha1.PhaseFailed, []actionsv1alpha1.DeadLetterPhase{"Exhausted"}, false},
		{actionsv1alpha1.PhaseSucceeded, nil, false},
		{actionsv1alpha1.PhaseConflict, nil, false},
	} {
		if got := Due(c.phase, c.phases); got != c.want {
			t.Errorf("Due(%s, %v) = %v, want %v", c.phase, c.phases, got, c.want)
		}
	}
}

func TestClaimBeforeSend(t *testing.T) {
	st := claimedAt(t, 1)
	if st.State != actionsv1alpha1.DeadLetterDelivering || st.Attempts != 1 || st.Claim == nil || st.Claim.Attempt != 1 {
		t.Fatalf("claim: %+v", st)
	}
	if want := t0.Add(12 * time.Second); !st.Claim.ExpiresAt.Time.Equal(want) {
		t.Errorf("claim expires %s, want %s (timeout plus margin)", st.Claim.ExpiresAt, want)
	}
	if st.Deadline == nil || !st.Deadline.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("deadline %v, want the first claim plus the sink's deadline", st.Deadline)
	}
	if st.IdempotencyKey != "ns/a/dead-letter" {
		t.Errorf("key %q", st.IdempotencyKey)
	}
	// An open claim waits until it expires: nothing is claimed or sent twice.
	if step := Advance(st, env(func(e *ledger.Env) { e.Now = t0.Add(5 * time.Second) })); step.Kind != ledger.KindWait || step.Status != nil {
		t.Errorf("open claim: %+v, want a wait without a write", step)
	}
}

func TestRecordOutcome(t *testing.T) {
	at := t0.Add(time.Second)
	for _, c := range []struct {
		name    string
		attempt int32
		o       ledger.Outcome
		mut     func(*ledger.Env)
		want    actionsv1alpha1.DeadLetterState
		kind    ledger.Kind
	}{
		{"2xx delivers", 1, ledger.Outcome{Class: retry.ClassSuccess, StatusCode: 202, FinishedAt: at}, nil,
			actionsv1alpha1.DeadLetterDelivered, ledger.KindNone},
		{"4xx fails", 1, ledger.Outcome{Class: retry.ClassRejected, StatusCode: 400, FinishedAt: at}, nil,
			actionsv1alpha1.DeadLetterFailed, ledger.KindNone},
		{"503 retries", 1, ledger.Outcome{Class: retry.ClassRetryable, StatusCode: 503, FinishedAt: at}, nil,
			actionsv1alpha1.DeadLetterPending, ledger.KindWait},
		{"dial error retries", 1, ledger.Outcome{Class: retry.ClassNotSent, ErrorClass: "Dial", FinishedAt: at}, nil,
			actionsv1alpha1.DeadLetterPending, ledger.KindWait},
		{"the last attempt fails", 3, ledger.Outcome{Class: retry.ClassRetryable, StatusCode: 503, FinishedAt: at}, nil,
			actionsv1alpha1.DeadLetterFailed, ledger.KindNone},
		{"uncertain, sink does not dedup: not sent again", 1, ledger.Outcome{Class: retry.ClassUncertain, StatusCode: 500, FinishedAt: at}, nil,
			actionsv1alpha1.DeadLetterUncertain, ledger.KindNone},
		{"uncertain, sink dedups: resent", 1, ledger.Outcome{Class: retry.ClassRetryable, StatusCode: 500, FinishedAt: at}, repeatSafe,
			actionsv1alpha1.DeadLetterPending, ledger.KindWait},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mut []func(*ledger.Env)
			if c.mut != nil {
				mut = append(mut, c.mut)
			}
			st := claimedAt(t, c.attempt, mut...)
			step, ok := RecordOutcome(st, c.attempt, c.o, env(mut...))
			if !ok || step.Status == nil {
				t.Fatalf("RecordOutcome: ok=%v step=%+v", ok, step)
			}
			got := step.Status
			if got.State != c.want || step.Kind != c.kind || got.Claim != nil {
				t.Fatalf("state %s kind %s claim %+v, want %s %s and the claim closed (%s)", got.State, step.Kind, got.Claim,
					c.want, c.kind, got.Message)
			}
			if int(got.StatusCode) != c.o.StatusCode || got.ErrorClass != c.o.ErrorClass {
				t.Errorf("statusCode %d errorClass %q", got.StatusCode, got.ErrorClass)
			}
			if (got.State == actionsv1alpha1.DeadLetterDelivered) != (got.DeliveredAt != nil) {
				t.Errorf("deliveredAt %v in state %s", got.DeliveredAt, got.State)
			}
			if c.kind == ledger.KindWait && (got.NextAttemptAt == nil || !got.NextAttemptAt.After(at)) {
				t.Errorf("nextAttemptAt %v, want after the outcome", got.NextAttemptAt)
			}
			if step.Event == nil {
				t.Error("no event")
			}
		})
	}
	// An outcome for an attempt that is no longer open is dropped.
	st := claimedAt(t, 2)
	if _, ok := RecordOutcome(st, 1, ledger.Outcome{Class: retry.ClassSuccess}, env()); ok {
		t.Error("an outcome of attempt 1 settled the claim of attempt 2")
	}
}

// DESIGN rule 3 for the delivery: a claim found open after its expiry (its manager was killed mid-delivery) is
// resent under the same key only to a sink where repeating is safe; otherwise the record ends Uncertain.
func TestExpiredClaim(t *testing.T) {
	later := func(e *ledger.Env) { e.Now = t0.Add(13 * time.Second) }
	st := claimedAt(t, 1)
	step := Advance(st, env(later))
	if step.Status == nil || step.Status.State != actionsv1alpha1.DeadLetterUncertain || step.Kind != ledger.KindNone {
		t.Fatalf("expired claim, plain sink: %+v", step.Status)
	}
	if !strings.Contains(step.Status.Message, "not sent again") || !Final(step.Status) {
		t.Errorf("message %q", step.Status.Message)
	}
	st = claimedAt(t, 1, repeatSafe)
	step = Advance(st, env(later, repeatSafe))
	if step.Status == nil || step.Status.State != actionsv1alpha1.DeadLetterPending || step.Status.Claim != nil {
		t.Fatalf("expired claim, dedup sink: %+v", step.Status)
	}
	// Then the next attempt is claimed under the same key.
	next := Advance(step.Status, env(func(e *ledger.Env) { e.Now = step.At }, repeatSafe))
	if next.Kind != ledger.KindSend || next.Status.Claim.Attempt != 2 || next.Status.IdempotencyKey != "ns/a/dead-letter" {
		t.Errorf("resend: %+v", next.Status)
	}
}

func TestDeadlineAndRefusal(t *testing.T) {
	st := claimedAt(t, 1)
	st.Claim, st.State = nil, actionsv1alpha1.DeadLetterPending
	step := Advance(st, env(func(e *ledger.Env) { e.Now = t0.Add(2 * time.Hour) }))
	if step.Status == nil || step.Status.State != actionsv1alpha1.DeadLetterFailed {
		t.Fatalf("past the deadline: %+v", step.Status)
	}
	r := Refuse(Begin("ClusterDestination/sink", actionsv1alpha1.PhaseFailed), actionsv1alpha1.ReasonNamespaceNotAllowed, "no")
	if r.Status == nil || r.Status.State != actionsv1alpha1.DeadLetterRefused || r.Status.Attempts != 0 || Final(r.Status) {
		t.Fatalf("refused: %+v", r.Status)
	}
	if again := Refuse(r.Status, actionsv1alpha1.ReasonNamespaceNotAllowed, "no"); again.Status != nil {
		t.Error("the same refusal wrote again")
	}
	// A sink usable again is claimed from where the refusal left it.
	if step := Advance(r.Status, env()); step.Kind != ledger.KindSend {
		t.Errorf("after a refusal: %s", step.Kind)
	}
}

func record() Record {
	done := t0
	return Record{Key: "ns/a", Namespace: "ns", Name: "a", Destination: "Destination/ns/pay", Fingerprint: "sha256:ab",
		Phase: actionsv1alpha1.PhaseExhausted, Reason: "AttemptsExhausted", Attempts: 3, StatusCode: 503, Body: `{"error":"busy"}`,
		CompletedAt: &done}
}

// The record is a CloudEvents 1.0 event in either content mode of the HTTP binding, read back with the SDK.
func TestEncodeModes(t *testing.T) {
	for _, mode := range []actionsv1alpha1.CloudEventMode{"", actionsv1alpha1.CloudEventBinary, actionsv1alpha1.CloudEventStructured} {
		h, body, err := Encode(context.Background(), record(), "ns/a/dead-letter", mode)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://sink/", strings.NewReader(string(body)))
		req.Header = h
		msg := cehttp.NewMessageFromHttpRequest(req)
		wantEnc := binding.EncodingBinary
		if mode == actionsv1alpha1.CloudEventStructured {
			wantEnc = binding.EncodingStructured
		}
		if msg.ReadEncoding() != wantEnc {
			t.Errorf("mode %q: encoding %v, want %v (Content-Type %q)", mode, msg.ReadEncoding(), wantEnc, h.Get("Content-Type"))
		}
		e, err := binding.ToEvent(context.Background(), msg)
		if err != nil {
			t.Fatalf("mode %q: not a CloudEvent: %v", mode, err)
		}
		if e.ID() != "ns/a/dead-letter" || e.Type() != EventType || e.SpecVersion() != "1.0" ||
			e.Source() != "/apis/actions.actionledger.dev/v1alpha1/namespaces/ns/externalactions/a" || !e.Time().Equal(t0) {
			t.Errorf("mode %q: attributes %s", mode, e)
		}
		var got Record
		if err := json.Unmarshal(e.Data(), &got); err != nil || got.Key != "ns/a" || got.StatusCode != 503 || got.Body != `{"error":"busy"}` ||
			got.Attempts != 3 || got.Phase != actionsv1alpha1.PhaseExhausted {
			t.Errorf("mode %q: data %s (%v)", mode, e.Data(), err)
		}
	}
}

func TestRecordOf(t *testing.T) {
	done := metav1.NewTime(t0)
	xa := &actionsv1alpha1.ExternalAction{}
	xa.Namespace, xa.Name, xa.UID = "ns", "a", "u1"
	xa.Status = actionsv1alpha1.ExternalActionStatus{IdempotencyKey: "ns/a", Fingerprint: "sha256:ab", Phase: actionsv1alpha1.PhaseFailed,
		Attempts: 1, LastError: "Rejected: status 422", CompletedAt: &done,
		Response:       &actionsv1alpha1.ResponseRecord{StatusCode: 422, Body: "[REDACTED]", BodySHA256: "sha256:cd"},
		AttemptHistory: []actionsv1alpha1.AttemptRecord{{Number: 1, TraceID: "0af7651916cd43dd8448eb211c80319c"}},
		Conditions:     []metav1.Condition{{Type: actionsv1alpha1.ConditionReady, Reason: "Rejected", Message: "attempt 1 was rejected"}}}
	r := RecordOf(xa, "Destination/ns/pay", "ns/a/dead-letter")
	if r.Key != "ns/a" || r.ActionKey != "ns/a" || r.Reason != "Rejected" || r.StatusCode != 422 || r.Body != "[REDACTED]" || r.BodySHA256 != "sha256:cd" || r.UID != "u1" ||
		r.TraceID != "0af7651916cd43dd8448eb211c80319c" || r.CompletedAt == nil {
		t.Errorf("record %+v", r)
	}
}

// Issue 40, row 8: an action of namespace team-a whose own Destination has keyFormat team-b/{name} (its key,
// status.idempotencyKey, is team-b/pay-1) dead-letters to a shared sink. The record's data.key is the sink's key
// for the action (team-a/pay-1, the CloudEvent id without /dead-letter), never the forgeable action key, which
// is only in actionKey; and data.key follows the recorded key (a record keyed before a change of the sink's
// keyFormat keeps it).
func TestRecordCarriesTheSinksKey(t *testing.T) {
	xa := &actionsv1alpha1.ExternalAction{}
	xa.Namespace, xa.Name = "team-a", "pay-1"
	xa.Status = actionsv1alpha1.ExternalActionStatus{IdempotencyKey: "team-b/pay-1", Phase: actionsv1alpha1.PhaseExhausted}
	sink := &actionsv1alpha1.DestinationSpec{} // a shared ClusterDestination sink with the default keyFormat
	step := Keyed(Advance(Begin("ClusterDestination/cases", actionsv1alpha1.PhaseExhausted), env()), Key(sink, xa.Namespace, xa.Name))
	id := step.Status.IdempotencyKey
	for _, c := range []struct {
		name, recordKey, want string
	}{
		{"first claim", id, "team-a/pay-1"},
		{"a record keyed under another sink keyFormat", "orders:team-a:pay-1/dead-letter", "orders:team-a:pay-1"},
	} {
		h, body, err := Encode(context.Background(), RecordOf(xa, "Destination/team-a/own", c.recordKey), c.recordKey, "")
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://sink/", strings.NewReader(string(body)))
		req.Header = h
		e, err := binding.ToEvent(context.Background(), cehttp.NewMessageFromHttpRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]any
		if err := json.Unmarshal(e.Data(), &data); err != nil {
			t.Fatal(err)
		}
		if data["key"] != c.want || e.ID() != c.want+KeySuffix {
			t.Errorf("%s: data.key %v, id %q; want %q and %q (the sink's key, never the action's team-b/pay-1)", c.name,
				data["key"], e.ID(), c.want, c.want+KeySuffix)
		}
		if data["actionKey"] != "team-b/pay-1" || data["namespace"] != "team-a" {
			t.Errorf("%s: actionKey %v, namespace %v; want the action's own key next to its namespace", c.name,
				data["actionKey"], data["namespace"])
		}
	}
}

// exhausted is the status of an action the ledger just ended Exhausted (Ready and Stalled with the outcome).
func exhausted() *actionsv1alpha1.ExternalActionStatus {
	st := &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseExhausted, IdempotencyKey: "ns/a"}
	for _, c := range []string{actionsv1alpha1.ConditionReady, actionsv1alpha1.ConditionStalled} {
		s := metav1.ConditionTrue
		if c == actionsv1alpha1.ConditionReady {
			s = metav1.ConditionFalse
		}
		st.Conditions = append(st.Conditions, metav1.Condition{Type: c, Status: s, Reason: actionsv1alpha1.ReasonAttemptsExhausted,
			Message: "all 2 attempt(s) were made", LastTransitionTime: metav1.NewTime(t0)})
	}
	return st
}

func condition(st *actionsv1alpha1.ExternalActionStatus, t string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// The obligation is recorded in the write that ends the action: the sink's identity, path and mode, Pending (no
// key yet: the first claim records it, Keyed), and the DeadLetterDelivered condition False; only for a phase the
// sink takes, and only once.
func TestOweRecordsTheSinkOnce(t *testing.T) {
	sink := &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{Name: "cases"}, Path: "/in"}
	st := exhausted()
	if !Owe(st, sink, "Destination/ns/cases", 3, t0) {
		t.Fatal("Owe of an Exhausted action with a sink wrote nothing")
	}
	dl := st.DeadLetter
	if dl.Sink != "Destination/ns/cases" || dl.Path != "/in" || dl.Mode != actionsv1alpha1.CloudEventBinary ||
		dl.State != actionsv1alpha1.DeadLetterPending || dl.IdempotencyKey != "" || dl.Phase != actionsv1alpha1.PhaseExhausted {
		t.Errorf("owed record %+v", dl)
	}
	if c := condition(st, actionsv1alpha1.ConditionDeadLetterDelivered); c == nil || c.Status != metav1.ConditionFalse ||
		c.Reason != actionsv1alpha1.ReasonDeadLetterRetrying || c.ObservedGeneration != 3 {
		t.Errorf("DeadLetterDelivered condition %+v", c)
	}
	if c := condition(st, actionsv1alpha1.ConditionStalled); c.Reason != actionsv1alpha1.ReasonAttemptsExhausted {
		t.Errorf("Stalled changed to %s by a record that is merely owed", c.Reason)
	}
	other := &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{Name: "other"}}
	if Owe(st, other, "Destination/ns/other", 3, t0) || st.DeadLetter.Sink != "Destination/ns/cases" {
		t.Errorf("a second Owe replaced the recorded obligation: %+v", st.DeadLetter)
	}
	for name, c := range map[string]struct {
		phase actionsv1alpha1.Phase
		sink  *actionsv1alpha1.DeadLetterSink
	}{
		"no sink":          {actionsv1alpha1.PhaseExhausted, nil},
		"Succeeded":        {actionsv1alpha1.PhaseSucceeded, sink},
		"not one of its":   {actionsv1alpha1.PhaseFailed, &actionsv1alpha1.DeadLetterSink{Phases: []actionsv1alpha1.DeadLetterPhase{"Exhausted"}}},
		"OutcomeUnknown":   {actionsv1alpha1.PhaseOutcomeUnknown, sink},
		"not yet terminal": {actionsv1alpha1.PhaseInProgress, sink},
	} {
		st := exhausted()
		st.Phase = c.phase
		if Owe(st, c.sink, "Destination/ns/cases", 1, t0) || st.DeadLetter != nil {
			t.Errorf("%s: a record was owed: %+v", name, st.DeadLetter)
		}
	}
}

func TestSinkRef(t *testing.T) {
	for _, c := range []struct {
		sink string
		want actionsv1alpha1.DestinationReference
		ok   bool
	}{
		{"Destination/ns/cases", actionsv1alpha1.DestinationReference{Kind: "Destination", Name: "cases"}, true},
		{"ClusterDestination/cases", actionsv1alpha1.DestinationReference{Kind: "ClusterDestination", Name: "cases"}, true},
		{"Destination/other/cases", actionsv1alpha1.DestinationReference{}, false}, // never another namespace's
		{"Destination/ns/", actionsv1alpha1.DestinationReference{}, false},
		{"ClusterDestination/a/b", actionsv1alpha1.DestinationReference{}, false},
		{"cases", actionsv1alpha1.DestinationReference{}, false},
	} {
		got, err := SinkRef(c.sink, "ns")
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("SinkRef(%q) = %+v, %v; want %+v (ok %v)", c.sink, got, err, c.want, c.ok)
		}
	}
}

// A sink that cannot be used holds the action and says so: Stalled with reason DeadLetterSinkUnavailable naming
// the sink; once the sink is usable again Stalled goes back to the outcome's reason and message.
func TestShowStallsWhileTheSinkIsUnusable(t *testing.T) {
	st := exhausted()
	Owe(st, &actionsv1alpha1.DeadLetterSink{}, "Destination/ns/cases", 1, t0)
	refused := Refuse(st.DeadLetter, actionsv1alpha1.ReasonDestinationNotReady, `Destination "cases" not found`)
	st.DeadLetter = refused.Status
	Show(st, 1, t0)
	c := condition(st, actionsv1alpha1.ConditionStalled)
	if c.Status != metav1.ConditionTrue || c.Reason != actionsv1alpha1.ReasonDeadLetterSinkUnavailable ||
		!strings.Contains(c.Message, "Destination/ns/cases") || !strings.Contains(c.Message, actionsv1alpha1.AnnotationDeadLetter) {
		t.Errorf("Stalled while the sink is gone: %+v", c)
	}
	if d := condition(st, actionsv1alpha1.ConditionDeadLetterDelivered); d.Reason != actionsv1alpha1.ReasonDestinationNotReady {
		t.Errorf("DeadLetterDelivered reason %s, want the refusal's", d.Reason)
	}
	st.DeadLetter = claimedAt(t, 1)
	Show(st, 1, t0)
	if c := condition(st, actionsv1alpha1.ConditionStalled); c.Reason != actionsv1alpha1.ReasonAttemptsExhausted ||
		c.Message != "all 2 attempt(s) were made" {
		t.Errorf("Stalled once the sink is back: %+v; want the outcome's again", c)
	}
	step, _ := RecordOutcome(st.DeadLetter, 1, ledger.Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: t0}, env())
	st.DeadLetter = step.Status
	Show(st, 1, t0)
	if d := condition(st, actionsv1alpha1.ConditionDeadLetterDelivered); d.Status != metav1.ConditionTrue {
		t.Errorf("DeadLetterDelivered after delivery: %+v", d)
	}
	if Owed(st) {
		t.Error("a delivered record still holds the action")
	}
}

// A person's give-up ends a record that is not final, whatever its state, and releases the action; an open
// delivery attempt is waited for; a final record and an unknown decision are refused.
func TestGiveUp(t *testing.T) {
	refused := Refuse(Begin("Destination/ns/cases", actionsv1alpha1.PhaseExhausted), actionsv1alpha1.ReasonDestinationNotReady, "gone").Status
	step, err := GiveUp(refused, actionsv1alpha1.DeadLetterGiveUp, "ticket 42 opened by hand", t0)
	if err != nil || step.Status == nil || step.Status.State != actionsv1alpha1.DeadLetterGivenUp ||
		step.Status.Reason != actionsv1alpha1.ReasonDeadLetterGivenUp || !strings.Contains(step.Status.Message, "ticket 42 opened by hand") {
		t.Fatalf("give-up of a refused record: %+v, %v", step.Status, err)
	}
	if step.Event == nil || !step.Event.Warning || step.Event.Reason != actionsv1alpha1.ReasonDeadLetterGivenUp ||
		!strings.Contains(step.Event.Message, "Destination/ns/cases") {
		t.Errorf("give-up Event %+v", step.Event)
	}
	if !Final(step.Status) {
		t.Error("a given-up record is not final: it would hold the action")
	}

	open := claimedAt(t, 1)
	if step, err := GiveUp(open, actionsv1alpha1.DeadLetterGiveUp, "", t0.Add(time.Second)); err != nil || step.Status != nil ||
		step.Kind != ledger.KindWait || !step.At.Equal(open.Claim.ExpiresAt.Time) {
		t.Errorf("give-up during an open delivery attempt: %+v, %v; want a wait until the claim expires", step, err)
	}
	step, err = GiveUp(open, actionsv1alpha1.DeadLetterGiveUp, "", open.Claim.ExpiresAt.Time)
	if err != nil || step.Status.Claim != nil || !strings.Contains(step.Status.Message, "the sink may have the record") {
		t.Errorf("give-up after the claim expired: %+v, %v", step.Status, err)
	}

	if _, err := GiveUp(step.Status, actionsv1alpha1.DeadLetterGiveUp, "", t0); err == nil {
		t.Error("give-up of a final record was accepted")
	}
	if _, err := GiveUp(refused, "later", "", t0); err == nil || !strings.Contains(err.Error(), "give-up") {
		t.Errorf("unknown decision: %v; want an error naming give-up", err)
	}
	ns := NamespaceDeleted(refused, `Destination "cases" not found`)
	if ns.Status.State != actionsv1alpha1.DeadLetterGivenUp || !strings.Contains(ns.Status.Message, "namespace is being deleted") {
		t.Errorf("NamespaceDeleted: %+v", ns.Status)
	}
}

// A record Refused while its sink was gone resumes once the sink can be used: at once when an attempt is due,
// and otherwise written back to Pending (a wait until its schedule), so that the action's stall ends.
func TestAdvanceResumesARefusedRecord(t *testing.T) {
	pending := Begin("Destination/ns/sink", actionsv1alpha1.PhaseExhausted)
	pending.Attempts, pending.StatusCode = 1, 503
	pending.NextAttemptAt = ledger.PtrTime(t0.Add(10 * time.Second))
	refused := Refuse(pending, actionsv1alpha1.ReasonDestinationNotReady, "gone").Status

	step := Advance(refused, env())
	if step.Kind != ledger.KindWait || step.Status == nil || step.Status.State != actionsv1alpha1.DeadLetterPending ||
		step.Status.Reason != actionsv1alpha1.ReasonDeadLetterRetrying || !step.At.Equal(t0.Add(10*time.Second)) {
		t.Errorf("sink back before the next attempt: %+v at %s; want Pending written and a wait for the schedule", step.Status, step.At)
	}
	step = Advance(refused, env(func(e *ledger.Env) { e.Now = t0.Add(11 * time.Second) }))
	if step.Kind != ledger.KindSend || step.Status.State != actionsv1alpha1.DeadLetterDelivering || step.Status.Claim.Attempt != 2 {
		t.Errorf("sink back after the next attempt was due: %s %+v; want attempt 2 claimed", step.Kind, step.Status)
	}
	if step := Advance(pending, env()); step.Status != nil {
		t.Errorf("a Pending record waiting for its schedule writes %+v", step.Status)
	}
}

// The record's key is the sink's keyFormat for the action plus /dead-letter, never the action's own key: a
// tenant whose own Destination sends team-b/{name} from namespace team-a still gets a team-a key at a sink with
// the default or any ClusterDestination-valid keyFormat (issue 33 row 5).
func TestKeyIsTheSinksKeyFormat(t *testing.T) {
	withFormat := func(f string) *actionsv1alpha1.DestinationSpec {
		return &actionsv1alpha1.DestinationSpec{Idempotency: &actionsv1alpha1.IdempotencyConfig{KeyFormat: f}}
	}
	for _, c := range []struct {
		what       string
		sink       *actionsv1alpha1.DestinationSpec
		ns, action string
		want       string
	}{
		{"default format", &actionsv1alpha1.DestinationSpec{}, "team-a", "pay-1", "team-a/pay-1/dead-letter"},
		{"the other tenant, default format", &actionsv1alpha1.DestinationSpec{}, "team-b", "pay-1", "team-b/pay-1/dead-letter"},
		{"a cluster format", withFormat("orders:{namespace}:{name}"), "team-a", "pay-1", "orders:team-a:pay-1/dead-letter"},
		{"name first", withFormat("{name}/{namespace}"), "team-a", "pay-1", "pay-1/team-a/dead-letter"},
	} {
		if got := Key(c.sink, c.ns, c.action); got != c.want {
			t.Errorf("%s: Key = %q, want %q", c.what, got, c.want)
		}
	}
}

// The key is recorded by the first claim and never changed: a later claim keeps the key it has; a record owed
// with the action's key by an earlier manager (never sent under it) is re-keyed by its first claim; a step that
// sends nothing is left alone.
func TestKeyedOnce(t *testing.T) {
	fresh := Advance(Begin("ClusterDestination/cases", actionsv1alpha1.PhaseExhausted), env())
	old := Begin("ClusterDestination/cases", actionsv1alpha1.PhaseExhausted)
	old.IdempotencyKey = "team-b/pay-1/dead-letter" // owed under the action's key before this manager
	retried := claimedAt(t, 1)                      // keyed ns/a/dead-letter by its first claim, then answered 503
	retried.Claim, retried.State = nil, actionsv1alpha1.DeadLetterPending
	for _, c := range []struct {
		name string
		step Step
		want string
	}{
		{"first claim", fresh, "team-a/pay-1/dead-letter"},
		{"owed under the old key, first claim", Advance(old, env()), "team-a/pay-1/dead-letter"},
		{"a later claim", Advance(retried, env()), "ns/a/dead-letter"},
	} {
		got := Keyed(c.step, "team-a/pay-1/dead-letter")
		if got.Kind != ledger.KindSend || got.Status == nil || got.Status.IdempotencyKey != c.want {
			t.Errorf("%s: key %+v, want %q", c.name, got.Status, c.want)
		}
	}
	wait := Step{Kind: ledger.KindWait, Status: Begin("ClusterDestination/cases", actionsv1alpha1.PhaseExhausted)}
	if got := Keyed(wait, "team-a/pay-1/dead-letter"); got.Status.IdempotencyKey != "" {
		t.Errorf("a wait was given the key %q: only a claim records it", got.Status.IdempotencyKey)
	}
}

// A delivery that waits for the sink's limits spends no attempt and is no failure: the record stays Pending with
// the wait's reason (written once per reason), and a record Refused before resumes.
func TestDelayedSpendsNoAttempt(t *testing.T) {
	pending := Begin("ClusterDestination/cases", actionsv1alpha1.PhaseExhausted)
	pending.Attempts = 1
	refused := Refuse(pending, actionsv1alpha1.ReasonDestinationNotReady, "gone").Status
	for _, c := range []struct {
		name      string
		cur       *actionsv1alpha1.DeadLetterStatus
		reason    string
		wantWrite bool
	}{
		{"first wait", pending, actionsv1alpha1.ReasonRateLimited, true},
		{"the budget after the rate", func() *actionsv1alpha1.DeadLetterStatus {
			st := pending.DeepCopy()
			st.Reason = actionsv1alpha1.ReasonRateLimited
			return st
		}(), actionsv1alpha1.ReasonRetryBudgetExhausted, true},
		{"same reason again", func() *actionsv1alpha1.DeadLetterStatus {
			st := pending.DeepCopy()
			st.Reason = actionsv1alpha1.ReasonRateLimited
			return st
		}(), actionsv1alpha1.ReasonRateLimited, false},
		{"refused before", refused, actionsv1alpha1.ReasonRateLimited, true},
	} {
		step := Delayed(c.cur, c.reason, "waiting for destination ClusterDestination/cases ("+c.reason+") until then")
		if step.Kind != ledger.KindWait || (step.Status != nil) != c.wantWrite {
			t.Fatalf("%s: %+v, want a wait (write %v)", c.name, step, c.wantWrite)
		}
		if st := step.Status; st != nil {
			if st.State != actionsv1alpha1.DeadLetterPending || st.Reason != c.reason || st.Attempts != 1 || st.Claim != nil ||
				Final(st) || !strings.Contains(st.Message, "no delivery attempt is spent") {
				t.Errorf("%s: status %+v, want Pending, reason %s, attempts 1, no claim", c.name, st, c.reason)
			}
		}
	}
}
