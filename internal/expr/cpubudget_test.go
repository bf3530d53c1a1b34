package expr

import (
	"context"
	"testing"
	"time"
)

// The budget is a token bucket of CPU time: CPUBurst banked, cores accrued a second, and what was spent beyond it
// owed for owed/cores.
func TestCPUBudgetOwesWhatWasSpentBeyondIt(t *testing.T) {
	now := time.Unix(0, 0)
	b := newCPUBudget(0.25)
	b.now = func() time.Time { return now }
	if got := b.owed(); got != 0 {
		t.Fatalf("a new budget owes %v, want 0", got)
	}
	b.spend(CPUBurst) // the whole burst: nothing owed yet
	if got := b.owed(); got != 0 {
		t.Fatalf("after the burst: owes %v, want 0", got)
	}
	b.spend(100 * time.Millisecond) // 100 ms beyond it, at a quarter of a core: 400 ms
	if got := b.owed(); got != 400*time.Millisecond {
		t.Fatalf("100 ms beyond the burst at 0.25 cores: owes %v, want 400ms", got)
	}
	now = now.Add(300 * time.Millisecond)
	if got := b.owed(); got != 100*time.Millisecond {
		t.Fatalf("300 ms later: owes %v, want 100ms", got)
	}
	now = now.Add(time.Hour) // idle: no more than the burst is banked
	b.spend(CPUBurst + 40*time.Millisecond)
	if got := b.owed(); got != 160*time.Millisecond {
		t.Fatalf("after an idle hour, burst + 40 ms spent: owes %v, want 160ms", got)
	}
}

// An evaluation thread charges the budget with the CPU its function used (its own thread's clock), and a slot
// whose evaluations left the budget owing stays taken until it is not: the next evaluation waits for it.
func TestASlotStaysTakenWhileTheCPUBudgetIsOwed(t *testing.T) {
	b := newCPUBudget(1)
	b.tokens = 0
	saved, savedSlots := cpu, slots
	cpu = b
	slots = newFairSlots(1)
	defer func() { cpu, slots = saved, savedSlots }()

	free, err := slots.acquire(context.Background(), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	evalThreads.run(func() { spin(30 * time.Millisecond) }) // 30 ms of CPU on the thread
	b.mu.Lock()
	spent := -b.tokens
	b.mu.Unlock()
	if spent < 25*time.Millisecond {
		t.Fatalf("the budget was charged %v for 30 ms of CPU", spent)
	}
	b.mu.Lock()
	b.tokens = -2 * time.Second // as if the evaluations had used 2 s beyond the budget: owed for 2 s at 1 core
	b.mu.Unlock()
	free()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := slots.acquire(ctx, "team-b"); err == nil {
		t.Fatal("a slot freed while 2 s of CPU were owed was taken at once")
	}
	b.mu.Lock()
	b.tokens = 0 // paid: the slot comes back when its timer fires, which was set for the 2 s owed
	b.mu.Unlock()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	free2, err := slots.acquire(ctx2, "team-b")
	if err != nil {
		t.Fatalf("the slot did not come back once the debt was paid: %v", err)
	}
	free2()
}

// spin uses d of the calling thread's CPU (or sleeps d where the thread's clock cannot be read).
func spin(d time.Duration) {
	t0, ok := threadCPU()
	if !ok {
		time.Sleep(d)
		return
	}
	for {
		if t1, _ := threadCPU(); t1-t0 >= d {
			return
		}
	}
}

// A tenant whose slotted evaluations run back to back gets the budget's cores, not the slot's whole core: over
// 1.5 s, evaluations of 20 ms of CPU each, one after the other in one slot, use at most the budget (0.25 cores)
// times the time plus the burst and the last evaluations; without the budget they would use about a core.
func TestBackToBackEvaluationsGetTheBudgetNotACore(t *testing.T) {
	b := newCPUBudget(0.25)
	saved, savedSlots := cpu, slots
	cpu = b
	slots = newFairSlots(1)
	defer func() { cpu, slots = saved, savedSlots }()

	var used time.Duration
	began := time.Now()
	for time.Since(began) < 1500*time.Millisecond {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		free, err := slots.acquire(ctx, "team-a")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		evalThreads.run(func() {
			t0, ok := threadCPU()
			spin(20 * time.Millisecond)
			if t1, ok1 := threadCPU(); ok && ok1 {
				used += t1 - t0
			} else {
				used += 20 * time.Millisecond
			}
		})
		free()
	}
	elapsed := time.Since(began)
	bound := time.Duration(0.25*float64(elapsed)) + CPUBurst + 50*time.Millisecond // + the last two evaluations
	t.Logf("%v of CPU in %v (bound %v)", used, elapsed, bound)
	if used > bound {
		t.Errorf("back-to-back evaluations used %v of CPU in %v; the budget of 0.25 cores allows %v", used, elapsed, bound)
	}
}
