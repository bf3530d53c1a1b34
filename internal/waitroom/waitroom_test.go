package waitroom

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func k(ns string, i int) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("a%d", i)}
}

// Waiters are woken one namespace at a time, FIFO inside one; a namespace that parked many does not push another
// namespace's single waiter back; a key parked twice keeps its place; Leave and moving to another destination
// take it out; the room is empty once all are woken.
func TestWakeIsFairOverNamespaces(t *testing.T) {
	r := New()
	for i := range 5 {
		r.Park("D/a", k("big", i))
	}
	r.Park("D/a", k("small", 0))
	r.Park("D/a", k("big", 0)) // already there: keeps its place
	r.Park("D/a", k("mid", 0))
	r.Park("D/a", k("mid", 1))
	r.Leave(k("mid", 1))
	r.Park("D/b", k("big", 4)) // moves to another destination
	if got := r.Waiting("D/a"); got != 6 {
		t.Fatalf("Waiting = %d, want 6", got)
	}
	got := fmt.Sprint(r.Wake("D/a", 3), r.Wake("D/a", 10))
	want := fmt.Sprint([]types.NamespacedName{k("big", 0), k("small", 0), k("mid", 0)},
		[]types.NamespacedName{k("big", 1), k("big", 2), k("big", 3)})
	if got != want {
		t.Errorf("woken %s, want %s", got, want)
	}
	if w := r.Wake("D/a", 1); len(w) != 0 || r.Waiting("D/a") != 0 {
		t.Errorf("after all woken: %v, %d waiting", w, r.Waiting("D/a"))
	}
	if w := r.Wake("D/b", 5); len(w) != 1 || w[0] != k("big", 4) {
		t.Errorf("D/b woke %v", w)
	}
	if len(r.at) != 0 || len(r.dests) != 0 {
		t.Errorf("room not empty: %d keys, %d destinations", len(r.at), len(r.dests))
	}
}

// Since counts from a key's first look without room, across wakes that found none again, until it Leaves.
func TestSinceLastsUntilTheKeyLeaves(t *testing.T) {
	r := New()
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	if d := r.Since(k("ns", 0), t0); d != 0 {
		t.Fatalf("first look: %v, want 0", d)
	}
	r.Park("D/a", k("ns", 0))
	r.Wake("D/a", 1)
	r.Park("D/a", k("ns", 0))
	if d := r.Since(k("ns", 0), t0.Add(5*time.Second)); d != 5*time.Second {
		t.Fatalf("after a wake that found no room: %v, want 5s", d)
	}
	r.Leave(k("ns", 0))
	if d := r.Since(k("ns", 0), t0.Add(9*time.Second)); d != 0 || len(r.at) != 0 {
		t.Fatalf("after Leave: %v (%d parked), want a new wait", d, len(r.at))
	}
}
