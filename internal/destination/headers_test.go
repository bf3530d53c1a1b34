package destination

import (
	"strings"
	"testing"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Issue 40 row 7: an action stored before admission refused the routing-override headers is refused by the
// controller's spec check, naming every such header it sets and nothing else; ordinary headers pass.
func TestCheckRequestHeaders(t *testing.T) {
	h := func(names ...string) map[string]actionsv1alpha1.HeaderValue {
		m := map[string]actionsv1alpha1.HeaderValue{}
		for _, n := range names {
			m[n] = "/admin"
		}
		return m
	}
	for _, c := range []struct {
		name    string
		headers map[string]actionsv1alpha1.HeaderValue
		want    string // "" accepted
	}{
		{"none", nil, ""},
		{"ordinary", h("X-Request-Id", "Content-Type", "Accept"), ""},
		{"X-Original-URL", h("X-Original-URL", "X-Request-Id"), "sets X-Original-URL:"},
		{"four of them", h("X-Rewrite-URL", "x-forwarded-prefix", "X-HTTP-Method-Override", "X-Original-URL"),
			"sets X-HTTP-Method-Override, X-Original-URL, X-Rewrite-URL, x-forwarded-prefix:"},
		{"Forwarded", h("Forwarded"), "sets Forwarded:"},
		{"X-Forwarded-For", h("X-Forwarded-For"), "sets X-Forwarded-For:"},
	} {
		err := CheckRequestHeaders(c.headers)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing is sent")):
			t.Errorf("%s: %v, want a refusal containing %q", c.name, err, c.want)
		}
	}
}
