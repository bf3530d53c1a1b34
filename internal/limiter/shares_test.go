package limiter

import (
	"testing"
	"time"
)

// admitted counts the keys k0..k(n-1) of one namespace that are admitted at now.
func admitted(r *Registry, l Limits, prefix string, n int, now time.Time) int {
	got := 0
	for i := range n {
		if ok, _, _ := r.Admit(destA, l, "shop", prefix+string(rune('a'+i)), true, now); ok {
			got++
		}
	}
	return got
}

// Limits.Shares divides the bucket: with 2 shares of 10/s burst 4 a new bucket starts empty, refills at 5/s and
// holds at most 2; with Shares 0 or 1 nothing changes (a full bucket of 4 at 10/s).
func TestSharesDivideTheBucket(t *testing.T) {
	whole := Limits{RequestsPerSecond: 10, Burst: 4}
	for _, shares := range []int{0, 1} {
		l := whole
		l.Shares = shares
		if got := admitted(NewRegistry(), l, "w", 10, t0); got != 4 {
			t.Errorf("shares %d: %d admitted at once, want the whole burst 4", shares, got)
		}
	}
	half := whole
	half.Shares = 2
	r := NewRegistry()
	if got := admitted(r, half, "a", 3, t0); got != 0 {
		t.Errorf("2 shares: a new bucket admitted %d at once, want 0 (it starts empty)", got)
	}
	// After 1 s at 5/s the bucket holds its burst of 2; the 3 waiting keys are ahead, 2 of them go.
	if got := admitted(r, half, "a", 3, t0.Add(time.Second)); got != 2 {
		t.Errorf("2 shares after 1s: %d admitted, want burst/2 = 2", got)
	}
	// Back to one share (the other shard left): the rate doubles, the tokens do not jump.
	if got := admitted(r, whole, "a", 3, t0.Add(time.Second)); got != 0 {
		t.Errorf("back to 1 share: %d admitted at once, want 0 (tokens are kept, not refilled)", got)
	}
	if got := admitted(r, whole, "a", 3, t0.Add(time.Second+100*time.Millisecond)); got != 1 {
		t.Errorf("back to 1 share after 100ms: %d admitted, want 1 (10/s)", got)
	}
}

// The retry-budget floor is divided among the shares; the percentage is of this manager's own first attempts.
func TestSharesDivideTheBudgetFloor(t *testing.T) {
	l := Limits{}.WithRetryBudget(new(int32(0)), new(int32(2)), 10*time.Second)
	for shares, want := range map[int]int{1: 20, 2: 10, 4: 5} {
		l.Shares = shares
		r := NewRegistry()
		got := 0
		for i := range 40 {
			if ok, _, _ := r.Admit(destA, l, "shop", "r"+string(rune('A'+i)), false, t0); ok {
				got++
			}
		}
		if got != want {
			t.Errorf("%d shares: %d retries admitted in the window, want 2/s*10s/%d = %d", shares, got, shares, want)
		}
	}
}
