package retry

import (
	"strings"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	now := time.Date(2015, time.October, 21, 7, 26, 0, 0, time.UTC)
	at0728 := time.Date(2015, time.October, 21, 7, 28, 0, 0, time.UTC)
	base := Policy{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 2, Jitter: JitterFull, RetryOnStatus: DefaultRetryOnStatus()}
	with := func(f func(*Policy)) Policy { p := base; f(&p); return p }
	inTen := now.Add(10 * time.Minute)
	deadline10m := with(func(p *Policy) { p.Deadline = inTen })

	tests := []struct {
		name       string
		p          Policy
		attempts   int32
		retryAfter string
		now        time.Time
		rnd        float64
		want       Decision
		msg        []string // substrings of Message
	}{
		// C07: a future HTTP-date is honoured exactly; jitter only adds.
		{"C07 date, small backoff", base, 1, imfDate, now, 0.999999,
			Decision{Retry: true, NextAt: at0728, RetryAfter: 2 * time.Minute}, nil},
		{"C07 date, jitter floor", base, 1, imfDate, now, 0,
			Decision{Retry: true, NextAt: at0728, RetryAfter: 2 * time.Minute}, nil},
		{"C07 date, backoff beyond it", with(func(p *Policy) { p.InitialBackoff, p.MaxBackoff, p.Jitter = 5*time.Minute, 5*time.Minute, JitterNone }), 1,
			imfDate, now, 0, Decision{Retry: true, NextAt: now.Add(5 * time.Minute), RetryAfter: 2 * time.Minute}, nil},
		{"C07 RFC 850", base, 1, rfc850Date, now, 0.5,
			Decision{Retry: true, NextAt: at0728, RetryAfter: 2 * time.Minute}, nil},
		{"C07 asctime", base, 1, asctimeDate, now, 0.5,
			Decision{Retry: true, NextAt: at0728, RetryAfter: 2 * time.Minute}, nil},
		{"C07 past date is normal backoff", base, 2, imfDate, now.Add(4 * time.Minute), 0.5,
			Decision{Retry: true, NextAt: now.Add(4*time.Minute + time.Second)}, nil},
		{"C07 garbage is normal backoff", base, 2, "soon", now, 0.5,
			Decision{Retry: true, NextAt: now.Add(time.Second)}, nil},
		// C08: absurd Retry-After under a 10-minute deadline.
		{"C08 huge", deadline10m, 1, "99999999999", now, 0.5,
			Decision{RetryAfter: MaxRetryAfter, Reason: ReasonRetryAfterPastDeadline}, []string{"Retry-After 8760h0m0s", "2015-10-21T07:36:00Z"}},
		{"C08 one hour", deadline10m, 1, "3600", now, 0.5,
			Decision{RetryAfter: time.Hour, Reason: ReasonRetryAfterPastDeadline}, []string{"Retry-After 1h0m0s", "2015-10-21T08:26:00Z", "deadline 2015-10-21T07:36:00Z"}},
		{"C08 negative is absent", deadline10m, 1, "-5", now, 0.5,
			Decision{Retry: true, NextAt: now.Add(500 * time.Millisecond)}, nil},
		{"Retry-After ending exactly at the deadline", deadline10m, 1, "600", now, 0.5,
			Decision{Retry: true, NextAt: inTen, RetryAfter: 10 * time.Minute}, nil},
		{"Retry-After one second past the deadline", deadline10m, 1, "601", now, 0,
			Decision{RetryAfter: 601 * time.Second, Reason: ReasonRetryAfterPastDeadline}, []string{"Retry-After 10m1s"}},
		{"no deadline: huge Retry-After is scheduled", base, 1, "99999999999", now, 0.5,
			Decision{Retry: true, NextAt: now.Add(MaxRetryAfter), RetryAfter: MaxRetryAfter}, nil},
		// Deadline reached by backoff.
		{"backoff past the deadline", with(func(p *Policy) {
			p.InitialBackoff, p.MaxBackoff, p.Jitter, p.Deadline = 20*time.Minute, time.Hour, JitterNone, inTen
		}), 1, "", now, 0,
			Decision{Reason: ReasonDeadlineExceeded}, []string{"20m0s", "2015-10-21T07:46:00Z", "deadline 2015-10-21T07:36:00Z"}},
		{"Retry-After fits but jitter pushes past the deadline", with(func(p *Policy) { p.InitialBackoff, p.MaxBackoff, p.Deadline = 20*time.Minute, time.Hour, inTen }), 1, "60", now, 0.75,
			Decision{RetryAfter: time.Minute, Reason: ReasonDeadlineExceeded}, nil},
		{"already past the deadline", deadline10m, 1, "", inTen.Add(time.Second), 0,
			Decision{Reason: ReasonDeadlineExceeded}, []string{"after the deadline"}},
		{"already past the deadline with Retry-After", deadline10m, 1, "5", inTen.Add(time.Second), 0,
			Decision{Reason: ReasonDeadlineExceeded}, nil},
		// C10: maxAttempts 3, initialBackoff 10s.
		{"C10 after 1", with(func(p *Policy) { p.MaxAttempts, p.InitialBackoff, p.Jitter = 3, 10*time.Second, JitterNone }), 1, "", now, 0,
			Decision{Retry: true, NextAt: now.Add(10 * time.Second)}, nil},
		{"C10 after 2", with(func(p *Policy) { p.MaxAttempts, p.InitialBackoff, p.Jitter = 3, 10*time.Second, JitterNone }), 2, "", now, 0,
			Decision{Retry: true, NextAt: now.Add(20 * time.Second)}, nil},
		{"C10 after 3", with(func(p *Policy) { p.MaxAttempts, p.InitialBackoff, p.Jitter = 3, 10*time.Second, JitterNone }), 3, "", now, 0,
			Decision{Reason: ReasonAttemptsExhausted}, []string{"3 of 3"}},
		{"exhausted beats Retry-After", with(func(p *Policy) { p.MaxAttempts = 3 }), 4, "5", now, 0,
			Decision{Reason: ReasonAttemptsExhausted}, nil},
		{"maxAttempts 0 means one attempt", with(func(p *Policy) { p.MaxAttempts = 0 }), 1, "", now, 0,
			Decision{Reason: ReasonAttemptsExhausted}, []string{"1 of 1"}},
		{"zero attempts retries like one", base, 0, "", now, 0.5,
			Decision{Retry: true, NextAt: now.Add(500 * time.Millisecond)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(tc.p, tc.attempts, tc.retryAfter, tc.now, constRnd(tc.rnd))
			msg := got.Message
			got.Message = ""
			if got != tc.want {
				t.Errorf("Next(attempts=%d, %q) = %+v, want %+v", tc.attempts, tc.retryAfter, got, tc.want)
			}
			if got.Retry != (msg == "") {
				t.Errorf("Message %q: want empty iff Retry", msg)
			}
			for _, s := range tc.msg {
				if !strings.Contains(msg, s) {
					t.Errorf("Message %q does not contain %q", msg, s)
				}
			}
		})
	}
}

