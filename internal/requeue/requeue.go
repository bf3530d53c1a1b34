// Package requeue names, once, the short requeue delays of the ExternalAction reconciler and of the parts it
// runs (the outputs settlement in package outputs, the dead-letter delivery in package deadletter).
//
// Each delay is a ctrl.Result.RequeueAfter: how long a reconcile that stopped short waits before the object is
// looked at again. Only Room is jittered (by send.Passage), where its doc says. They are short on purpose: each one waits for something that is already
// on its way (a write in the informer cache, a result in the dispatcher, a newer object after a Conflict), and
// a watch event usually wakes the object sooner; the delay only bounds the wait when no event comes. Waits
// that come from the recorded schedule (a backoff, a claim's expiry) are not named here: At turns them into a
// result.
package requeue

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

const (
	// Now (1 ms) looks again at once: the informer cache is behind a status write of this reconcile, or a
	// result is back in the mailbox. It is also the floor of At, so a step that is due requeues, never 0.
	Now = time.Millisecond

	// InFlight (50 ms) waits for the cache to show an outcome this manager wrote (its watch event wakes the
	// object sooner), or for a job of the same key that the dispatcher already holds.
	InFlight = 50 * time.Millisecond

	// Held (10 s) waits for an attempt, post-check or dead-letter delivery of this process that the dispatcher
	// holds. Its completion wakes the object (the manager's dispatcher hands every completion to the
	// controller, DESIGN rule 10), so this is only a safety net, not a poll: polling every InFlight made a
	// claimed action cost one reconcile per 50 ms of destination latency (issue 35: at a steady 20 actions/s,
	// 7.2 reconciles per action at 200 ms and 23 at 1 s, against 4 with Held).
	Held = 10 * time.Second

	// Conflict (100 ms) follows a status write (the outputs settlement) or the finalizer's removal that lost a
	// Conflict: the newer object is in the cache within about one watch round trip.
	Conflict = 100 * time.Millisecond

	// ClaimLost (200 ms) follows a claim (of an attempt or of a dead-letter delivery) or a person's give-up of a
	// dead-letter record whose write lost a Conflict: another reconcile or manager wrote first, and the newer
	// object decides again. Nothing was sent.
	ClaimLost = 200 * time.Millisecond

	// Skipped (300 ms) follows a post-check that was not asked (it had too little time left, or the manager was
	// stopping): it is asked again soon.
	Skipped = 300 * time.Millisecond

	// Room (2 s) is the safety net of a request parked in its destination's waiting room (internal/waitroom):
	// a completion at the destination wakes the next waiter for a slot, and the room's timer wakes a waiter for
	// a token, the retry budget, a pause's end or the shard's share at its time, so this only bounds a wait whose
	// wake was lost. It counts from the wait's predicted end (from now for a slot) and is jittered over
	// [Room/2, 3*Room/2) (send.Passage).
	Room = 2 * time.Second

	// NotDispatched (1 s) follows a post-check the dispatcher did not take (stopping, or the key already held)
	// or a verdict that could not be written: the post-check is only a read, so it is asked again later.
	NotDispatched = time.Second

	// TombstoneConflict (1 s) follows the tombstone collector's deletion of an expired tombstone that lost a
	// Conflict (the tombstone was renewed meanwhile): the next reconcile reads its new expiry.
	TombstoneConflict = time.Second
)

// After is how long until t (a step's time from the recorded schedule), at least Now: a t at or before now
// requeues at once.
func After(t, now time.Time) time.Duration {
	return max(t.Sub(now), Now)
}

// At requeues at t (from the schedule stored in status), at least Now from now; a zero t means no requeue.
func At(t, now time.Time) ctrl.Result {
	if t.IsZero() {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: After(t, now)}
}
