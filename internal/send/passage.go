package send

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/waitroom"
)

// Passage is what every request to a destination passes before its claim, an attempt, a post-check and a
// dead-letter delivery alike, in the order that spends nothing before it is needed: Near (a time the waiting room
// already holds it for, this shard's share of the destination's limits, then room in the dispatcher: all in
// memory), the caller's own reads, then Far (the destination's Secrets, then a token of its rate limit and retry
// budget). Every wait for the destination's capacity is decided here, so each kind of request waits alike:
// counted (actionledger_delayed_total), parked in the destination's waiting room (internal/waitroom: a wait for a
// slot is woken by a completion there, a wait for a token, the retry budget, a pause's end or the shard's share
// at the time the limiter gives, and a retry sooner when first attempts raise the budget), left there with one
// jittered safety-net requeue (Hold.After), and shown in status only when it lasts (Hold.Shown).
type Passage struct {
	Limiter  *limiter.Registry
	Resolver *destination.Resolver
	// HasRoom reports whether the dispatcher would start a job of the namespace at the destination soon
	// (dispatch.Dispatcher.HasRoom); Load its sends in flight and queued there, for the message.
	HasRoom func(destID, namespace string) bool
	Load    func(destID string) (inFlight, queued int)
	// Room is the waiting room that a completion at the destination wakes (ManagerDispatcher.deliver).
	Room *waitroom.Room
}

// Hold is why a request may not go yet. Nothing was sent, no attempt is spent, and no claim is written.
type Hold struct {
	// Reason is the API's reason: ConcurrencyLimited, RateLimited or RetryBudgetExhausted; "" for the shard's
	// share, a short internal wait never shown.
	Reason string
	// Message says so for status.
	Message string
	// Until is when the wait ends, when the limiter can say (zero for room: its end is a completion). The
	// waiting room wakes the request then.
	Until time.Time
	// After is the safety net: when to look again if no wake comes (requeue.Room after Until, or after now for
	// a slot, jittered over [Room/2, 3*Room/2)).
	After time.Duration
	// Shown: the wait has lasted, or will, long enough to be recorded in status (a wait for room longer than
	// the destination's timeout; a wait for a token longer than BriefWait). A shorter one costs no status write.
	Shown bool
	// Sooner: the wait may end before Until, when the room wakes the request early (the retry budget: Until
	// assumes no new first attempts, and each one raises the budget), so no schedule may hold the request back
	// until Until.
	Sooner bool
	// Err is set when the destination's Secrets could not be read: the destination is unusable, not busy.
	Err error
}

// Near passes this shard's share of dest's limits and room for key at dest in the dispatcher, at now; rand is the
// decision environment's jitter source ([0, 1)). nil: passed, and key has left the waiting room. A key the room
// holds at dest until a time after now (a token, the retry budget, a pause's end, the shard's share) waits first,
// with no reason (nothing to write) and nothing asked: the room wakes it then, or sooner (Room.Sooner), and a
// look before that (the reconcile of its own status write, a resync) would ask the limiter again only to be
// refused again.
func (p *Passage) Near(dest *destination.Resolved, key types.NamespacedName, now time.Time, rand func() float64) *Hold {
	if at, until, ok := p.Room.ParkedUntil(key); ok && at == dest.ID && until.After(now) {
		return &Hold{Until: until, After: safetyNet(until, now, rand)}
	}
	if after, ok := p.Resolver.TakeShare(dest, now); !ok {
		until := now.Add(after)
		p.Room.ParkUntil(dest.ID, key, until)
		return &Hold{Until: until, After: safetyNet(until, now, rand)}
	}
	if p.HasRoom(dest.ID, key.Namespace) {
		p.Room.Leave(key)
		return nil
	}
	waited := p.Room.Since(key, now)
	p.Room.Park(dest.ID, key)
	metrics.Delayed.WithLabelValues(dest.ID, actionsv1alpha1.ReasonConcurrencyLimited).Inc()
	inFlight, queued := p.Load(dest.ID)
	return &Hold{Reason: actionsv1alpha1.ReasonConcurrencyLimited,
		Message: fmt.Sprintf("waiting for destination %s (concurrency): %d request(s) in flight and %d queued",
			dest.ID, inFlight, queued),
		After: safetyNet(now, now, rand), Shown: waited >= RoomShown(dest)}
}

// safetyNet is how long from now a parked request looks again if its wake is lost: requeue.Room after from
// (the wait's predicted end, or now for a slot), jittered over [Room/2, 3*Room/2) so that the waiters of one
// burst do not all look at once.
func safetyNet(from, now time.Time, rand func() float64) time.Duration {
	return max(from.Sub(now), 0) + requeue.Room/2 + time.Duration(rand()*float64(requeue.Room))
}

// Far reads dest's Secrets (only right before a send, never to decide anything else) and takes a token of its
// rate limit and, for a retry (first false), of its retry budget, for key at now (Admit); rand is the jitter
// source of the safety net. nil: passed, and key has left the waiting room. Otherwise key waits in the room
// until the limiter's time (its token, the budget, or a Retry-After pause's end), which wakes it then.
func (p *Passage) Far(ctx context.Context, dest *destination.Resolved, key types.NamespacedName, first bool,
	now time.Time, rand func() float64) *Hold {
	if err := p.Resolver.LoadCredentials(ctx, dest); err != nil {
		return &Hold{Err: err}
	}
	w := Admit(p.Limiter, p.Resolver, dest, key.Namespace, key.Namespace+"/"+key.Name, first, now)
	if w == nil {
		p.Room.Leave(key)
		return nil
	}
	p.Room.ParkUntil(dest.ID, key, w.Until)
	return &Hold{Reason: w.Reason, Message: w.Message, Until: w.Until, After: safetyNet(w.Until, now, rand),
		Shown: !w.Brief(now), Sooner: w.Reason == actionsv1alpha1.ReasonRetryBudgetExhausted}
}

// RoomShown is how long a wait for room at dest lasts before it is shown in status: the destination's timeout
// (30 s by default), at least BriefWait. Within it the sends ahead of the request end within an attempt's time,
// so the wait is a burst's queue, gone before a person or kstatus would read it.
func RoomShown(dest *destination.Resolved) time.Duration {
	return max(BriefWait, dest.Timeout)
}
