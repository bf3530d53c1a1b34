package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Headers the gateway sets on its answers.
const (
	// HeaderReplayed is "true" on an answer that repeats a recorded outcome (draft-ietf-httpapi-idempotency-key-
	// header; the name Stripe and the draft's examples use).
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderBodyTruncated is "true" when the replayed body is not the destination's whole body: it was capped
	// in status.response (4096 bytes), or was not kept (a tombstone written before tombstones kept the response).
	HeaderBodyTruncated = "Actionledger-Body-Truncated"
	// HeaderPhase is the ExternalAction's phase behind the answer.
	HeaderPhase = "Actionledger-Phase"
	// HeaderAction is the path of the action's status resource (GET /v1/namespaces/{ns}/actions/{name}).
	HeaderAction = "Actionledger-Action"
	// HeaderReplayedFrom is "tombstone" when the outcome comes from an ActionTombstone (DESIGN rule 7).
	HeaderReplayedFrom = "Actionledger-Replayed-From"
)

// keptHeaders are the recorded response headers a replay repeats. The destination's own Idempotent-Replayed
// is not among them: on the gateway's answer that header says whether the gateway replayed.
var keptHeaders = []string{"Location", "Content-Type", "Retry-After"}

// Answer is what the gateway sends for an action: either a recorded outcome or a problem.
type Answer struct {
	Status  int
	Header  http.Header
	Body    []byte
	Problem *Problem
}

// StatusPath is the status resource of namespace/name.
func StatusPath(namespace, name string) string {
	return "/v1/namespaces/" + namespace + "/actions/" + name
}

// reason returns the reason and message of the condition that explains phase (Stalled, else Ready, else
// Reconciling).
func reason(xa *actionsv1alpha1.ExternalAction) (string, string) {
	for _, t := range []string{actionsv1alpha1.ConditionStalled, actionsv1alpha1.ConditionReady,
		actionsv1alpha1.ConditionReconciling} {
		if c := meta.FindStatusCondition(xa.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return c.Reason, c.Message
		}
	}
	if c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReady); c != nil {
		return c.Reason, c.Message
	}
	return "", ""
}

// Decide returns the answer for a terminal action: its recorded response, or a problem naming phase and
// reason. replayed says the request is a repeat (not the one that created the object); an outcome taken from
// a tombstone by the controller (status.replayedFrom) is a replay either way. ok is false while the action is
// not terminal.
//
//   - Conflict: 422 key-reused (the controller found the key bound to another fingerprint in a tombstone).
//   - Succeeded, Failed or Exhausted with status.response: the recorded status code, kept headers and body.
//   - Failed without a response (nothing was sent: InvalidSpec, EgressDenied, PathOutsideBase, ...): 502.
//   - Exhausted without a response (attempts, budget or deadline ran out): 504.
//   - OutcomeUnknown: 502 outcome-unknown, whatever was recorded: a person decides (docs/concepts.md).
func Decide(xa *actionsv1alpha1.ExternalAction, replayed bool) (Answer, bool) {
	st := &xa.Status
	if !st.Phase.Terminal() {
		return Answer{}, false
	}
	instance := StatusPath(xa.Namespace, xa.Name)
	rsn, msg := reason(xa)
	withAction := func(p Problem) (Answer, bool) {
		p.Instance, p.Phase, p.Reason = instance, string(st.Phase), rsn
		return Answer{Status: p.Status, Problem: &p, Header: http.Header{HeaderPhase: {string(st.Phase)},
			HeaderAction: {instance}}}, true
	}
	switch {
	case st.Phase == actionsv1alpha1.PhaseConflict:
		return withAction(problem(http.StatusUnprocessableEntity, "key-reused",
			"the idempotency key is bound to another request", msg))
	case st.Phase == actionsv1alpha1.PhaseOutcomeUnknown:
		return withAction(problem(http.StatusBadGateway, "outcome-unknown",
			"the destination's outcome is unknown and waits for a person's decision", msg))
	case st.Response != nil && st.Response.StatusCode >= 100 && st.Response.StatusCode <= 999:
		h := http.Header{HeaderPhase: {string(st.Phase)}, HeaderAction: {instance}}
		for _, k := range keptHeaders {
			for rk, v := range st.Response.Headers {
				if http.CanonicalHeaderKey(rk) == k {
					h.Set(k, v)
				}
			}
		}
		if replayed || st.ReplayedFrom != nil {
			h.Set(HeaderReplayed, "true")
		}
		// A replay without the body's hash comes from a tombstone that kept only the status code.
		if st.Response.BodyTruncated || (st.ReplayedFrom != nil && st.Response.Body == "" && st.Response.BodySHA256 == "") {
			h.Set(HeaderBodyTruncated, "true")
		}
		if st.ReplayedFrom != nil {
			h.Set(HeaderReplayedFrom, "tombstone")
		}
		return Answer{Status: int(st.Response.StatusCode), Header: h, Body: []byte(st.Response.Body)}, true
	case st.Phase == actionsv1alpha1.PhaseExhausted:
		return withAction(problem(http.StatusGatewayTimeout, "exhausted",
			"attempts, retry budget or deadline ran out without an answer from the destination", msg))
	default:
		return withAction(problem(http.StatusBadGateway, "not-sent",
			"the action ended without an answer from the destination", msg))
	}
}

