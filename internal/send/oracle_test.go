package send

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"k8s.io/utils/clock"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/redact"
)

// echoAnswer is what an endpoint that echoes its request headers answers to a request carrying
// Authorization: Bearer <token>.
func echoAnswer(token string) *httpexec.Response {
	body, _ := json.Marshal(map[string]any{"headers": map[string]string{"Authorization": "Bearer " + token}})
	return &httpexec.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
}

// The binary search of issue 23 row 3: successWhen (and a post-check's applied) comparing one character of
// the echoed credential with "M", for every position. Through the redacted view the predicate sees only
// Redacted, so every verdict is the same whatever the token: the phase says nothing about the secret.
func TestSuccessWhenIsNoOracleForAnEchoedCredential(t *testing.T) {
	tokens := []string{"AAAAAAAAAAAAAAAAAAAAAAAAAAA", "zzzzzzzzzzzzzzzzzzzzzzzzzzz"} //nolint:gosec // G101: test credentials
	s := &Sender{Exprs: expr.NewCache(256)}
	for i := range len("Bearer ") + len(tokens[0]) {
		src := fmt.Sprintf(`response.body.headers["Authorization"].substring(%d, %d) <= "M"`, i, i+1)
		var seen []string
		for _, tok := range tokens {
			red := redact.New(tok, "Bearer "+tok)
			xa := &actionsv1alpha1.ExternalAction{Spec: actionsv1alpha1.ExternalActionSpec{SuccessWhen: src}}
			ok, err := theSeam.successWhen(s, xa, echoAnswer(tok), red)
			dest := &destination.Resolved{Spec: &actionsv1alpha1.DestinationSpec{
				Reconciliation: &actionsv1alpha1.ReconciliationCheck{Applied: src, NotApplied: "!(" + src + ")"}}}
			v := s.verdict(dest, httpexec.Result{Response: echoAnswer(tok)}, red, "ns")
			seen = append(seen, fmt.Sprintf("successWhen %v (error %v), post-check %s", ok, err != nil, v.Verdict))
		}
		if seen[0] != seen[1] {
			t.Errorf("%s: %s with %q, %s with %q: the decision depends on the secret", src, seen[0], tokens[0], seen[1], tokens[1])
		}
	}
}

// A successWhen that fails to evaluate on a response value says which expression failed and the kind of
// failure in the outcome's error (lastError), never the value (issue 23 row 9).
func TestSuccessWhenErrorNeverQuotesTheResponse(t *testing.T) {
	const planted = "PLANTED-9d41c7"
	s := &Sender{Exprs: expr.NewCache(8), Clock: clock.RealClock{}}
	for _, src := range []string{`{"x": true}[response.body.id]`, `[true][response.body.n]`, `int(response.body.id) > 0`,
		`response.body.id.matches(response.body.id + "(")`} {
		xa := &actionsv1alpha1.ExternalAction{Spec: actionsv1alpha1.ExternalActionSpec{SuccessWhen: src}}
		resp := &httpexec.Response{StatusCode: 201, Header: http.Header{},
			Body: []byte(`{"id":"` + planted + `","n":740012}`)}
		o := theSeam.classify(s, xa, httpexec.Result{Response: resp, Written: true}, ledger.Env{}, nil)
		if !strings.Contains(o.Error, "spec.successWhen") || strings.Contains(o.Error, planted) ||
			strings.Contains(o.Error, "740012") {
			t.Errorf("%s: error %q, want the expression named and no response value", src, o.Error)
		}
	}
}
