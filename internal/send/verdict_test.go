package send

import (
	"net/http"
	"strings"
	"testing"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/redact"
)

// A post-check expression that fails on the answer leaves the verdict inconclusive and says which expression
// failed, without quoting the response; an expression that holds decides.
func TestVerdictSaysWhichExpressionFailed(t *testing.T) {
	s := &Sender{Exprs: expr.NewCache(8)}
	answer := httpexec.Result{Response: &httpexec.Response{StatusCode: 200, Header: http.Header{},
		Body: []byte(`{"id":"secret-looking-value"}`)}}
	for _, tc := range []struct {
		applied, notApplied string
		want                ledger.Verdict
		why                 []string
	}{
		{`response.body.id > 0`, `response.body.id < 0`, ledger.VerdictInconclusive,
			[]string{"spec.reconciliation.applied failed to evaluate", "spec.reconciliation.notApplied failed to evaluate"}},
		{`response.body.id > 0`, `response.statusCode == 200`, ledger.VerdictNotApplied, nil},
		{`response.statusCode == 200`, `false`, ledger.VerdictApplied, nil},
		{`response.statusCode == 201`, `response.statusCode == 404`, ledger.VerdictInconclusive, nil},
	} {
		dest := &destination.Resolved{Spec: &actionsv1alpha1.DestinationSpec{
			Reconciliation: &actionsv1alpha1.ReconciliationCheck{Applied: tc.applied, NotApplied: tc.notApplied}}}
		got := s.verdict(dest, answer, nil, "ns")
		if got.Verdict != tc.want {
			t.Errorf("%s / %s: verdict %s, want %s", tc.applied, tc.notApplied, got.Verdict, tc.want)
		}
		for _, w := range tc.why {
			if !strings.Contains(got.Why, w) {
				t.Errorf("%s / %s: why %q lacks %q", tc.applied, tc.notApplied, got.Why, w)
			}
		}
		if len(tc.why) == 0 && got.Why != "" {
			t.Errorf("%s / %s: why %q, want none", tc.applied, tc.notApplied, got.Why)
		}
		if strings.Contains(got.Why, "secret-looking-value") {
			t.Errorf("why quotes the response: %q", got.Why)
		}
	}
}

// On a ClusterDestination with response.expose, the post-check's applied and notApplied (the admin's own
// expressions) judge the whole redacted answer, while the record kept in the action's status holds only the
// exposed parts.
func TestVerdictJudgesTheWholeViewAndRecordsTheExposedOne(t *testing.T) {
	s := &Sender{Exprs: expr.NewCache(8)}
	answer := httpexec.Result{Response: &httpexec.Response{StatusCode: 200,
		Header: http.Header{"Set-Cookie": {"session=s1"}, "Content-Type": {"application/json"}},
		Body:   []byte(`{"items":[{"id":"p1","state":"paid"}],"session":"s1"}`), BodySHA256: "sha256:x"}}
	dest := &destination.Resolved{Spec: &actionsv1alpha1.DestinationSpec{Reconciliation: &actionsv1alpha1.ReconciliationCheck{
		Applied: `size(response.body.items) > 0 && "set-cookie" in response.headers`, NotApplied: `size(response.body.items) == 0`}}}
	for _, tc := range []struct {
		name     string
		e        *redact.Exposure
		wantBody string
	}{
		{"status code only", &redact.Exposure{}, ""},
		{"one leaf", &redact.Exposure{Body: []string{"/items/0/state"}}, `{"items":[{"state":"paid"}]}`},
	} {
		got := s.verdict(dest, answer, redact.New().Exposing(tc.e), "ns")
		if got.Verdict != ledger.VerdictApplied || got.Why != "" {
			t.Errorf("%s: verdict %s (%s), want applied from the whole view", tc.name, got.Verdict, got.Why)
		}
		if r := got.Rec; r == nil || r.StatusCode != 200 || r.Body != tc.wantBody || len(r.Headers) != 0 || r.BodySHA256 != "" {
			t.Errorf("%s: record %+v, want status 200 and body %q only", tc.name, r, tc.wantBody)
		}
	}
}
