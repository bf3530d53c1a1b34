package fairqueue

import (
	"math"
	"time"
)

const (
	// UsageWindow is the time constant of each namespace's worker usage: an exponentially weighted moving average
	// of its reconciles' worker time, so a reconcile done UsageWindow ago counts 1/e of one done now.
	UsageWindow = 5 * time.Second
	// DominanceFactor is how many times the usage of every other namespace with requests a namespace's must
	// exceed for it to be dominant (and held to Shares.Dominant).
	DominanceFactor = 2.0
	// DominanceFloor is the usage (busy workers on average over UsageWindow) a namespace's must exceed for it to be
	// dominant: one that keeps under half a worker busy is never held harder, however small the others' usage.
	DominanceFloor = 0.5
	// dominanceTTL is how long a computed dominant namespace stands before it is computed again: the scan is over
	// every namespace with usage, so an add pays it at most once in this time.
	dominanceTTL = 100 * time.Millisecond
	// usageFloor is the usage (busy workers) under which a namespace's entry is forgotten once it has no
	// requests: it could no longer be dominant, nor make another namespace dominant by its absence.
	usageFloor = 1e-3
)

// usage is one namespace's recent worker usage: busy is the moving average of its busy workers (worker seconds
// per second) at at; added is when a request of it was last added. A reconcile counts when it ends, all its
// worker time at once: one still running is not seen yet. A reconcile holds its worker for seconds at most (an
// evaluation waits expr.SlotWait for a slot and runs expr.EvalTimeout at most), so what is unseen is that long.
// (Counting reconciles while they run was tried: on the real cluster it let the quiet tenant, its reconciles
// slowed, overtake the held one and take its turn: p99 ratios 5.25x to 6.33x against 2.76x to 4.45x,
// docs/test-cluster.md.)
type usage struct {
	busy      float64
	at, added time.Time
}

// value is u's busy workers decayed to now.
func (u *usage) value(now time.Time) float64 {
	if d := now.Sub(u.at); d > 0 {
		return u.busy * math.Exp(-d.Seconds()/UsageWindow.Seconds())
	}
	return u.busy
}

// spend adds a reconcile of took (a duration of worker time) ended at now.
func (u *usage) spend(took time.Duration, now time.Time) {
	u.busy = u.value(now) + took.Seconds()/UsageWindow.Seconds()
	u.at = now
}

// usages is every namespace's recent usage, and the dominant namespace last computed from them.
type usages struct {
	by    map[string]*usage
	dom   string    // "" for none
	domAt time.Time // when dom was computed
}

func (us *usages) of(ns string) *usage {
	if us.by == nil {
		us.by = map[string]*usage{}
	}
	u := us.by[ns]
	if u == nil {
		u = &usage{}
		us.by[ns] = u
	}
	return u
}

// dominant is the dominant namespace at now, or "" when none is: at most one namespace is dominant at once.
// One becomes dominant when its usage is over DominanceFloor and over DominanceFactor times the usage of every
// other namespace that has requests (active tells, given a namespace and its usage entry), and stays dominant
// while it keeps the highest usage of them, so that it is still held between its bursts; while held its usage
// falls, and another namespace that overtakes it ends its turn. Computed at most once per dominanceTTL;
// entries gone quiet are forgotten while scanning.
func (us *usages) dominant(now time.Time, active func(string, *usage) bool) string {
	if us.fresh(now) {
		return us.dom
	}
	us.dom, us.domAt = us.pick(now, active, us.dom, true), now
	return us.dom
}

// peek is what dominant would return at now, without changing anything: a read for the metrics, which must not
// change what the queue decides.
func (us *usages) peek(now time.Time, active func(string, *usage) bool) string {
	if us.fresh(now) {
		return us.dom
	}
	return us.pick(now, active, us.dom, false)
}

// fresh tells whether the dominant namespace computed last still stands at now (dominanceTTL).
func (us *usages) fresh(now time.Time) bool {
	return !us.domAt.IsZero() && now.Sub(us.domAt) < dominanceTTL && !now.Before(us.domAt)
}

// pick computes the dominant namespace at now (dominant's rule), was being the one before; with forget, entries
// gone quiet are deleted on the way.
func (us *usages) pick(now time.Time, active func(string, *usage) bool, was string, forget bool) string {
	top, second, n := "", 0.0, 0
	topV := -1.0
	for ns, u := range us.by {
		on := active(ns, u)
		v := u.value(now)
		if !on {
			if forget && v < usageFloor {
				delete(us.by, ns)
			}
			continue
		}
		n++
		if v > topV {
			top, second, topV = ns, max(second, topV), v
		} else {
			second = max(second, v)
		}
	}
	switch {
	case n < 2:
	case top == was && topV > second:
		return top
	case topV > DominanceFloor && topV > DominanceFactor*second:
		return top
	}
	return ""
}
