package destination

import (
	"testing"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/limiter"
)

// Every reason package limiter gives is mapped to the API's reason of the same meaning.
func TestLimiterReasonsMapToAPIReasons(t *testing.T) {
	for in, want := range map[limiter.Reason]string{
		limiter.ReasonRateLimited:          actionsv1alpha1.ReasonRateLimited,
		limiter.ReasonRetryBudgetExhausted: actionsv1alpha1.ReasonRetryBudgetExhausted,
	} {
		if got := LimiterReason(in); got != want {
			t.Errorf("LimiterReason(%q) = %q, want %q", in, got, want)
		}
	}
}