// DecideTombstone answers a repeat whose object was collected, from its tombstone: the recorded response (status
// code, kept headers and the body capped at 4096 bytes, spec.response), or, from a tombstone written before
// the response was kept, the status code with an empty body and HeaderBodyTruncated set; or the problem of
// Decide for a phase without a status code.
func DecideTombstone(ts *actionsv1alpha1.ActionTombstone) Answer {
	xa := &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ts.Namespace, Name: ts.Name},
		Status: actionsv1alpha1.ExternalActionStatus{Phase: ts.Spec.Phase, Fingerprint: ts.Spec.Fingerprint,
			CompletedAt: ts.Spec.CompletedAt, ReplayedFrom: &actionsv1alpha1.ReplaySource{UID: ts.Spec.UID,
				CompletedAt: ts.Spec.CompletedAt, Phase: ts.Spec.Phase}},
	}
	xa.Status.Response = tombstoneResponse(ts)
	if !xa.Status.Phase.Terminal() {
		xa.Status.Phase = actionsv1alpha1.PhaseOutcomeUnknown
	}
	a, _ := Decide(xa, true)
	return a
}

// RetryAfter is the delay-seconds (RFC 9110 section 10.2.3) a 409 in-progress answer asks for: until
// status.nextAttemptAt when that is later than a second from now (capped at an hour), else 1.
func RetryAfter(xa *actionsv1alpha1.ExternalAction, now time.Time) string {
	s := 1.0
	if n := xa.Status.NextAttemptAt; n != nil {
		s = math.Min(math.Max(math.Ceil(n.Sub(now).Seconds()), 1), 3600)
	}
	return strconv.Itoa(int(s))
}

// Status is the JSON of GET /v1/namespaces/{namespace}/actions/{name}.
type Status struct {
	Namespace      string                          `json:"namespace"`
	Name           string                          `json:"name"`
	IdempotencyKey string                          `json:"idempotencyKey,omitempty"`
	Phase          actionsv1alpha1.Phase           `json:"phase,omitempty"`
	Reason         string                          `json:"reason,omitempty"`
	Message        string                          `json:"message,omitempty"`
	Attempts       int32                           `json:"attempts,omitempty"`
	NextAttemptAt  *metav1.Time                    `json:"nextAttemptAt,omitempty"`
	CompletedAt    *metav1.Time                    `json:"completedAt,omitempty"`
	Response       *actionsv1alpha1.ResponseRecord `json:"response,omitempty"`
	ReplayedFrom   *actionsv1alpha1.ReplaySource   `json:"replayedFrom,omitempty"`
	Conditions     []metav1.Condition              `json:"conditions,omitempty"`
	// Tombstone is true when the object was collected and this comes from its ActionTombstone.
	Tombstone bool `json:"tombstone,omitempty"`
}

// StatusOf renders xa's status resource.
func StatusOf(xa *actionsv1alpha1.ExternalAction) Status {
	rsn, msg := reason(xa)
	return Status{
		Namespace: xa.Namespace, Name: xa.Name, IdempotencyKey: xa.Annotations[AnnotationKey],
		Phase: xa.Status.Phase, Reason: rsn, Message: msg, Attempts: xa.Status.Attempts,
		NextAttemptAt: xa.Status.NextAttemptAt, CompletedAt: xa.Status.CompletedAt, Response: xa.Status.Response,
		ReplayedFrom: xa.Status.ReplayedFrom, Conditions: xa.Status.Conditions,
	}
}

// StatusOfTombstone renders the status resource of a collected action from its tombstone.
func StatusOfTombstone(ts *actionsv1alpha1.ActionTombstone) Status {
	s := Status{Namespace: ts.Namespace, Name: ts.Name, Phase: ts.Spec.Phase, CompletedAt: ts.Spec.CompletedAt,
		Tombstone: true, Reason: actionsv1alpha1.ReasonReplayed,
		Message: fmt.Sprintf("the object was collected; its tombstone is kept until %s",
			ts.Spec.ExpiresAt.UTC().Format(time.RFC3339))}
	s.Response = tombstoneResponse(ts)
	return s
}

// tombstoneResponse is the tombstone's recorded response: spec.response, else (an older tombstone) only the
// status code, else nil.
func tombstoneResponse(ts *actionsv1alpha1.ActionTombstone) *actionsv1alpha1.ResponseRecord {
	switch {
	case ts.Spec.Response != nil:
		return ts.Spec.Response.DeepCopy()
	case ts.Spec.StatusCode != 0:
		return &actionsv1alpha1.ResponseRecord{StatusCode: ts.Spec.StatusCode}
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(`{}`)
	}
	return b
}
