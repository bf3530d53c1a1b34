package send

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/waitroom"
)

// A request the waiting room holds until a later time waits there: Near holds it with no reason (nothing to
// write) until that time, without asking for room (nor the limiter: Far is not reached), so a look before its
// wake (the reconcile of its own status write) costs nothing and is not counted; once the room wakes it, early
// (Sooner) or at its time, Near passes again; a wait at another destination does not hold it.
func TestNearWaitsOutTheRoomsTime(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	room := waitroom.New()
	var woken []types.NamespacedName
	room.Wakes(clk, func(k types.NamespacedName) { woken = append(woken, k) })
	asked := 0
	p := &Passage{Resolver: &destination.Resolver{}, Room: room,
		HasRoom: func(string, string) bool { asked++; return true },
		Load:    func(string) (int, int) { return 0, 0 }}
	dest := &destination.Resolved{ID: "Destination/a/pay"}
	key := types.NamespacedName{Namespace: "a", Name: "x"}
	until := t0.Add(10 * time.Second)
	room.ParkUntil(dest.ID, key, until)

	h := p.Near(dest, key, t0.Add(time.Second), func() float64 { return 0.5 })
	if h == nil || h.Reason != "" || !h.Until.Equal(until) || h.After < 9*time.Second || asked != 0 {
		t.Fatalf("Near before the room's time: %+v (asked for room %d times), want a hold without reason until %v", h, asked, until)
	}
	room.Sooner(key, dest.ID, t0) // first attempts made room for it
	clk.Step(0)
	room.Settle()
	if len(woken) != 1 || woken[0] != key {
		t.Fatalf("woken %v, want [%v]", woken, key)
	}
	if h := p.Near(dest, key, t0.Add(time.Second), func() float64 { return 0.5 }); h != nil || asked != 1 {
		t.Fatalf("Near once woken: %+v (asked for room %d times), want passed after one ask", h, asked)
	}
	// A wait at another destination (a dead-letter sink after the action ended) does not hold it here.
	room.ParkUntil("ClusterDestination/sink", key, until)
	if h := p.Near(dest, key, t0.Add(time.Second), func() float64 { return 0.5 }); h != nil {
		t.Fatalf("Near while parked at another destination: %+v, want passed", h)
	}
	// At its time the room's own wake lets it through as well.
	room.ParkUntil(dest.ID, key, until)
	clk.SetTime(until)
	room.Settle()
	if h := p.Near(dest, key, until, func() float64 { return 0.5 }); h != nil {
		t.Fatalf("Near at the room's time: %+v, want passed", h)
	}
}
