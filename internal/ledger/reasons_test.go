package ledger

import (
	"testing"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/retry"
)

// Every reason package retry gives is mapped to the API's reason of the same meaning.
func TestRetryReasonsMapToAPIReasons(t *testing.T) {
	for in, want := range map[string]string{
		retry.ReasonAttemptsExhausted:      actionsv1alpha1.ReasonAttemptsExhausted,
		retry.ReasonDeadlineExceeded:       actionsv1alpha1.ReasonDeadlineExceeded,
		retry.ReasonRetryAfterPastDeadline: actionsv1alpha1.ReasonRetryAfterPastDeadline,
	} {
		if got := retryReason(in); got != want {
			t.Errorf("retryReason(%q) = %q, want %q", in, got, want)
		}
	}
}
