package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/actionledger/actionledger/internal/membudget"
)

// A send whose bytes do not fit waits in its queue, before it is sent (issue 40 item 3): Run is not called
// while another holds the bytes, and it starts as soon as they are given back, whoever gave them back (a send
// that ended, or a decoder's window released outside the dispatcher).
func TestSendWaitsForItsBytesBeforeItIsSent(t *testing.T) {
	budget := membudget.New(100)
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, Budget: budget})
	b := newBlocker(4)

	window, ok := budget.TryTake("team-a", 40) // a decoder's window of team-a's, outside the dispatcher
	if !ok {
		t.Fatal("taking the window")
	}
	first, second := key("team-a", 1), key("team-a", 2)
	j1 := mkJob("D/a", first, 8, b.run(first, 1))
	j1.Bytes = 10
	mustSubmit(t, d, j1)
	b.awaitStarted(t, 1) // 40 + 10 of team-a's cap of 50
	j2 := mkJob("D/a", second, 8, b.run(second, 2))
	j2.Bytes = 10
	mustSubmit(t, d, j2)
	time.Sleep(50 * time.Millisecond) // to show that something does not happen: nothing may start
	select {
	case k := <-b.started:
		t.Fatalf("%v started past its namespace's cap of the byte budget", k)
	default:
	}
	if d.Queued("D/a") != 1 {
		t.Fatalf("Queued = %d; want 1 (waiting for its bytes)", d.Queued("D/a"))
	}
	window() // the window is given back: the waiting send starts, without any other completion
	if got := b.awaitStarted(t, 1); got[0] != second {
		t.Fatalf("started %v; want %v", got, second)
	}
	if held := budget.Held("team-a"); held != 20 {
		t.Fatalf("team-a holds %d bytes with two sends of 10 running; want 20", held)
	}
	close(b.release)
	c.take(t, 2)
	eventually(t, "every byte given back", func() bool { return budget.Used() == 0 })
}

// A send still waiting for its bytes at its StartBy is handed back not started (nothing was sent: the
// controller records a not-sent attempt and claims again), never run late or failed after.
func TestSendWaitingForBytesPastItsStartByIsNotSent(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	budget := membudget.New(100)
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, Clock: fc, Budget: budget})
	hold, ok := budget.TryTake("team-a", 50)
	if !ok {
		t.Fatal("taking the bytes")
	}
	defer hold()
	k := key("team-a", 1)
	j := mkJob("D/a", k, 8, func(_ context.Context) int { t.Error("Run called without its bytes"); return 0 })
	j.Bytes = 1
	j.StartBy = fc.Now().Add(time.Second)
	j.Deadline = fc.Now().Add(time.Hour)
	mustSubmit(t, d, j)
	fc.Step(2 * time.Second)
	x := c.next(t)
	if x.Key != k || x.Started || !errors.Is(x.Err, ErrStartDeadline) {
		t.Fatalf("completion %+v; want %v not started with ErrStartDeadline", x, k)
	}
}

// Bytes are shared by dominant resource fairness: when bytes are given back, the namespace that holds the least
// (its larger part of the sends and of the bytes) starts first. team-a runs one send holding 40 bytes, team-b two
// of 5: by sends in flight team-a would go first; by bytes, team-b does, so a tenant whose sends hold much of the
// budget cannot keep another's out.
func TestFreedBytesGoToTheNamespaceHoldingLeast(t *testing.T) {
	budget := membudget.New(100)
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, Budget: budget})
	b := newBlocker(16)
	submit := func(k types.NamespacedName, bytes int64) {
		j := mkJob("D/"+k.Namespace, k, 16, b.run(k, 0))
		j.Bytes = bytes
		mustSubmit(t, d, j)
	}
	submit(key("team-a", 0), 40)
	submit(key("team-b", 0), 5)
	submit(key("team-b", 1), 5)
	b.awaitStarted(t, 3)
	rest, ok := budget.TryTake("team-c", 40) // the budget is full: 40 + 10 + 40 + 10
	if !ok {
		t.Fatal("taking the bytes")
	}
	last, ok := budget.TryTake("team-c", 10)
	if !ok {
		t.Fatal("taking the bytes")
	}
	submit(key("team-a", 1), 10)
	submit(key("team-b", 2), 10)
	last() // 10 bytes free: one of the two fits
	if got := b.awaitStarted(t, 1); got[0] != key("team-b", 2) {
		t.Fatalf("freed bytes went to %v; want team-b's (it holds 10 bytes to team-a's 40)", got)
	}
	rest()
	b.awaitStarted(t, 1)
	close(b.release)
	c.take(t, 5)
}
