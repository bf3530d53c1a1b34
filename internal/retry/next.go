package retry

import (
	"fmt"
	"time"
)

// Reasons a Decision gives when it does not retry.
const (
	// ReasonAttemptsExhausted: MaxAttempts attempts have been made.
	ReasonAttemptsExhausted = "AttemptsExhausted"
	// ReasonDeadlineExceeded: the next attempt, after backoff, would start after
	// the deadline.
	ReasonDeadlineExceeded = "DeadlineExceeded"
	// ReasonRetryAfterPastDeadline: the destination's Retry-After alone ends after
	// the deadline, and it must never be cut short (DESIGN rule 5).
	ReasonRetryAfterPastDeadline = "RetryAfterPastDeadline"
)

// Decision is the scheduler's decision after a non-terminal attempt.
type Decision struct {
	// Retry reports whether another attempt is scheduled at NextAt.
	Retry bool
	// NextAt is the earliest time of the next attempt; zero when !Retry.
	NextAt time.Time
	// RetryAfter is the honoured Retry-After delay, 0 if none (absent or invalid).
	RetryAfter time.Duration
	// Reason is empty when Retry, else one of ReasonAttemptsExhausted,
	// ReasonDeadlineExceeded and ReasonRetryAfterPastDeadline.
	Reason string
	// Message is human-readable text with the numbers behind the decision.
	Message string
}

// Next decides the next attempt after attempts attempts were made, the last of
// which just failed (Retryable, NotSent or InProgress), at time now. retryAfter is
// the raw Retry-After header value of the last response ("" if none).
//
// If attempts >= MaxAttempts the decision is ReasonAttemptsExhausted. Otherwise
// the delay is max(Retry-After, Backoff(p, attempts, rnd)): Retry-After is never
// cut short, and jitter can only add time beyond it. If the Deadline is set and
// now is already after it, the decision is ReasonDeadlineExceeded; if
// now+Retry-After is after it, the decision is ReasonRetryAfterPastDeadline; if
// now+delay is after it, ReasonDeadlineExceeded. A next attempt exactly at the
// deadline is allowed. Next neither sleeps nor reads the clock.
func Next(p Policy, attempts int32, retryAfter string, now time.Time, rnd func() float64) Decision {
	maxAttempts := max(p.MaxAttempts, 1)
	if attempts >= maxAttempts {
		return Decision{
			Reason:  ReasonAttemptsExhausted,
			Message: fmt.Sprintf("%d of %d attempts made", attempts, maxAttempts),
		}
	}
	hasDeadline := !p.Deadline.IsZero()
	if hasDeadline && now.After(p.Deadline) {
		return Decision{
			Reason:  ReasonDeadlineExceeded,
			Message: fmt.Sprintf("now %s is after the deadline %s", formatTime(now), formatTime(p.Deadline)),
		}
	}
	ra, _ := ParseRetryAfter(retryAfter, now) // 0 when absent or invalid
	if hasDeadline && ra > 0 && now.Add(ra).After(p.Deadline) {
		return Decision{
			RetryAfter: ra,
			Reason:     ReasonRetryAfterPastDeadline,
			Message: fmt.Sprintf("Retry-After %s ends at %s, after the deadline %s",
				ra, formatTime(now.Add(ra)), formatTime(p.Deadline)),
		}
	}
	backoff := Backoff(p, int(attempts), rnd)
	delay := max(ra, backoff)
	next := now.Add(delay)
	if hasDeadline && next.After(p.Deadline) {
		return Decision{
			RetryAfter: ra,
			Reason:     ReasonDeadlineExceeded,
			Message: fmt.Sprintf("next attempt after %s would start at %s, after the deadline %s",
				delay, formatTime(next), formatTime(p.Deadline)),
		}
	}
	return Decision{Retry: true, NextAt: next, RetryAfter: ra}
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
