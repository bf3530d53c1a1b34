package requeue

import (
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

func TestAt(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, tc := range map[string]struct {
		t    time.Time
		want ctrl.Result
	}{
		"no step":      {time.Time{}, ctrl.Result{}},
		"in the past":  {now.Add(-time.Hour), ctrl.Result{RequeueAfter: Now}},
		"due now":      {now, ctrl.Result{RequeueAfter: Now}},
		"in 3 seconds": {now.Add(3 * time.Second), ctrl.Result{RequeueAfter: 3 * time.Second}},
	} {
		if got := At(tc.t, now); got != tc.want {
			t.Errorf("%s: At = %+v, want %+v", name, got, tc.want)
		}
	}
	// After has the floor but no "no requeue": a zero time is long past.
	if got := After(time.Time{}, now); got != Now {
		t.Errorf("After(zero) = %s, want %s", got, Now)
	}
}
