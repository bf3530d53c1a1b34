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
// attempt is admitted. It replays the window: at each time a bucket of first attempts or retries leaves it, the
// retries that then fit are taken, in order, by those still waiting, and each taken retry is itself in the
// window for a retry's lifetime (the window and one bucket) and one bucket more, the slack for the wake and
// reconcile that bring it (it is admitted a little after its time, so it leaves a little later). When the budget
// can never admit the last of them without new first attempts (no floor), wait is one window.
func (b *retryBudget) allow(now time.Time, l Limits, need int) (ok bool, wait time.Duration) {
	firsts, retries := b.firsts.total, b.retries.total
	fit := fits(l, firsts, retries)
	if fit >= need {
		return true, 0
	}
	win := l.Window
	q := budgetQuantum(win)
	rlife := win + q
	// taken are the retries the replay gave to those ahead, as buckets by the time they leave the window (at).
	var taken []bucket
	take := func(t time.Time, n int) {
		if n > 0 {
			retries += n
			need -= n
			taken = append(taken, bucket{at: t.Add(rlife + q), n: n})
		}
	}
	take(now, fit)
	fs, rs := b.firsts.buckets, b.retries.buckets
	for len(fs) > 0 || len(rs) > 0 || len(taken) > 0 {
		// The next time a bucket leaves the window, and every bucket that leaves with it.
		t := time.Time{}
		next := func(at time.Time) {
			if t.IsZero() || at.Before(t) {
				t = at
			}
		}
		if len(fs) > 0 {
			next(fs[0].at.Add(win))
		}
		if len(rs) > 0 {
			next(rs[0].at.Add(rlife))
		}
		if len(taken) > 0 {
			next(taken[0].at)
		}
		for len(fs) > 0 && !fs[0].at.Add(win).After(t) {
			firsts -= fs[0].n
			fs = fs[1:]
		}
		for len(rs) > 0 && !rs[0].at.Add(rlife).After(t) {
			retries -= rs[0].n
			rs = rs[1:]
		}
		for len(taken) > 0 && !taken[0].at.After(t) {
			retries -= taken[0].n
			taken = taken[1:]
		}
		fit = fits(l, firsts, retries)
		if fit >= need {
			return false, max(t.Sub(now), MinWait)
		}
		take(t, fit)
	}
	return false, max(win, MinWait)
}
