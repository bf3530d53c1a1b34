package limiter

import (
	"math"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults and bounds. Durations are time.Duration values.
const (
	// DefaultRetryPercent is the CONTRACT default of retryBudget.retryPercent
	// (percent of first attempts), applied by Limits.WithRetryBudget.
	DefaultRetryPercent int32 = 20
	// DefaultMinRetriesPerSecond is the CONTRACT default of
	// retryBudget.minRetriesPerSecond (retries per second), applied by
	// Limits.WithRetryBudget.
	DefaultMinRetriesPerSecond int32 = 1
	// DefaultWindow is the retry-budget sliding window used when Limits.Window
	// is not positive (10 s).
	DefaultWindow = 10 * time.Second
	// DefaultGrace is how long a reservation is kept after the time its key was
	// told to come back (2 s); see WithGrace.
	DefaultGrace = 2 * time.Second
	// DefaultIdleTTL is how long a destination without waiting keys, pause,
	// retry-budget history or spent tokens is kept (10 min); see WithIdleTTL.
	DefaultIdleTTL = 10 * time.Minute
	// MinWait is the smallest wait Admit returns with ok=false (1 ms), so that a
	// requeue never spins.
	MinWait = time.Millisecond
)

// Limits are the admission limits of one destination, as configured on it.
// They are passed on every Admit; a change (the destination was edited) takes
// effect at that call, keeping the tokens already in the bucket.
type Limits struct {
	// RequestsPerSecond is the sustained rate of the token bucket, in requests
	// per second. Zero (or negative) means no rate limit: only pauses and the
	// retry budget apply.
	RequestsPerSecond int32
	// Burst is the bucket size, in requests. Non-positive means
	// RequestsPerSecond.
	Burst int32
	// Budget reports whether a retry budget is configured. The three fields
	// below apply only when it is true; they are taken as given (0 means 0), so
	// the caller applies the CONTRACT defaults for absent fields, for example
	// with WithRetryBudget.
	Budget bool
	// RetryPercent is the share of the first attempts admitted in the window
	// that may be retried, in percent (negative means 0).
	RetryPercent int32
	// MinRetriesPerSecond is the floor of retries always allowed, in retries per
	// second of window (negative means 0).
	MinRetriesPerSecond int32
	// Window is the length of the retry-budget sliding window. Non-positive
	// means DefaultWindow.
	Window time.Duration
	// Shares is the number of managers (shards) the destination's limits are
	// divided among, this one included; not positive means 1 (one manager:
	// nothing is divided). With n shares the token bucket runs at
	// RequestsPerSecond/n with a burst of max(1, Burst/n) (integer division),
	// the retry-budget floor is MinRetriesPerSecond/n (RetryPercent is already
	// a share of this manager's own first attempts), and a bucket created with
	// n > 1 starts empty, so that a shard that joins does not add a burst to the
	// one the others may have just spent. See docs/sharding.md.
	Shares int
}

// WithRetryBudget returns l with the retry budget configured from the optional
// CONTRACT fields retryBudget.retryPercent (percent), minRetriesPerSecond
// (retries per second) and window: nil pointers take DefaultRetryPercent and
// DefaultMinRetriesPerSecond, a non-positive window DefaultWindow.
func (l Limits) WithRetryBudget(retryPercent, minRetriesPerSecond *int32, window time.Duration) Limits {
	l.Budget = true
	l.RetryPercent = DefaultRetryPercent
	if retryPercent != nil {
		l.RetryPercent = *retryPercent
	}
	l.MinRetriesPerSecond = DefaultMinRetriesPerSecond
	if minRetriesPerSecond != nil {
		l.MinRetriesPerSecond = *minRetriesPerSecond
	}
	l.Window = window
	return l
}

// normalized returns l with the documented defaults and bounds applied.
func (l Limits) normalized() Limits {
	l.RequestsPerSecond = max(l.RequestsPerSecond, 0)
	if l.Burst <= 0 {
		l.Burst = l.RequestsPerSecond
	}
	if l.RequestsPerSecond == 0 {
		l.Burst = 0
	}
	if !l.Budget {
		l.RetryPercent, l.MinRetriesPerSecond, l.Window = 0, 0, 0
	} else {
		l.RetryPercent = max(l.RetryPercent, 0)
		l.MinRetriesPerSecond = max(l.MinRetriesPerSecond, 0)
	}
	if l.Window <= 0 {
		l.Window = DefaultWindow
	}
	l.Shares = max(l.Shares, 1)
	return l
}

// rate returns the sustained rate of this manager's share, in requests per
// second (l normalized).
func (l Limits) rate() float64 {
	return float64(l.RequestsPerSecond) / float64(l.Shares)
}

// burst returns the bucket size of this manager's share, in requests: at least
// 1 so that a share can admit anything (l normalized, with a rate limit).
func (l Limits) burst() int {
	return max(1, int(l.Burst)/l.Shares)
}

// Reason says why Admit did not admit a request now.
type Reason string

const (
	// ReasonRateLimited: the destination's token bucket has no token for this
	// key yet (others are ahead of it, or the rate is spent).
	ReasonRateLimited Reason = "RateLimited"
	// ReasonRetryBudgetExhausted: the request is a retry and the destination's
	// retry budget is spent for now.
	ReasonRetryBudgetExhausted Reason = "RetryBudgetExhausted"
	// ReasonPaused: the destination is paused by a Retry-After (see Pause). It
	// has the same value as ReasonRateLimited: a pause reads as RateLimited.
	ReasonPaused Reason = "RateLimited"
)

// Registry holds the admission state of every destination: token bucket,
// pause, retry budget and fair queue of waiting keys. Destinations are
// independent of each other. A Registry is safe for concurrent use.
type Registry struct {
	grace   time.Duration
	idleTTL time.Duration

	mu        sync.Mutex
	dests     map[string]*destination
	nextSweep time.Time
	// wakeEarly wakes retries whose budget came before their told time (WakesEarly); nil: none.
	wakeEarly func([]Wake)
}

// Option configures a Registry.
type Option func(*Registry)

// WithGrace sets how long a reservation is kept after the time its key was told
// to come back (default DefaultGrace). A non-positive value is ignored.
func WithGrace(d time.Duration) Option {
	return func(r *Registry) {
		if d > 0 {
			r.grace = d
		}
	}
}

// WithIdleTTL sets how long an idle destination is kept before its state is
// dropped (default DefaultIdleTTL). A destination is idle when no key waits,
// it is not paused, no admission is left in its retry-budget window and its
// bucket is full again, so dropping it never admits more than the limits
// allow. A non-positive value is ignored.
func WithIdleTTL(d time.Duration) Option {
	return func(r *Registry) {
		if d > 0 {
			r.idleTTL = d
		}
	}
}

// NewRegistry returns an empty Registry.
func NewRegistry(opts ...Option) *Registry {
	r := &Registry{grace: DefaultGrace, idleTTL: DefaultIdleTTL, dests: map[string]*destination{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// destination is the admission state of one destination.
type destination struct {
	mu sync.Mutex
	// dead is set when the state was dropped from the registry; a caller that
	// still holds it looks it up again.
	dead bool
	// limits are the normalized limits of the last Admit; lim is nil when there
	// is no rate limit.
	limits Limits
	lim    *rate.Limiter
	// last is the latest time seen (time never goes backwards here);
	// lastActive the time of the latest Admit.
	last        time.Time
	lastActive  time.Time
	pausedUntil time.Time
	queue       fairQueue
	budget      retryBudget
	// budgetQ holds the retries waiting for the retry budget, in the same fair order over namespaces as queue:
	// each is told to come back when the budget fits it and every retry ahead of it, so that retries refused
	// together come back one after the other, not together to be refused again.
	budgetQ fairQueue
	// woke is the state of the last wakeups (budgetQ's version, the first attempts and retries in the window):
	// the same state gives the same answer, so it is not worked out again.
	woke [3]uint64
}

// budgetGrace is how long after its time a retry waiting for the budget keeps its turn in the wake order: the
// waiters behind it are not woken for the budget that fits it until then. Then it is late: it keeps its place
// (lateKeep) but the next waiters are woken. A retry whose time has come never holds the budget from the ones that
// ask (destination.budgetTurn).
const budgetGrace = time.Second

// Waking bounds, per Admit of a destination with retries waiting for its budget: at most wakeMax waiters are
// woken early, and the told times of the retimed next sleeping waiters are brought forward.
const (
	wakeMax = 64
	retimed = 8
)

// Wake is a retry waiting for a destination's retry budget that the registry hands to its wake function
// (Registry.WakesEarly): Key (ns/name) may ask Dest again at At, which is earlier than the time it was told.
type Wake struct {
	Dest string
	Key  string
	At   time.Time
}

func newDestination() *destination {
	return &destination{limits: Limits{}.normalized(), queue: newFairQueue(), budgetQ: newFairQueue()}
}

// lookup returns the live state of dest, creating it if create is set; it
// returns it locked. It returns nil if it does not exist and create is false.
func (r *Registry) lookup(dest string, create bool) *destination {
	for {
		r.mu.Lock()
		d := r.dests[dest]
		if d == nil {
			if !create {
				r.mu.Unlock()
				return nil
			}
			d = newDestination()
			r.dests[dest] = d
		}
		r.mu.Unlock()
		d.mu.Lock()
		if !d.dead {
			return d
		}
		d.mu.Unlock()
	}
}

// Admit asks to send one request now to destination dest (an opaque id such as
// "Destination/ns/name") for the action key (ns/name) of tenant (namespace) ns,
// with the destination's current limits l. first is true for an action's first
// attempt: first attempts never wait on the retry budget, only on the rate
// limit and pauses.
//
// ok=true: a token was consumed (or this key's reserved turn has come), send
// now; wait is 0 and reason empty. The admission is counted in the retry
// budget as a first attempt or a retry.
//
// ok=false: do not send; ask again after wait (>= MinWait). reason is
// ReasonPaused (== ReasonRateLimited) while a Retry-After pause lasts,
// ReasonRetryBudgetExhausted when a retry does not fit the budget (wait is
// when it will, together with the retries waiting for the budget ahead of it,
// absent new first attempts), ReasonRateLimited otherwise. A rate-limited or
// paused key holds a reservation, its place in the fair queue; a retry refused
// by the budget holds its place among the retries waiting for the budget (the
// same fair order), and no token. Asking again for the same key does not
// consume capacity nor move it back. A reservation goes late when the key
// does not ask again within the grace period after now+wait: it no longer
// holds capacity from the keys behind it, but the key that asks again within
// 30 s takes its place again. Forget drops it.
//
// now is the current time; it is clamped to the latest time seen for dest.
func (r *Registry) Admit(dest string, l Limits, ns, key string, first bool, now time.Time) (ok bool, wait time.Duration, reason Reason) {
	r.maybeSweep(now)
	d := r.lookup(dest, true)
	clamped := d.clamp(now)
	ok, wait, reason = d.admit(l, ns, key, first, clamped, r.grace)
	early := d.wakeups(dest, clamped)
	d.mu.Unlock()
	if !ok {
		// The wait is counted from the caller's now.
		wait = addSat(wait, clamped.Sub(now))
	}
	if len(early) > 0 {
		r.mu.Lock()
		wake := r.wakeEarly
		r.mu.Unlock()
		if wake != nil {
			wake(early)
		}
	}
	return ok, wait, reason
}

// WakesEarly sets how the registry wakes retries waiting for a destination's retry budget sooner than the time
// Admit told them: wake is called, outside every lock of the registry and from within an Admit of the destination,
// with the waiters whose budget came early (At: that Admit's now; a first attempt raised the budget, or the
// budget was removed) and with the next waiters whose time the queue's progress brought forward (At: their new
// time). Until it is set, they come back at their told time. The manager moves them in its waiting room
// (waitroom.Room.Sooner).
func (r *Registry) WakesEarly(wake func([]Wake)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wakeEarly = wake
}

// Pause stops every action of dest until until (a 429/503 Retry-After applies to
// the whole destination). Later pauses extend a pause, never shorten it.
func (r *Registry) Pause(dest string, until time.Time) {
	d := r.lookup(dest, true)
	defer d.mu.Unlock()
	if until.After(d.pausedUntil) {
		d.pausedUntil = until
	}
}

// Forget drops the reservation of key on dest, if any (the action finished, was
// deleted or no longer needs to send).
func (r *Registry) Forget(dest, key string) {
	d := r.lookup(dest, false)
	if d == nil {
		return
	}
	defer d.mu.Unlock()
	d.forget(key)
}

// forget drops key's reservations on d, for a token and for the retry budget. Locked.
func (d *destination) forget(key string) {
	d.queue.forget(key)
	d.budgetQ.forget(key)
}

// ForgetKey drops the reservations of key on every destination: the key left this manager (its object was
// deleted, or relabeled out of this shard's --watch-label-selector) and will not ask again here, so it must
// not keep its place, and the tokens for the keys behind it, until its grace ends. The destination of an
// object that is gone is no longer known, hence every destination (a map walk per call, O(destinations)).
func (r *Registry) ForgetKey(key string) {
	r.mu.Lock()
	dests := make([]*destination, 0, len(r.dests))
	for _, d := range r.dests {
		dests = append(dests, d)
	}
	r.mu.Unlock()
	for _, d := range dests {
		d.mu.Lock()
		if !d.dead {
			d.forget(key)
		}
		d.mu.Unlock()
	}
}

// Stats is a snapshot of one destination, for metrics.
type Stats struct {
	// Waiting is the number of keys holding a reservation (waiting for a token
	// or for the end of a pause).
	Waiting int
	// BudgetWaiting is the number of retries holding a place among those
	// waiting for the retry budget.
	BudgetWaiting int
	// WaitingNamespaces is the number of namespaces with waiting keys.
	WaitingNamespaces int
	// Limited reports whether a rate limit is configured.
	Limited bool
	// Tokens is the number of tokens in the bucket (requests that may be
	// admitted at once); +Inf when not Limited.
	Tokens float64
	// PausedUntil is the end of the current pause; zero when not paused.
	PausedUntil time.Time
	// Budget reports whether a retry budget is configured.
	Budget bool
	// FirstAttempts and Retries are the admissions counted in the retry-budget
	// window (counted even without a budget).
	FirstAttempts int
	Retries       int
	// BudgetRemaining is the number of retries the budget still allows now
	// (fractional, >= 0); +Inf when there is no budget.
	BudgetRemaining float64
}

// Stats returns a snapshot of dest at now; ok is false when the registry holds
// no state for dest (never used, or dropped as idle).
func (r *Registry) Stats(dest string, now time.Time) (s Stats, ok bool) {
	d := r.lookup(dest, false)
	if d == nil {
		return Stats{}, false
	}
	defer d.mu.Unlock()
	now = d.clamp(now)
	d.budget.prune(now, d.limits.Window)
	s = Stats{
		Waiting:           d.queue.len(),
		BudgetWaiting:     d.budgetQ.len(),
		WaitingNamespaces: d.queue.namespaces(),
		Limited:           d.lim != nil,
		Tokens:            math.Inf(1),
		Budget:            d.limits.Budget,
		FirstAttempts:     d.budget.firsts.total,
		Retries:           d.budget.retries.total,
		BudgetRemaining:   math.Inf(1),
	}
	if d.lim != nil {
		s.Tokens = d.lim.TokensAt(now)
	}
	if now.Before(d.pausedUntil) {
		s.PausedUntil = d.pausedUntil
	}
	if d.limits.Budget {
		s.BudgetRemaining = d.budget.remaining(d.limits)
	}
	return s, true
}

// Destinations returns the ids of the destinations the registry holds state
// for, sorted.
func (r *Registry) Destinations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.dests))
	for id := range r.dests {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// maybeSweep drops stale reservations everywhere and idle destinations, at most
// once per sweep interval of now.
func (r *Registry) maybeSweep(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.nextSweep) {
		return
	}
	r.nextSweep = now.Add(min(max(r.idleTTL/2, time.Second), time.Minute))
	for id, d := range r.dests {
		d.mu.Lock()
		if d.idle(now, r.idleTTL) {
			d.dead = true
			delete(r.dests, id)
		}
		d.mu.Unlock()
	}
}

// clamp returns now, or the latest time already seen if now is before it.
func (d *destination) clamp(now time.Time) time.Time {
	if now.Before(d.last) {
		return d.last
	}
	d.last = now
	return now
}

// idle expires stale reservations and reports whether d can be dropped at now.
func (d *destination) idle(now time.Time, ttl time.Duration) bool {
	now = d.clamp(now)
	d.queue.expire(now)
	d.queue.sweep()
	d.budgetQ.expire(now)
	d.budgetQ.sweep()
	if d.queue.len() > 0 || d.budgetQ.len() > 0 || now.Before(d.pausedUntil) || now.Sub(d.lastActive) < ttl {
		return false
	}
	d.budget.prune(now, d.limits.Window)
	if !d.budget.empty() {
		return false
	}
	return d.lim == nil || d.lim.TokensAt(now) >= float64(d.lim.Burst())
}

// setLimits adapts the bucket to l (normalized) at now.
func (d *destination) setLimits(l Limits, now time.Time) {
	old := d.limits
	d.limits = l
	d.woke = [3]uint64{} // what fits changed: wakeups looks again at the next admission
	switch {
	case l.RequestsPerSecond == 0:
		d.lim = nil
	case d.lim == nil:
		// New, or the rate limit was just added: a full bucket, or an empty one for a share of a limit
		// divided among shards (see Limits.Shares).
		d.lim = rate.NewLimiter(rate.Limit(l.rate()), l.burst())
		if l.Shares > 1 {
			d.lim.AllowN(now, l.burst())
		}
	default:
		// Changing the rate or the burst keeps the tokens in the bucket (capped to a smaller burst).
		if l.rate() != old.rate() {
			d.lim.SetLimitAt(now, rate.Limit(l.rate()))
		}
		if l.burst() != old.burst() {
			d.lim.SetBurstAt(now, l.burst())
		}
	}
}

// admit is Admit on the locked d, at now already clamped.
func (d *destination) admit(l Limits, ns, key string, first bool, now time.Time, grace time.Duration) (bool, time.Duration, Reason) {
	d.lastActive = now
	if l = l.normalized(); l != d.limits {
		d.setLimits(l, now)
	}
	d.queue.expire(now)
	d.budgetQ.expire(now)
	d.budget.prune(now, d.limits.Window)
	e := d.reservation(key, now)
	b := d.budgetPlace(ns, key, first, now)
	hold := func(wait time.Duration) { d.holdPlace(b, now, wait) }
	admitted := func() { d.admitted(b, first, now) }

	if now.Before(d.pausedUntil) {
		wait := d.pauseWait(e, ns, key, now, grace)
		hold(wait)
		return false, wait, ReasonPaused
	}

	if b != nil {
		if wait, ok := d.budgetTurn(b, now); !ok {
			if e != nil {
				d.queue.remove(e)
			}
			hold(wait)
			return false, wait, ReasonRetryBudgetExhausted
		}
	}

	if d.lim == nil {
		if e != nil {
			d.queue.admitted(e)
		}
		admitted()
		return true, 0, ""
	}

	if e == nil {
		e = d.queue.push(ns, key, now)
	}
	p := d.queue.position(e)
	tokens := d.lim.TokensAt(now)
	// Admit when every key ahead can still be served from the tokens in the
	// bucket; a key ahead keeps its token until its grace ends, then goes late.
	if float64(p)+1 <= tokens && d.lim.AllowN(now, 1) {
		d.queue.admitted(e)
		admitted()
		return true, 0, ""
	}
	wait := d.slotWait(p, tokens)
	d.queue.setExpires(e, now.Add(addSat(wait, grace)))
	hold(wait)
	return false, wait, ReasonRateLimited
}

// reservation returns key's place in the token queue: its reservation, or the late one it comes back to (its
// place again, fairQueue.revive), or nil. Locked.
func (d *destination) reservation(key string, now time.Time) *entry {
	if e := d.queue.get(key); e != nil {
		return e
	}
	return d.queue.revive(key, now)
}

// pauseWait is the wait of key (its reservation e, nil for none yet) while d is paused at now: until the pause
// ends and the tokens for the keys ahead have accrued by then, which spreads the restart instead of a herd. Its
// reservation is kept that long and the grace. Locked.
func (d *destination) pauseWait(e *entry, ns, key string, now time.Time, grace time.Duration) time.Duration {
	if e == nil {
		e = d.queue.push(ns, key, now)
	}
	wait := d.pausedUntil.Sub(now)
	if d.lim != nil {
		wait = addSat(wait, d.slotWait(d.queue.position(e), d.lim.TokensAt(d.pausedUntil)))
	}
	wait = max(wait, MinWait)
	d.queue.setExpires(e, now.Add(addSat(wait, grace)))
	return wait
}

// budgetPlace returns the place of key's retry among those waiting for the retry budget, kept until it is
// admitted (a new place when it had none), or nil for a first attempt or without a budget, dropping a place
// left from before (the budget was removed, or the key is a first attempt again). Locked.
func (d *destination) budgetPlace(ns, key string, first bool, now time.Time) *entry {
	b := d.budgetQ.get(key)
	switch {
	case !first && d.limits.Budget && b != nil:
		return b
	case !first && d.limits.Budget:
		if b = d.budgetQ.revive(key, now); b != nil { // back after its grace: its place again
			return b
		}
		return d.budgetQ.push(ns, key, now)
	}
	d.budgetQ.forget(key)
	return nil
}

// budgetTurn reports whether the retry of budget place b fits the budget at now. The retries ahead of it that
// wait for a later time (told, not yet due) take the budget first: it fits when it and all of those do. Those
// ahead whose time has come but that have not asked yet (woken, on their way) do not hold it from another woken
// one: the budget goes to whoever of them asks first, and a late one asks again from its place. A retry that has
// not waited yet (b never told a time) counts them too: it does not take the budget woken waiters ahead of it
// were woken for. If it does not fit, wait is when it and every retry ahead will (retryBudget.allow). Locked,
// the budget pruned at now.
func (d *destination) budgetTurn(b *entry, now time.Time) (wait time.Duration, ok bool) {
	fit := fits(d.limits, d.budget.firsts.total, d.budget.retries.total)
	ahead := 0
	fresh := b.told.IsZero()
	var graceEnd time.Time // the latest end of grace of the woken waiters ahead that a fresh retry leaves to them
	if fit > 0 {
		d.budgetQ.each(func(e *entry) bool {
			if e == b {
				return false
			}
			switch {
			case e.told.After(now):
				ahead++
			case fresh:
				ahead++
				if e.expires.After(graceEnd) {
					graceEnd = e.expires
				}
			}
			return ahead < fit
		})
	}
	if ahead < fit {
		return 0, true
	}
	_, wait = d.budget.allow(now, d.limits, d.budgetQ.position(b)+1)
	// A fresh retry behind woken waiters comes back once they have asked or gone late (their grace), and no sooner
	// than MinWait; by then it has waited, and takes the budget any of them left.
	return max(wait, graceEnd.Sub(now), MinWait), false
}

// holdPlace keeps the budget place b (nil: none) of a key told to come back after wait from now, in the wake
// order until budgetGrace after that (then late). Locked.
func (d *destination) holdPlace(b *entry, now time.Time, wait time.Duration) {
	if b != nil {
		b.told = now.Add(wait)
		d.budgetQ.setExpires(b, now.Add(addSat(wait, budgetGrace)))
	}
}

// wakeups returns the retries waiting for the budget to wake sooner than they were told, in the fair order
// (Registry.WakesEarly), at most wakeMax + retimed of them, each time its told time moves:
//
//   - the first waiters, as many as the budget fits now, that were told a later time: their budget came early,
//     because first attempts raised it (each one by RetryPercent of one retry) and told times assume none.
//     They are woken now, and their places are kept for the grace from now;
//   - the next retimed waiters, whose times are replayed (retryBudget.fitTimes) from the budget now: the queue
//     ahead of them moved since they were told (waiters woken early, or gone), so their budget may come sooner
//     than told. Each told time only moves earlier.
//
// A waiter that also holds a token reservation waits for the rate limit, which tells its own time, and is left
// as it is. None while the destination is paused. When the budget was removed, every waiter is woken now and
// the queue is emptied. Locked, the budget pruned at now.
func (d *destination) wakeups(dest string, now time.Time) []Wake {
	if d.budgetQ.len() == 0 && len(d.budgetQ.late) == 0 {
		return nil
	}
	if !d.limits.Budget {
		var out []Wake
		for _, b := range d.budgetQ.first(d.budgetQ.len()) {
			out = append(out, Wake{Dest: dest, Key: b.key, At: now})
			d.budgetQ.remove(b)
		}
		clear(d.budgetQ.late)
		return out
	}
	if now.Before(d.pausedUntil) {
		return nil
	}
	fit := fits(d.limits, d.budget.firsts.total, d.budget.retries.total)
	state := [3]uint64{d.budgetQ.ver, uint64(d.budget.firsts.total), uint64(d.budget.retries.total)} //nolint:gosec // counts
	if state == d.woke {
		return nil
	}
	d.woke = state
	fit = min(fit, wakeMax)
	var out []Wake
	var times []time.Time
	for i, b := range d.budgetQ.first(fit + retimed) {
		if !b.told.After(now) || d.queue.get(b.key) != nil {
			continue // due, or waiting for a token
		}
		at := now
		if i >= fit {
			if times == nil {
				times = d.budget.fitTimes(now, d.limits, fit, fit+retimed)
			}
			if at = times[i-fit]; !at.Before(b.told) {
				continue
			}
		}
		b.told = at
		d.budgetQ.setExpires(b, at.Add(budgetGrace))
		out = append(out, Wake{Dest: dest, Key: b.key, At: at})
	}
	return out
}

// admitted counts an admission at now in the retry budget, as a first attempt or a retry, and ends the wait
// of its budget place b (nil: none). Locked.
func (d *destination) admitted(b *entry, first bool, now time.Time) {
	if b != nil {
		d.budgetQ.admitted(b)
	}
	d.budget.record(first, now, d.limits.Window)
}

// slotWait returns how long until position p can be served, given tokens
// tokens now and that the keys ahead consume theirs as they accrue. It is
// rounded up to the microsecond plus one, so that the bucket holds the tokens
// when the key comes back despite float rounding, and is at least MinWait.
func (d *destination) slotWait(p int, tokens float64) time.Duration {
	need := float64(p) + 1 - tokens
	if need <= 0 {
		return MinWait
	}
	nanos := need / d.limits.rate() * float64(time.Second)
	us := math.Ceil(nanos/float64(time.Microsecond)) + 1
	if us >= float64(math.MaxInt64/int64(time.Microsecond)) {
		return time.Duration(math.MaxInt64)
	}
	return max(time.Duration(us)*time.Microsecond, MinWait)
}

// addSat returns a+b for non-negative durations, saturating instead of
// overflowing.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
