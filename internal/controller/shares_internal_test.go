package controller

import (
	"testing"

	"github.com/actionledger/actionledger/internal/fairqueue"
)

// The fair queue's shares from the flags: half the workers while contended and an eighth for the dominant
// namespace by default, each at least 1, the dominant share never over the contended one (equal turns it off).
func TestOptionsShares(t *testing.T) {
	for _, tc := range []struct {
		name                string
		workers             int
		contended, dominant int
		want                fairqueue.Shares
	}{
		{"defaults, 16 workers", 16, 0, 0, fairqueue.Shares{Alone: 16, Contended: 8, Dominant: 2}},
		{"defaults, 4 workers", 4, 0, 0, fairqueue.Shares{Alone: 4, Contended: 2, Dominant: 1}},
		{"defaults, 1 worker", 1, 0, 0, fairqueue.Shares{Alone: 1, Contended: 1, Dominant: 1}},
		{"set", 16, 6, 3, fairqueue.Shares{Alone: 16, Contended: 6, Dominant: 3}},
		{"dominant over contended: off", 16, 4, 9, fairqueue.Shares{Alone: 16, Contended: 4, Dominant: 4}},
		{"contended 2, dominant default", 16, 2, 0, fairqueue.Shares{Alone: 16, Contended: 2, Dominant: 2}},
		{"contended over the workers", 8, 20, 0, fairqueue.Shares{Alone: 8, Contended: 8, Dominant: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{ContendedReconciles: tc.contended, DominantReconciles: tc.dominant}
			if got := o.shares(tc.workers); got != tc.want {
				t.Errorf("shares(%d) = %+v; want %+v", tc.workers, got, tc.want)
			}
		})
	}
}
