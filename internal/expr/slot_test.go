package expr

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// An evaluation waits at most SlotWait for a slot; not getting one is Unfinished (it decides nothing, DESIGN rule
// 12), and so are its deadline and cancellation, while an expression's own runtime error and the cost limit are
// not. The evaluation's own EvalTimeout starts once it has a slot: a wait behind other evaluations does not eat it.
func TestSlotWaitIsUnfinishedAndApartFromTheEvaluation(t *testing.T) {
	p, err := Compile(slotted) // `response.statusCode == 201` is quick and takes no slot
	if err != nil {
		t.Fatal(err)
	}
	in := Response{StatusCode: 201, Header: http.Header{}}
	release := Occupy()
	_, err = p.Eval(in)
	release()
	if !Unfinished(err) || NeverFinishes(err) {
		t.Fatalf("no slot: err %v, Unfinished %v; want an unfinished evaluation", err, Unfinished(err))
	}

	// A slot freed within SlotWait: the evaluation runs in full.
	release = Occupy()
	go func() { // free the slots once the evaluation waits for one
		for waiting := 0; waiting == 0; {
			slots.mu.Lock()
			waiting = slots.waiting
			slots.mu.Unlock()
			runtime.Gosched()
		}
		release()
	}()
	if ok, err := p.Eval(in); err != nil || !ok {
		t.Fatalf("slot freed in time: %v, %v", ok, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release = Occupy()
	_, err = p.EvalContext(ctx, in)
	release()
	if !Unfinished(err) {
		t.Errorf("cancelled while waiting for a slot: err %v is not Unfinished", err)
	}
	bad, err := Compile(`response.body.missing == 1`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Eval(in); err == nil || Unfinished(err) || NeverFinishes(err) {
		t.Errorf("a missing key: err %v; want a finished evaluation's error", err)
	}
	for _, e := range []error{errors.New("plain"), nil, &EvalError{Kind: kindCostLimit}} {
		if Unfinished(e) {
			t.Errorf("Unfinished(%v) = true", e)
		}
	}
	if !NeverFinishes(&EvalError{Kind: kindCostLimit}) {
		t.Error("the cost limit must never finish")
	}
}

// queuedIn waits until s has n waiters.
func queuedIn(s *fairSlots, n int) {
	for {
		s.mu.Lock()
		q := s.waiting
		s.mu.Unlock()
		if q == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// The slots go to the waiting flow (namespace) that used the least slot time: with the slot held by one flow and
// that flow queueing many evaluations before another queues one, the other's is served by the next free slot,
// not after the queue. A waiter that gives up leaves no trace.
func TestSlotsServeTheFlowThatUsedLeast(t *testing.T) {
	s := newFairSlots(1)
	hold, err := s.acquire(context.Background(), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 16)
	start := func(flow string) {
		go func() {
			free, err := s.acquire(context.Background(), flow)
			if err != nil {
				t.Error(err)
				return
			}
			order <- flow
			free()
		}()
	}
	for i := range 8 {
		start("team-a")
		queuedIn(s, i+1)
	}
	start("team-b")
	queuedIn(s, 9)
	time.Sleep(2 * time.Millisecond) // team-a has held the slot: it is charged more than team-b
	hold()
	var got []string
	for range 9 {
		got = append(got, <-order)
	}
	if got[0] != "team-b" {
		t.Errorf("served in order %v; want team-b first, before team-a's queue", got)
	}

	// A waiter that gives up leaves no trace: the next free slot goes to the one still waiting.
	hold, _ = s.acquire(context.Background(), "team-a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.acquire(ctx, "team-a"); err == nil {
		t.Fatal("acquired a taken slot")
	}
	start("team-b")
	queuedIn(s, 1)
	hold()
	if flow := <-order; flow != "team-b" {
		t.Errorf("served %s, want team-b", flow)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		used, waiting := s.used, s.waiting
		busy := 0
		for _, f := range s.flows {
			if !f.idle() {
				busy++
			}
		}
		s.mu.Unlock()
		if used == 0 && waiting == 0 && busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after all released: used %d, waiting %d, busy flows %d", used, waiting, busy)
		}
		time.Sleep(time.Millisecond)
	}
}

// Issue 40 item 6: team-a keeps every slot busy with evaluations of 20 ms and always has more waiting, and
// team-b then queues 20 cheap ones (a `response.statusCode == 201`). Served one evaluation per turn, team-b got
// one slot per team-a evaluation that ended: its 20th waited 20 of team-a's evaluations (in the bench, up to
// SlotWait, and its verdict was left pending). Served by slot time, team-b's run back to back on the next free
// slot.
func TestSlotsServeCheapEvaluationsBesideExpensiveOnes(t *testing.T) {
	s := newFairSlots(2)
	var mu sync.Mutex
	var order []string
	record := func(flow string) {
		mu.Lock()
		order = append(order, flow)
		mu.Unlock()
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 6 { // team-a: 6 evaluations at a time offered to 2 slots
		wg.Go(func() {
			for ctx.Err() == nil {
				free, err := s.acquire(context.Background(), "team-a")
				if err != nil {
					t.Error(err)
					return
				}
				record("a")
				time.Sleep(20 * time.Millisecond)
				free()
			}
		})
	}
	time.Sleep(70 * time.Millisecond)
	var b sync.WaitGroup
	for range 20 {
		b.Go(func() {
			free, err := s.acquire(context.Background(), "team-b")
			if err != nil {
				t.Error(err)
				return
			}
			record("b")
			free()
		})
	}
	b.Wait()
	stop()
	wg.Wait()
	first, last := slices.Index(order, "b"), 0
	for i, f := range order {
		if f == "b" {
			last = i
		}
	}
	between := 0
	for _, f := range order[first : last+1] {
		if f == "a" {
			between++
		}
	}
	// The other slot may go to team-a once while team-b's first ones are being queued.
	if between > 2 {
		t.Errorf("team-a was served %d times between team-b's first and last of 20 (%v); want at most 2", between,
			order[first:last+1])
	}
}

// A flow that starts waiting is charged the virtual time, not nothing: a tenant idle until now does not take
// every slot from one that has been using them, they alternate.
func TestSlotsGiveNoCreditForIdleTime(t *testing.T) {
	s := newFairSlots(1)
	var clkMu sync.Mutex
	clk := time.Unix(0, 0)
	s.now = func() time.Time { clkMu.Lock(); defer clkMu.Unlock(); return clk }
	tick := func() { clkMu.Lock(); clk = clk.Add(10 * time.Millisecond); clkMu.Unlock() }
	for range 10 { // team-a alone: 10 evaluations of 10 ms
		free, _ := s.acquire(context.Background(), "team-a")
		tick()
		free()
	}
	hold, _ := s.acquire(context.Background(), "team-b") // team-b's first, from a free slot
	type grant struct {
		flow string
		free func()
	}
	granted := make(chan grant, 8)
	for i, flow := range []string{"team-a", "team-a", "team-a", "team-b", "team-b", "team-b"} {
		go func() {
			free, err := s.acquire(context.Background(), flow)
			if err != nil {
				t.Error(err)
				return
			}
			granted <- grant{flow, free}
		}()
		queuedIn(s, i+1)
	}
	tick()
	hold()
	var got []string
	for range 6 {
		g := <-granted
		got = append(got, g.flow)
		tick()
		g.free()
	}
	if want := []string{"team-a", "team-b", "team-a", "team-b", "team-a", "team-b"}; !slices.Equal(got, want) {
		t.Errorf("served %v; want %v (team-b, idle until now, charged from the virtual time)", got, want)
	}
}

// HoldSlot never waits: with a slot free the reconcile gets it, and its evaluations run under it (acquire takes
// nothing more, so two in a row with one slot do not wait on themselves). With none free the key takes its place
// in its flow's queue, in the same fair order as a waiting evaluation: when its turn comes the slot is held for it
// and it is woken, and its next HoldSlot gets that slot, ahead of a later waiter; a slot not taken within the
// grace goes on; DropSlot leaves the queue.
func TestHoldSlotWaitsWithoutAWorker(t *testing.T) {
	old := slots
	t.Cleanup(func() { slots = old })
	s := newFairSlots(1)
	s.grace = 50 * time.Millisecond
	var mu sync.Mutex
	now := time.Date(2026, 12, 6, 13, 0, 0, 0, time.UTC)
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func() { mu.Lock(); now = now.Add(time.Millisecond); mu.Unlock() } // the holder is charged a slot time
	slots = s
	woken := make(chan string, 4)
	wake := func(key string) func() { return func() { woken <- key } }

	ctx, release, ok := HoldSlot(context.Background(), "team-b", "team-b/a", wake("team-b/a"))
	if !ok {
		t.Fatal("no slot with every slot free")
	}
	for range 2 { // two evaluations under the one held slot
		free, err := acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		free()
	}
	release()

	hold, _ := s.acquire(context.Background(), "team-a")
	if _, _, ok := HoldSlot(context.Background(), "team-b", "team-b/a", wake("team-b/a")); ok {
		t.Fatal("a slot with every slot taken")
	}
	if _, _, ok := HoldSlot(context.Background(), "team-b", "team-b/a", wake("team-b/a")); ok || s.waiting != 1 {
		t.Fatalf("asked again: ok %v, %d waiting; want one place in the queue", ok, s.waiting)
	}
	later := make(chan struct{})
	go func() {
		free, err := s.acquire(context.Background(), "team-a")
		if err == nil {
			free()
		}
		close(later)
	}()
	queuedIn(s, 2)
	advance() // team-a is charged its slot time: team-b's place comes before its next
	hold()
	if key := <-woken; key != "team-b/a" {
		t.Fatalf("woken %s", key)
	}
	s.mu.Lock()
	held, waiting := s.granted["team-b/a"] != nil, s.waiting
	s.mu.Unlock()
	if !held || waiting != 1 {
		t.Fatalf("after the wake: slot held for team-b/a %v, %d waiting; want it held and the later waiter still waiting", held, waiting)
	}
	_, release, ok = HoldSlot(context.Background(), "team-b", "team-b/a", wake("team-b/a"))
	if !ok {
		t.Fatal("the woken reconcile did not get the slot held for it")
	}
	release()
	<-later

	// Not taken within the grace: the slot goes to the next waiter.
	hold, _ = s.acquire(context.Background(), "team-a")
	HoldSlot(context.Background(), "team-b", "team-b/b", wake("team-b/b"))
	next := make(chan struct{})
	go func() {
		free, err := s.acquire(context.Background(), "team-a")
		if err == nil {
			free()
		}
		close(next)
	}()
	queuedIn(s, 2)
	advance()
	hold()
	<-woken
	<-next // after the grace

	// DropSlot gives up the place.
	hold, _ = s.acquire(context.Background(), "team-a")
	HoldSlot(context.Background(), "team-b", "team-b/c", wake("team-b/c"))
	DropSlot("team-b", "team-b/c")
	hold()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting != 0 || s.used != 0 || len(s.asked) != 0 || len(s.granted) != 0 {
		t.Errorf("after all: waiting %d, used %d, asked %d, granted %d", s.waiting, s.used, len(s.asked), len(s.granted))
	}
	select {
	case key := <-woken:
		t.Errorf("a dropped key was woken: %s", key)
	default:
	}
}
