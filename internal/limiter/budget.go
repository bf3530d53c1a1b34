package limiter

import (
	"math"
	"time"
)

// budgetBuckets is the number of buckets a retry-budget window is divided into
// at most: admissions closer together than window/budgetBuckets (and at least
// 1 ms) are counted in one bucket, which bounds memory at any request rate.
const budgetBuckets = 200

// bucket counts admissions that happened in [at, at+quantum).
type bucket struct {
	at time.Time
	n  int
}

// window is a sliding count of admissions, bucketed by quantum.
type window struct {
	buckets []bucket
	total   int
}

// add counts one admission at now.
func (w *window) add(now time.Time, quantum time.Duration) {
	if n := len(w.buckets); n > 0 && now.Sub(w.buckets[n-1].at) < quantum {
		w.buckets[n-1].n++
	} else {
		w.buckets = append(w.buckets, bucket{at: now, n: 1})
	}
	w.total++
}

// prune drops the buckets whose lifetime (bucket time + life) ended at or
// before now.
func (w *window) prune(now time.Time, life time.Duration) {
	i := 0
	for i < len(w.buckets) && !w.buckets[i].at.Add(life).After(now) {
		w.total -= w.buckets[i].n
		i++
	}
	if i == len(w.buckets) {
		w.buckets = nil
		return
	}
	w.buckets = w.buckets[i:]
}

// retryBudget counts first attempts and retries admitted on a destination.
//
// Bucketing is conservative in both directions: a bucket of first attempts
// leaves the window when its earliest admission does, a bucket of retries when
// its latest possible admission does.
type retryBudget struct {
	firsts  window
	retries window
}

func budgetQuantum(win time.Duration) time.Duration {
	return max(win/budgetBuckets, time.Millisecond)
}

// record counts one admission at now.
func (b *retryBudget) record(first bool, now time.Time, win time.Duration) {
	if first {
		b.firsts.add(now, budgetQuantum(win))
	} else {
		b.retries.add(now, budgetQuantum(win))
	}
}

// prune forgets admissions that left the window of length win at now.
func (b *retryBudget) prune(now time.Time, win time.Duration) {
	b.firsts.prune(now, win)
	b.retries.prune(now, win+budgetQuantum(win))
}

// empty reports whether no admission is in the window (after prune).
func (b *retryBudget) empty() bool { return b.firsts.total == 0 && b.retries.total == 0 }

// allowance returns how many retries l (normalized) allows with firsts first
// attempts in the window: the floor is this manager's share of it.
func allowance(l Limits, firsts int) float64 {
	return float64(l.RetryPercent)*float64(firsts)/100 +
		float64(l.MinRetriesPerSecond)*l.Window.Seconds()/float64(l.Shares)
}

// budgetEpsilon absorbs floating-point error in allowance comparisons.
const budgetEpsilon = 1e-9

// remaining returns how many more retries l allows at the last prune (fractional).
func (b *retryBudget) remaining(l Limits) float64 {
	return math.Max(0, allowance(l, b.firsts.total)-float64(b.retries.total))
}

// fits returns how many more retries fit the budget l (normalized) with firsts first attempts and retries retries
// in the window (0 when none does).
func fits(l Limits, firsts, retries int) int {
	return max(0, int(math.Floor(allowance(l, firsts)-float64(retries)+budgetEpsilon)))
}

// allow reports whether need more retries fit the budget at now (b is pruned at now): the retries waiting ahead
// of one and that one itself. If not, wait is the time until the last of them will fit if no further first
// attempt is admitted (fitTimes); when the budget can never admit it without new first attempts (no floor),
// wait is one window.
func (b *retryBudget) allow(now time.Time, l Limits, need int) (ok bool, wait time.Duration) {
	if fits(l, b.firsts.total, b.retries.total) >= need {
		return true, 0
	}
	return false, max(b.fitTimes(now, l, need-1, need)[0].Sub(now), MinWait)
}

// fitTimes returns, for each need in (from, to], the time the budget fits that many more retries at now if no
// further first attempt is admitted (b is pruned at now): now when they fit already, now plus one window when
// the budget never will (no floor). It replays the window: at each time a bucket of first attempts or retries
// leaves it, the retries that then fit are taken, in order, by the needs still waiting, and each taken retry is
// itself in the window for a retry's lifetime (the window and one bucket) and one bucket more, the slack for the
// wake and reconcile that bring it (it is admitted a little after its time, so it leaves a little later).
// Once every admission in the window has left it, what the replay took repeats with the period of a taken retry's
// life, so the rest is worked out by that period: O(buckets in the window + to - from), whatever from is (a
// retry deep in a long queue costs no more to tell than the first).
func (b *retryBudget) fitTimes(now time.Time, l Limits, from, to int) []time.Time {
	return b.replayTimes(now, l, from, to, true)
}

