package gateway

import (
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

func action(phase actionsv1alpha1.Phase, resp *actionsv1alpha1.ResponseRecord) *actionsv1alpha1.ExternalAction {
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-19"}}
	xa.Status.Phase = phase
	xa.Status.Response = resp
	xa.Status.Conditions = []metav1.Condition{{Type: actionsv1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: "SomeReason", Message: "some message"}}
	return xa
}

func TestDecide(t *testing.T) {
	created := &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"1"}`,
		Headers: map[string]string{"location": "/effects/1", "Content-Type": "application/json",
			"Idempotent-Replayed": "true"}}
	rejected := &actionsv1alpha1.ResponseRecord{StatusCode: 402, Body: "no", BodyTruncated: true}
	cases := []struct {
		name      string
		xa        *actionsv1alpha1.ExternalAction
		replayed  bool
		terminal  bool
		status    int
		problem   string
		header    map[string]string
		noHeaders []string
	}{
		{name: "pending", xa: action(actionsv1alpha1.PhasePending, nil)},
		{name: "in progress", xa: action(actionsv1alpha1.PhaseInProgress, created)},
		{name: "succeeded, first", xa: action(actionsv1alpha1.PhaseSucceeded, created), terminal: true, status: 201,
			header:    map[string]string{"Location": "/effects/1", "Content-Type": "application/json"},
			noHeaders: []string{HeaderReplayed, HeaderBodyTruncated}},
		{name: "succeeded, repeat", xa: action(actionsv1alpha1.PhaseSucceeded, created), replayed: true,
			terminal: true, status: 201, header: map[string]string{HeaderReplayed: "true"}},
		{name: "failed with response, truncated", xa: action(actionsv1alpha1.PhaseFailed, rejected), terminal: true,
			status: 402, header: map[string]string{HeaderBodyTruncated: "true", HeaderPhase: "Failed"}},
		{name: "exhausted with response", xa: action(actionsv1alpha1.PhaseExhausted, &actionsv1alpha1.ResponseRecord{
			StatusCode: 503}), terminal: true, status: 503},
		{name: "failed without response", xa: action(actionsv1alpha1.PhaseFailed, nil), terminal: true, status: 502,
			problem: "not-sent"},
		{name: "exhausted without response", xa: action(actionsv1alpha1.PhaseExhausted, nil), terminal: true,
			status: 504, problem: "exhausted"},
		{name: "outcome unknown", xa: action(actionsv1alpha1.PhaseOutcomeUnknown, created), terminal: true,
			status: 502, problem: "outcome-unknown"},
		{name: "conflict", xa: action(actionsv1alpha1.PhaseConflict, nil), terminal: true, status: 422,
			problem: "key-reused"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, ok := Decide(c.xa, c.replayed)
			if ok != c.terminal {
				t.Fatalf("terminal = %v, want %v", ok, c.terminal)
			}
			if !ok {
				return
			}
			if a.Status != c.status {
				t.Errorf("status = %d, want %d", a.Status, c.status)
			}
			if c.problem != "" {
				if a.Problem == nil || a.Problem.Type != ProblemTypePrefix+c.problem || a.Problem.Phase != string(c.xa.Status.Phase) ||
					a.Problem.Reason != "SomeReason" || a.Problem.Detail != "some message" ||
					a.Problem.Instance != "/v1/namespaces/shop/actions/order-19" {
					t.Errorf("problem = %+v, want type %s naming phase and reason", a.Problem, c.problem)
				}
			} else if a.Problem != nil || string(a.Body) != c.xa.Status.Response.Body {
				t.Errorf("answer = %+v, want the recorded body", a)
			}
			for k, v := range c.header {
				if got := a.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			for _, k := range c.noHeaders {
				if got := a.Header.Get(k); got != "" {
					t.Errorf("header %s = %q, want none", k, got)
				}
			}
		})
	}
}

func TestDecideTombstone(t *testing.T) {
	ts := &actionsv1alpha1.ActionTombstone{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-19"},
		Spec: actionsv1alpha1.ActionTombstoneSpec{Phase: actionsv1alpha1.PhaseSucceeded, StatusCode: 201}}
	a := DecideTombstone(ts)
	if a.Status != 201 || a.Problem != nil || len(a.Body) != 0 || a.Header.Get(HeaderReplayed) != "true" ||
		a.Header.Get(HeaderBodyTruncated) != "true" || a.Header.Get(HeaderReplayedFrom) != "tombstone" {
		t.Fatalf("tombstone answer = %+v", a)
	}
	// A tombstone that kept the response answers with it, body and kept headers, and is not marked truncated.
	ts.Spec.Response = &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"ch_19"}`, BodySHA256: "sha256:00",
		Headers: map[string]string{"Location": "/charges/ch_19", "Content-Type": "application/json"}}
	a = DecideTombstone(ts)
	if a.Status != 201 || string(a.Body) != `{"id":"ch_19"}` || a.Header.Get("Location") != "/charges/ch_19" ||
		a.Header.Get("Content-Type") != "application/json" || a.Header.Get(HeaderBodyTruncated) != "" ||
		a.Header.Get(HeaderReplayed) != "true" {
		t.Fatalf("tombstone answer with a kept response = %+v (body %q)", a, a.Body)
	}
	if s := StatusOfTombstone(ts); s.Response == nil || s.Response.Body != `{"id":"ch_19"}` {
		t.Fatalf("tombstone status resource response = %+v", s.Response)
	}
	ts.Spec.Response = nil
	ts.Spec.Phase, ts.Spec.StatusCode = actionsv1alpha1.PhaseExhausted, 0
	if a := DecideTombstone(ts); a.Status != http.StatusGatewayTimeout || a.Problem == nil {
		t.Fatalf("exhausted tombstone answer = %+v, want 504 problem", a)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	xa := action(actionsv1alpha1.PhaseInProgress, nil)
	if got := RetryAfter(xa, now); got != "1" {
		t.Errorf("without nextAttemptAt: %s, want 1", got)
	}
	xa.Status.NextAttemptAt = &metav1.Time{Time: now.Add(4500 * time.Millisecond)}
	if got := RetryAfter(xa, now); got != "5" {
		t.Errorf("nextAttemptAt in 4.5s: %s, want 5", got)
	}
	xa.Status.NextAttemptAt = &metav1.Time{Time: now.Add(-time.Minute)}
	if got := RetryAfter(xa, now); got != "1" {
		t.Errorf("past nextAttemptAt: %s, want 1", got)
	}
	xa.Status.NextAttemptAt = &metav1.Time{Time: now.Add(48 * time.Hour)}
	if got := RetryAfter(xa, now); got != "3600" {
		t.Errorf("far nextAttemptAt: %s, want 3600", got)
	}
}
