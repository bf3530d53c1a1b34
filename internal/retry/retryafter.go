package retry

import (
	"net/http"
	"strings"
	"time"
)

// MaxRetryAfter is the largest delay ParseRetryAfter returns: 365 days. Larger
// delay-seconds values and dates further in the future are clamped to it instead
// of overflowing; the caller then compares the resulting time with the deadline.
const MaxRetryAfter = 365 * 24 * time.Hour

// maxRetryAfterSeconds is MaxRetryAfter in whole seconds.
const maxRetryAfterSeconds = int64(MaxRetryAfter / time.Second)

// ParseRetryAfter parses a Retry-After header value (RFC 9110 §10.2.3) and returns
// the delay relative to now.
//
// The value is either delay-seconds (1*DIGIT, a non-negative decimal integer of
// seconds) or an HTTP-date in any of the three forms http.ParseTime accepts
// (IMF-fixdate "Wed, 21 Oct 2015 07:28:00 GMT", obsolete RFC 850
// "Wednesday, 21-Oct-15 07:28:00 GMT", asctime "Wed Oct 21 07:28:00 2015").
// Leading and trailing spaces and tabs are ignored, because they are not part of
// a field value (RFC 9110 §5.5).
//
// ok is false, meaning "treat as absent", for an empty value, zero seconds, a
// date at or before now, and anything else that is not exactly one of the forms
// above (a sign, a fraction, an exponent, trailing junk, "soon"). A delay larger
// than MaxRetryAfter, however many digits it has, is clamped to MaxRetryAfter and
// ok is true.
func ParseRetryAfter(value string, now time.Time) (delay time.Duration, ok bool) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return 0, false
	}
	if isDigit(v[0]) {
		secs, ok := parseDelaySeconds(v)
		if !ok || secs == 0 {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now) // saturates instead of overflowing
	if d <= 0 {
		return 0, false
	}
	return min(d, MaxRetryAfter), true
}

// parseDelaySeconds parses 1*DIGIT, clamping the value to maxRetryAfterSeconds.
func parseDelaySeconds(s string) (int64, bool) {
	var n int64
	for i := range len(s) {
		c := s[i]
		if !isDigit(c) {
			return 0, false
		}
		if n <= maxRetryAfterSeconds { // stop growing once clamped; cannot overflow
			n = n*10 + int64(c-'0')
		}
	}
	return min(n, maxRetryAfterSeconds), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
