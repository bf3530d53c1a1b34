package membudget

import (
	"sync/atomic"
	"testing"
)

// A flow takes what is free up to half the budget; the rest stays for the others; bytes given back fit again,
// and a release called twice gives them back once.
func TestTryTakeHoldsTheBudgetAndTheFlowCap(t *testing.T) {
	b := New(100)
	var freed atomic.Int32
	b.OnFree(func() { freed.Add(1) })
	relA, ok := b.TryTake("team-a", 50)
	if !ok {
		t.Fatal("team-a's first 50 of 100 bytes refused")
	}
	if _, ok := b.TryTake("team-a", 1); ok {
		t.Fatal("team-a took a byte past its cap of half the budget")
	}
	relB, ok := b.TryTake("team-b", 50)
	if !ok {
		t.Fatal("team-b's 50 bytes refused while 50 were free")
	}
	if _, ok := b.TryTake("team-c", 1); ok || b.Fits("team-c", 1) {
		t.Fatal("team-c took a byte of a full budget")
	}
	if b.Used() != 100 || b.Held("team-a") != 50 || b.Held("team-b") != 50 {
		t.Fatalf("used %d, team-a %d, team-b %d; want 100, 50, 50", b.Used(), b.Held("team-a"), b.Held("team-b"))
	}
	relA()
	relA()
	if b.Used() != 50 || b.Held("team-a") != 0 || freed.Load() != 1 {
		t.Fatalf("after team-a's release (twice): used %d, team-a %d, OnFree called %d times; want 50, 0, 1",
			b.Used(), b.Held("team-a"), freed.Load())
	}
	if !b.Fits("team-c", 50) || b.Fits("team-c", 51) {
		t.Fatal("team-c: want 50 bytes to fit, 51 not")
	}
	relB()
	if b.Used() != 0 {
		t.Fatalf("used %d after every release; want 0", b.Used())
	}
	if _, ok := b.TryTake("team-a", -1); ok {
		t.Fatal("a negative take was accepted")
	}
}

// Split sets aside the evaluations' heaps, at most half of the budget, cutting the slots to what fits.
func TestSplitSetsTheEvaluationsApart(t *testing.T) {
	for _, c := range []struct {
		total, bound     int64
		slots, wantSlots int
		wantRest         int64
	}{
		{128 << 20, 16 << 20, 2, 2, 96 << 20},
		{128 << 20, 16 << 20, 16, 4, 64 << 20},
		{16 << 20, 16 << 20, 2, 1, 1},
		{128 << 20, 16 << 20, 0, 1, 112 << 20},
	} {
		slots, rest := Split(c.total, c.slots, c.bound)
		if slots != c.wantSlots || rest != c.wantRest {
			t.Errorf("Split(%d, %d, %d) = %d, %d; want %d, %d", c.total, c.slots, c.bound, slots, rest, c.wantSlots, c.wantRest)
		}
	}
}