// replayTimes is fitTimes; periodic false replays every event to the end (the tests' reference).
func (b *retryBudget) replayTimes(now time.Time, l Limits, from, to int, periodic bool) []time.Time {
	out := make([]time.Time, 0, max(to-from, 0))
	p := &replay{l: l, firsts: b.firsts.total, retries: b.retries.total, fs: b.firsts.buckets, rs: b.retries.buckets}
	met := 0 // how many needs are met
	for t, ok := now, true; ok && met < to; t, ok = p.next() {
		for fit := p.take(t); met < to && fit > 0; fit-- {
			met++
			if met > from {
				out = append(out, t)
			}
		}
		if periodic && met < to && p.steady() {
			return append(out, p.periodic(met, max(met, from), to)...)
		}
	}
	for len(out) < to-from {
		out = append(out, now.Add(max(l.Window, MinWait)))
	}
	return out
}

// replay is the state of fitTimes' replay of a retry-budget window: the admissions still in it (firsts and
// retries, in buckets fs and rs), and taken, the retries the replay gave to the needs met so far, as buckets by the
// time they leave the window.
type replay struct {
	l               Limits
	firsts, retries int
	fs, rs, taken   []bucket
}

// take gives the retries that fit at t to the needs waiting, and returns how many.
func (p *replay) take(t time.Time) int {
	fit := fits(p.l, p.firsts, p.retries)
	if fit > 0 {
		q := budgetQuantum(p.l.Window)
		p.retries += fit
		p.taken = append(p.taken, bucket{at: t.Add(p.l.Window + 2*q), n: fit})
	}
	return fit
}

// steady reports whether only the replay's own retries are in the window and they fill the floor allowance
// exactly (retries taken while first attempts raised the allowance have left): from then on the schedule repeats.
func (p *replay) steady() bool {
	return len(p.fs) == 0 && len(p.rs) == 0 && len(p.taken) > 0 && p.retries == fits(p.l, 0, 0)
}

// periodic returns the times of the needs in (from, to], met needs being met already, once the replay is steady:
// each taken bucket
// is taken again when it leaves, by as many retries, so the schedule repeats every taken retry's life.
func (p *replay) periodic(met, from, to int) []time.Time {
	period := p.l.Window + 2*budgetQuantum(p.l.Window)
	cycle := 0
	for _, t := range p.taken {
		cycle += t.n
	}
	out := make([]time.Time, 0, to-from)
	for need := from + 1; need <= to; need++ {
		r := need - met - 1 // 0-based among the needs still waiting
		turn, rest := r/cycle, r%cycle
		for _, t := range p.taken {
			if rest < t.n {
				out = append(out, t.at.Add(time.Duration(turn)*period))
				break
			}
			rest -= t.n
		}
	}
	return out
}

// next returns the next time a bucket leaves the window, having dropped every bucket that leaves then; false when
// none is left.
func (p *replay) next() (time.Time, bool) {
	win := p.l.Window
	rlife := win + budgetQuantum(win)
	t := time.Time{}
	at := func(x time.Time) {
		if t.IsZero() || x.Before(t) {
			t = x
		}
	}
	if len(p.fs) > 0 {
		at(p.fs[0].at.Add(win))
	}
	if len(p.rs) > 0 {
		at(p.rs[0].at.Add(rlife))
	}
	if len(p.taken) > 0 {
		at(p.taken[0].at)
	}
	if t.IsZero() {
		return t, false
	}
	for len(p.fs) > 0 && !p.fs[0].at.Add(win).After(t) {
		p.firsts -= p.fs[0].n
		p.fs = p.fs[1:]
	}
	for len(p.rs) > 0 && !p.rs[0].at.Add(rlife).After(t) {
		p.retries -= p.rs[0].n
		p.rs = p.rs[1:]
	}
	for len(p.taken) > 0 && !p.taken[0].at.After(t) {
		p.retries -= p.taken[0].n
		p.taken = p.taken[1:]
	}
	return t, true
}
