package send

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/retry"
)

// DESIGN rule 12 at the send: a 201 whose successWhen cannot get an evaluation slot is Unjudged, never
// Rejected, with what a later evaluation needs; Judge then evaluates the status it was recorded in and finds
// Success, sending nothing. A status whose response differs from the one received is not judged at all.
func TestUnfinishedSuccessWhenIsUnjudgedThenJudgedFromStatus(t *testing.T) {
	s := &Sender{Exprs: expr.NewCache(8), Clock: clock.RealClock{}}
	now := s.Clock.Now()
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pay-1"}}
	xa.Spec.Request = actionsv1alpha1.ActionRequest{Method: http.MethodPost, Path: "/charges"}
	xa.Status.Claim = &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "h", StartedAt: metav1.NewTime(now),
		ExpiresAt: metav1.NewTime(now.Add(time.Minute))}
	// A comprehension, so that the evaluation takes a slot (expr.QuickCost).
	xa.Spec.SuccessWhen = `[201].exists(c, c == response.statusCode) && response.headers["x-charge"] == "ch_1"`
	resp := &httpexec.Response{StatusCode: 201, Header: http.Header{"X-Charge": {"ch_1"}}, Body: []byte(`{"id":"ch_1"}`)}
	env := ledger.Env{Policy: retry.Policy{RetryOnStatus: retry.DefaultRetryOnStatus()}}

	release := expr.Occupy()
	o := theSeam.classify(s, xa, httpexec.Result{Response: resp, Written: true}, env, nil)
	release()
	if o.Class != retry.ClassUnjudged || o.Unjudgeable != "" || o.Verdict == nil {
		t.Fatalf("outcome %s (unjudgeable %q, verdict %+v); want Unjudged with a pending verdict", o.Class, o.Unjudgeable, o.Verdict)
	}
	if v := o.Verdict; v.Otherwise != string(retry.ClassRejected) || v.Headers["x-charge"] != "ch_1" || v.InputSHA256 == "" ||
		!strings.Contains(v.Reason, "no evaluation slot") {
		t.Errorf("verdict %+v", v)
	}

	// What status keeps: the response record and the claim's pending verdict.
	xa.Status.Response = o.Response
	xa.Status.Claim.Verdict = o.Verdict
	j := s.Judge(context.Background(), xa)
	if j.Class != retry.ClassSuccess || j.StatusCode != 201 {
		t.Fatalf("Judge = %s (%d), want Success", j.Class, j.StatusCode)
	}
	// successWhen not holding on the same input gives the recorded class.
	other := xa.DeepCopy()
	other.Spec.SuccessWhen = `response.statusCode == 200`
	if j := s.Judge(context.Background(), other); j.Class != retry.ClassRejected {
		t.Errorf("Judge of a predicate that does not hold = %s, want Rejected", j.Class)
	}
	// A body changed on the way into status (trimmed by the API server) is not judged: a person decides.
	trimmed := xa.DeepCopy()
	trimmed.Status.Response.Body = ""
	if j := s.Judge(context.Background(), trimmed); j.Class != retry.ClassUnjudged || j.Unjudgeable == "" {
		t.Errorf("Judge of another input = %s (%q), want Unjudged and unjudgeable", j.Class, j.Unjudgeable)
	}
	// Slots still taken: no verdict again, never a rejection.
	release = expr.Occupy()
	j = s.Judge(context.Background(), xa)
	release()
	if j.Class != retry.ClassUnjudged || j.Unjudgeable != "" {
		t.Errorf("Judge without a slot = %s (%q), want Unjudged", j.Class, j.Unjudgeable)
	}
}

// A post-check whose applied expression did not finish draws no verdict, even when notApplied holds: NotApplied
// would allow a second send of an effect that may be applied.
func TestPostCheckNeverNotAppliedWhileAppliedIsUnevaluated(t *testing.T) {
	s := &Sender{Exprs: expr.NewCache(8)}
	dest := &destination.Resolved{Spec: &actionsv1alpha1.DestinationSpec{
		Reconciliation: &actionsv1alpha1.ReconciliationCheck{Applied: `["paid"].exists(s, s == response.body.state)`, NotApplied: `response.statusCode == 200`}}}
	answer := httpexec.Result{Response: &httpexec.Response{StatusCode: 200, Header: http.Header{}, Body: []byte(`{"state":"paid"}`)}}
	release := expr.Occupy()
	got := s.verdict(dest, answer, nil, "ns")
	release()
	if got.Verdict != ledger.VerdictInconclusive || !strings.Contains(got.Why, "did not finish") {
		t.Errorf("verdict %s (%q), want Inconclusive saying the evaluation did not finish", got.Verdict, got.Why)
	}
	if got := s.verdict(dest, answer, nil, "ns"); got.Verdict != ledger.VerdictApplied {
		t.Errorf("with a slot: verdict %s, want Applied", got.Verdict)
	}
}
