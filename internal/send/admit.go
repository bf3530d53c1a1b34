package send

import (
	"fmt"
	"time"

	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/retry"
)

// Wait is why a request may not leave yet, and until when: the destination's rate limit (or a Retry-After
// pause of it) or its retry budget. Nothing was sent and no attempt is spent.
type Wait struct {
	// Reason is the API's reason: RateLimited or RetryBudgetExhausted (destination.LimiterReason).
	Reason string
	// Until is when to ask again (the limiter's wait from now, capped while the limits are divided among shards).
	Until time.Time
	// Message says so for status: "waiting for destination <id> (<reason>) until <RFC 3339 time>", and for the
	// retry budget ", or sooner if new first attempts raise the budget".
	Message string
}

// BriefWait (1 s) is the longest wait for a destination's limits that is waited without a status write. A
// rate-limit wait that ends within it, the common case when requests arrive in bursts above a destination's
// rateLimit, would make one more status write per request exactly when the API server is busiest, to show a
// condition that is gone before a person or kstatus reads it. A longer wait is recorded (reason RateLimited or
// RetryBudgetExhausted, written only when the reason changes). Either way nothing is sent and no attempt spent.
const BriefWait = time.Second

// Brief reports whether w ends within BriefWait of now: the caller waits it without recording it.
func (w *Wait) Brief(now time.Time) bool { return w.Until.Sub(now) < BriefWait }

// Admit is the admission of every request that spends a destination's limits, before its claim: an attempt, a
// post-check and a dead-letter delivery alike. It takes a token of dest's rate limit and, for a retry (first
// false), of its retry budget, from l (limiter.Registry.Admit, dest.ID with dest.Limits at this shard's share:
// destination.Resolver.TakeShare), for key (the action's namespace/name, its place in the fair queue of
// namespace ns) at now. nil: admitted, one token taken. Otherwise the request waits (counted in the Delayed
// metric); shares caps the wait at the shard Lease duration while dest's limits are divided.
func Admit(l *limiter.Registry, shares *destination.Resolver, dest *destination.Resolved, ns, key string, first bool,
	now time.Time) *Wait {
	ok, after, reason := l.Admit(dest.ID, dest.Limits, ns, key, first, now)
	if ok {
		return nil
	}
	after = shares.ShareRecheck(dest, after)
	w := &Wait{Reason: destination.LimiterReason(reason), Until: now.Add(after)}
	w.Message = fmt.Sprintf("waiting for destination %s (%s) until %s", dest.ID, w.Reason, w.Until.UTC().Format(time.RFC3339Nano))
	if reason == limiter.ReasonRetryBudgetExhausted {
		w.Message += ", or sooner if new first attempts raise the budget"
	}
	metrics.Delayed.WithLabelValues(dest.ID, w.Reason).Inc()
	return w
}

// Account counts the attempt or delivery of p at destID and pauses the destination on a 429 or 503 with
// Retry-After (RFC 9110 section 10.2.3), never longer than the destination's deadline (p.PauseCap). The
// controller calls it for every result the dispatcher hands back but a post-check's.
func Account(l *limiter.Registry, destID string, p *Result) {
	o := p.Outcome
	metrics.Attempts.WithLabelValues(destID, string(o.Class)).Inc()
	metrics.AttemptDuration.WithLabelValues(destID).Observe(max(o.FinishedAt.Sub(p.ClaimedAt).Seconds(), 0))
	if o.RetryAfter != "" && (o.StatusCode == 429 || o.StatusCode == 503) {
		if d, ok := retry.ParseRetryAfter(o.RetryAfter, o.FinishedAt); ok {
			// One answer pauses the whole destination, but never longer than the destination's deadline: an
			// action never waits past its deadline anyway, and a hostile Retry-After must not stop a
			// destination for a year.
			l.Pause(destID, o.FinishedAt.Add(min(d, p.PauseCap)))
		}
	}
}
