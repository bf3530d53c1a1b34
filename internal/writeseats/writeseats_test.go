package writeseats

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/actionledger/actionledger/internal/contention"
)

// clock is a settable clock for Seats.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// seats returns seats of per on a fake clock whose writes announce on the returned channel when they start
// waiting.
func seats(per int) (*Seats, *clock, chan struct{}) {
	c := &clock{t: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}
	w := make(chan struct{}, 64)
	s := New(per)
	s.Now = c.now
	s.onWait = func() { w <- struct{}{} }
	return s, c, w
}

func take(t *testing.T, s *Seats, ns string) func() {
	t.Helper()
	rel, err := s.Take(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// takeAsync takes a seat in a goroutine; the channel gets the release function, or is closed on an error.
func takeAsync(ctx context.Context, s *Seats, ns string) chan func() {
	got := make(chan func(), 1)
	go func() {
		rel, err := s.Take(ctx, ns)
		if err != nil {
			close(got)
			return
		}
		got <- rel
	}()
	return got
}

func mustWait(t *testing.T, got chan func()) {
	t.Helper()
	select {
	case <-got:
		t.Fatal("a write took a seat while its namespace was at its bound")
	case <-time.After(50 * time.Millisecond):
	}
}

func mustGet(t *testing.T, got chan func()) func() {
	t.Helper()
	select {
	case rel := <-got:
		return rel
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting write never got a seat")
		return nil
	}
}

func TestANamespaceWritingAloneIsNotBounded(t *testing.T) {
	s, _, _ := seats(2)
	var rels []func()
	for range 50 {
		rels = append(rels, take(t, s, "team-a"))
	}
	for _, r := range rels {
		r()
	}
	if n := s.Namespaces(); n != 0 {
		t.Fatalf("%d namespaces remembered after every seat was given back; want 0", n)
	}
}

func TestWhileAnotherNamespaceWritesOneWaitsForItsFirstSeatBack(t *testing.T) {
	s, _, w := seats(2)
	take(t, s, "team-b")() // team-b writes now
	r1, r2 := take(t, s, "team-a"), take(t, s, "team-a")
	got := takeAsync(context.Background(), s, "team-a")
	<-w
	mustWait(t, got)
	rb := take(t, s, "team-b") // team-b's own seats: never behind team-a's
	r1()
	mustGet(t, got)()
	r2()
	rb()
	if n := s.Namespaces(); n != 0 {
		t.Fatalf("%d namespaces remembered; want 0", n)
	}
}

func TestTheBoundEndsAWindowAfterTheOtherNamespacesLastWrite(t *testing.T) {
	s, c, w := seats(1)
	take(t, s, "team-b")()
	r1 := take(t, s, "team-a")
	got := takeAsync(context.Background(), s, "team-a")
	<-w
	mustWait(t, got)
	c.add(contention.DefaultWindow - time.Millisecond)
	third := takeAsync(context.Background(), s, "team-a")
	<-w // still within the window: waits behind the second
	c.add(2 * time.Millisecond)
	r1() // past the window: this release lets every waiter in
	mustGet(t, got)()
	mustGet(t, third)()
	r := take(t, s, "team-a") // alone again: no wait
	r2 := take(t, s, "team-a")
	r()
	r2()
}

func TestSeatsAreServedFirstComeFirstServed(t *testing.T) {
	s, _, w := seats(1)
	take(t, s, "other")()
	r := take(t, s, "ns")
	var order []int
	done := make(chan int, 3)
	for i := range 3 {
		got := takeAsync(context.Background(), s, "ns")
		<-w // i waits before i+1 asks
		go func() {
			rel := <-got
			done <- i
			rel()
		}()
	}
	r()
	for range 3 {
		select {
		case i := <-done:
			order = append(order, i)
		case <-time.After(5 * time.Second):
			t.Fatalf("served %v, then nothing", order)
		}
	}
	if order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Fatalf("served in order %v; want [0 1 2], the order they asked in", order)
	}
}

func TestACancelledWaitHoldsNothing(t *testing.T) {
	s, _, w := seats(1)
	take(t, s, "other")()
	r := take(t, s, "ns")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Take(ctx, "ns")
		errc <- err
	}()
	<-w
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait returned %v; want context.Canceled", err)
	}
	r()
	r() // a second call gives nothing back twice
	// Exactly one seat is free again: the cancelled wait took none, and the double release returned one.
	r1 := take(t, s, "ns")
	got := takeAsync(context.Background(), s, "ns")
	<-w
	mustWait(t, got)
	r1()
	mustGet(t, got)()
	if n := s.Namespaces(); n != 0 {
		t.Fatalf("%d namespaces remembered; want 0", n)
	}
}

func TestNoSeatsBoundNothing(t *testing.T) {
	for _, s := range []*Seats{nil, New(0), New(-3), {}} {
		if s != nil {
			s.Now = func() time.Time { return time.Unix(0, 0) }
		}
		take(t, s, "other")()
		var rels []func()
		for range 100 {
			rels = append(rels, take(t, s, "ns"))
		}
		for _, r := range rels {
			r()
		}
	}
}
