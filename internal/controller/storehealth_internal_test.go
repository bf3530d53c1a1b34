package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// An outage of the tombstone store is two Info lines however many operations fail: one at the first failure
// (with the error), one at the first answer after it (with the number of distinct actions that waited and for
// how long). The recheck grows with the outage from 1 s to 30 s, jittered to [after/2, 3*after/2).
func TestStoreHealthTwoLinesPerOutage(t *testing.T) {
	var lines []string
	ctx := log.IntoContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	h := &storeHealth{}
	t0 := time.Unix(1_800_000_000, 0)
	h.answered(ctx, "postgres", t0) // up: nothing to say
	down := errors.New("connect: connection refused")
	for i := range 10 {
		h.failed(ctx, "postgres", types.NamespacedName{Namespace: "shop", Name: []string{"a", "b", "c"}[i%3]}, down, t0.Add(time.Duration(i)*time.Second))
	}
	if got := h.downFor(t0.Add(20 * time.Second)); got != 20*time.Second {
		t.Errorf("downFor = %v, want 20s", got)
	}
	h.answered(ctx, "postgres", t0.Add(20*time.Second))
	h.answered(ctx, "postgres", t0.Add(21*time.Second))
	if h.downFor(t0.Add(22*time.Second)) != 0 {
		t.Error("downFor after the store answered, want 0")
	}
	all := strings.Join(lines, "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "became unreachable") || !strings.Contains(lines[0], "connection refused") ||
		!strings.Contains(lines[1], "reachable again") || !strings.Contains(lines[1], `"waitingActions"=3`) ||
		!strings.Contains(lines[1], `"downFor"="20s"`) {
		t.Errorf("log lines:\n%s\nwant one unreachable line with the error and one reachable-again line with 3 actions and 20s", all)
	}
	for _, c := range []struct{ down, lo, hi time.Duration }{
		{0, 500 * time.Millisecond, 1500 * time.Millisecond},
		{10 * time.Second, 2500 * time.Millisecond, 7500 * time.Millisecond},
		{time.Hour, 15 * time.Second, 45 * time.Second},
	} {
		for _, r := range []float64{0, 0.5, 0.999} {
			if got := storeRecheck(c.down, func() float64 { return r }); got < c.lo || got >= c.hi {
				t.Errorf("storeRecheck(%v, %v) = %v, want in [%v, %v)", c.down, r, got, c.lo, c.hi)
			}
		}
	}
}
