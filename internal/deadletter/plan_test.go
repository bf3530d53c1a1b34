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
	st := Begin("Destination/ns/sink", "ns/a", actionsv1alpha1.PhaseExhausted)
	st.Attempts = n - 1
	step := Advance(st, env(mut...))
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
	r := Refuse(Begin("ClusterDestination/sink", "ns/a", actionsv1alpha1.PhaseFailed), actionsv1alpha1.ReasonNamespaceNotAllowed, "no")
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
	r := RecordOf(xa, "Destination/ns/pay")
	if r.Reason != "Rejected" || r.StatusCode != 422 || r.Body != "[REDACTED]" || r.BodySHA256 != "sha256:cd" || r.UID != "u1" ||
		r.TraceID != "0af7651916cd43dd8448eb211c80319c" || r.CompletedAt == nil {
		t.Errorf("record %+v", r)
	}
}