// TestNextNeverBeforeRetryAfter checks C07/C08 over many jitter draws: the next
// attempt is never earlier than the Retry-After, and never later than
// max(Retry-After, capped backoff).
func TestNextNeverBeforeRetryAfter(t *testing.T) {
	now := time.Date(2015, time.October, 21, 7, 26, 0, 0, time.UTC)
	p := Policy{MaxAttempts: 10, InitialBackoff: time.Second, MaxBackoff: 5 * time.Minute, Multiplier: 2, Jitter: JitterFull}
	for _, ra := range []string{imfDate, "120", "1", ""} {
		want, _ := ParseRetryAfter(ra, now)
		for attempts := int32(1); attempts < 10; attempts++ {
			for i := range 101 {
				r := float64(i) / 101
				d := Next(p, attempts, ra, now, constRnd(r))
				if !d.Retry {
					t.Fatalf("Next(%d, %q) = %+v, want Retry", attempts, ra, d)
				}
				if d.NextAt.Before(now.Add(want)) {
					t.Fatalf("Next(%d, %q, rnd %v).NextAt = %v, before the Retry-After %v", attempts, ra, r, d.NextAt, now.Add(want))
				}
				if hi := now.Add(max(want, cappedBackoff(p, int(attempts)))); d.NextAt.After(hi) {
					t.Fatalf("Next(%d, %q, rnd %v).NextAt = %v, after %v", attempts, ra, r, d.NextAt, hi)
				}
			}
		}
	}
}
