package send_test

import (
	"strings"
	"testing"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/send"
)

// Admit is the one admission of attempts, post-checks and dead-letter deliveries: a token of the destination's
// rate limit, and for a retry of its retry budget, or a wait with the API's reason and the time to ask again.
func TestAdmit(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	zero := int32(0)
	paced := &destination.Resolved{ID: "ClusterDestination/cases", Limits: limiter.Limits{RequestsPerSecond: 1, Burst: 1}}
	noRetries := &destination.Resolved{ID: "ClusterDestination/strict", Limits: limiter.Limits{}.WithRetryBudget(&zero, &zero, 0)}
	l := limiter.NewRegistry()
	for _, c := range []struct {
		name       string
		dest       *destination.Resolved
		key        string
		first      bool
		wantReason string // "" admitted
	}{
		{"first record takes the burst", paced, "team-a/pay-1", true, ""},
		{"second record waits for the rate", paced, "team-b/pay-1", true, actionsv1alpha1.ReasonRateLimited},
		{"a first attempt never waits on the budget", noRetries, "team-a/pay-2", true, ""},
		{"a retry waits on a budget of none", noRetries, "team-a/pay-2", false, actionsv1alpha1.ReasonRetryBudgetExhausted},
	} {
		ns, _, _ := strings.Cut(c.key, "/")
		w := send.Admit(l, nil, c.dest, ns, c.key, c.first, now)
		switch {
		case c.wantReason == "" && w != nil:
			t.Errorf("%s: waits %+v, want admitted", c.name, w)
		case c.wantReason != "" && (w == nil || w.Reason != c.wantReason || !w.Until.After(now) ||
			!strings.Contains(w.Message, c.dest.ID) || !strings.Contains(w.Message, c.wantReason)):
			t.Errorf("%s: %+v, want a wait with reason %s after now naming %s", c.name, w, c.wantReason, c.dest.ID)
		}
	}
}
