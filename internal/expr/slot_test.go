package expr

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// An evaluation waits at most SlotWait for a slot; not getting one is Unfinished (it decides nothing, DESIGN rule
// 12), and so are its deadline and cancellation, while an expression's own runtime error and the cost limit are
// not. The evaluation's own EvalTimeout starts once it has a slot: a wait behind other evaluations does not eat it.
func TestSlotWaitIsUnfinishedAndApartFromTheEvaluation(t *testing.T) {
	p, err := Compile(`response.statusCode == 201`)
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
			waiting = len(slots.ring)
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

// The slots are served round-robin over flows (namespaces): with every slot taken and one flow queueing many
// evaluations before another queues one, the other's is served by the second free slot, not after the queue.
func TestSlotsServeFlowsRoundRobin(t *testing.T) {
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
	queued := func(n int) {
		for {
			s.mu.Lock()
			q := 0
			for _, w := range s.queues {
				q += len(w)
			}
			s.mu.Unlock()
			if q == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 8 {
		start("team-a")
		queued(i + 1)
	}
	start("team-b")
	queued(9)
	hold()
	var got []string
	for range 9 {
		got = append(got, <-order)
	}
	if got[0] != "team-a" || got[1] != "team-b" {
		t.Errorf("served in order %v; want team-b second, after one of team-a's", got)
	}

	// A waiter that gives up leaves no trace: the next free slot goes to the one still waiting.
	hold, _ = s.acquire(context.Background(), "team-a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.acquire(ctx, "team-a"); err == nil {
		t.Fatal("acquired a taken slot")
	}
	start("team-b")
	queued(1)
	hold()
	if flow := <-order; flow != "team-b" {
		t.Errorf("served %s, want team-b", flow)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		used, ring, queues := s.used, len(s.ring), len(s.queues)
		s.mu.Unlock()
		if used == 0 && ring == 0 && queues == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after all released: used %d, ring %d, queues %d", used, ring, queues)
		}
		time.Sleep(time.Millisecond)
	}
}
