// Package uncertain holds envtest integration tests of uncertain outcomes (DESIGN rules 2, 3, 8 and 9): slow
// destinations, lost responses, crashes between send and record, stuck claims, decisions by people, deletion
// during an open attempt and two managers at once. Each test runs the real manager in-process against a real
// kube-apiserver and the recording destination of test/destination.
package uncertain

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

// fast is a destination mutation: per-attempt timeout, key support and short backoffs without jitter (0.5s, then
// 1s) so retries come quickly and their number is predictable.
func fast(timeout time.Duration, supported bool, more ...func(*actionsv1alpha1.DestinationSpec)) func(*actionsv1alpha1.DestinationSpec) {
	return func(s *actionsv1alpha1.DestinationSpec) {
		s.Timeout = &metav1.Duration{Duration: timeout}
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: supported}
		attempts := int32(10)
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{
			MaxAttempts:    &attempts,
			InitialBackoff: &metav1.Duration{Duration: 500 * time.Millisecond},
			MaxBackoff:     &metav1.Duration{Duration: time.Second},
			Jitter:         actionsv1alpha1.JitterNone,
		}
		for _, m := range more {
			m(s)
		}
	}
}

// postCheck configures the destination's reconciliation post-check against the recording destination.
func postCheck(s *actionsv1alpha1.DestinationSpec) {
	s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{
		Path:       "/effects?key={key}",
		Applied:    "response.statusCode == 200",
		NotApplied: "response.statusCode == 404",
	}
}

func stalled(xa *actionsv1alpha1.ExternalAction) bool {
	return meta.IsStatusConditionTrue(xa.Status.Conditions, actionsv1alpha1.ConditionStalled)
}

// sameKey fails unless every request in log carried the idempotency key.
func sameKey(t *testing.T, log []destination.Received, key string) {
	t.Helper()
	for i, r := range log {
		if got := r.Header.Get("Idempotency-Key"); got != key {
			t.Errorf("request %d carried Idempotency-Key %q, want %q", i+1, got, key)
		}
	}
}

func historyResults(xa *actionsv1alpha1.ExternalAction) string {
	parts := make([]string, 0, len(xa.Status.AttemptHistory))
	for _, h := range xa.Status.AttemptHistory {
		parts = append(parts, h.Result)
	}
	return strings.Join(parts, ",")
}

func conditionTrue(xa *actionsv1alpha1.ExternalAction, ct string) bool {
	return meta.IsStatusConditionTrue(xa.Status.Conditions, ct)
}
