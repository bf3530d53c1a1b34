package retry

import (
	"math"
	"math/rand/v2"
	"time"
)

// Jitter selects how the exponential backoff is randomised.
type Jitter string

const (
	// JitterFull draws the delay uniformly from [0, capped backoff), with a floor
	// of MinBackoff (see Backoff). Any Jitter value other than JitterNone, including
	// the empty string, is treated as JitterFull.
	JitterFull Jitter = "Full"
	// JitterNone uses the capped backoff as is.
	JitterNone Jitter = "None"
)

// MinBackoff is the smallest delay Backoff returns (unless MaxBackoff itself is
// smaller, in which case MaxBackoff is returned). It is the floor of full jitter,
// so that a random draw near 0 never produces an immediate resend, and it stands in
// for a non-positive InitialBackoff. Unit: time.Duration (1 ms).
const MinBackoff = time.Millisecond

// Policy is the effective retry policy, already defaulted by the caller.
type Policy struct {
	// MaxAttempts is the total number of attempts including the first; values
	// below 1 are treated as 1.
	MaxAttempts int32
	// InitialBackoff is the delay after the first failed attempt, before jitter.
	// A non-positive value is treated as MinBackoff.
	InitialBackoff time.Duration
	// MaxBackoff caps the exponential backoff before jitter is applied. A
	// non-positive value is treated as the (defaulted) InitialBackoff, i.e. no growth.
	MaxBackoff time.Duration
	// Multiplier is the growth factor per failed attempt, >= 1. Values below 1
	// and NaN are treated as 1; +Inf reaches MaxBackoff at the second failure.
	Multiplier float64
	// Jitter selects the randomisation applied after the cap.
	Jitter Jitter
	// Deadline is the absolute overall deadline of the action; the zero value
	// means none.
	Deadline time.Time
	// RetryOnStatus lists the HTTP status codes that may be retried (see
	// Classify). Nil or empty means no status code is retried; callers default
	// it with DefaultRetryOnStatus.
	RetryOnStatus []int32
}

// DefaultRetryOnStatus returns a fresh slice {408, 425, 429, 500, 502, 503, 504}:
// Request Timeout, Too Early, Too Many Requests, Internal Server Error, Bad Gateway,
// Service Unavailable and Gateway Timeout (RFC 9110 §15, RFC 8470 §5.2, RFC 6585 §4).
func DefaultRetryOnStatus() []int32 {
	return []int32{408, 425, 429, 500, 502, 503, 504}
}

// Backoff returns the delay before attempt number failed+1, after failed failed
// attempts (failed < 1 is treated as 1).
//
// The undithered delay is InitialBackoff * Multiplier^(failed-1), computed in
// float64 and capped at MaxBackoff, so it never overflows for any failed or
// Multiplier. Jitter is applied after the cap: JitterNone returns the capped delay;
// JitterFull returns capped*r with r = rnd() clamped to [0, 1], raised to
// min(MinBackoff, capped). The result is therefore always > 0 and <= the cap.
// A nil rnd uses math/rand/v2.Float64.
func Backoff(p Policy, failed int, rnd func() float64) time.Duration {
	capped := cappedBackoff(p, failed)
	if p.Jitter == JitterNone {
		return capped
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	r := rnd()
	switch {
	case !(r > 0): // also NaN
		r = 0
	case r > 1:
		r = 1
	}
	// capped <= MaxInt64 and r <= 1, so the product fits in a Duration; the
	// explicit check guards the float64 rounding of values near 2^63.
	f := float64(capped) * r
	d := capped
	if f < float64(capped) {
		d = time.Duration(f)
	}
	return max(d, min(MinBackoff, capped))
}

// cappedBackoff is InitialBackoff * Multiplier^(failed-1) capped at MaxBackoff,
// before jitter; always > 0.
func cappedBackoff(p Policy, failed int) time.Duration {
	initial := p.InitialBackoff
	if initial <= 0 {
		initial = MinBackoff
	}
	limit := p.MaxBackoff
	if limit <= 0 {
		limit = initial
	}
	if initial >= limit {
		return limit
	}
	if failed <= 1 {
		return initial
	}
	mult := p.Multiplier
	if !(mult > 1) { // below 1, equal to 1, or NaN: no growth
		return initial
	}
	// math.Pow saturates at +Inf, which compares above any limit; the comparison
	// happens in float64 so no integer arithmetic can overflow.
	f := float64(initial) * math.Pow(mult, float64(failed-1))
	if f >= float64(limit) {
		return limit
	}
	return time.Duration(f)
}
