package retry

import (
	"strings"
	"testing"
	"time"
)

// The C07 date, 07:28:00 GMT on 21 Oct 2015, in the three HTTP-date forms.
const (
	imfDate     = "Wed, 21 Oct 2015 07:28:00 GMT"
	rfc850Date  = "Wednesday, 21-Oct-15 07:28:00 GMT"
	asctimeDate = "Wed Oct 21 07:28:00 2015"
)

func TestParseRetryAfter(t *testing.T) {
	at := func(hh, mm, ss int) time.Time { return time.Date(2015, time.October, 21, hh, mm, ss, 0, time.UTC) }
	now := at(7, 26, 0)
	tests := []struct {
		name  string
		value string
		now   time.Time
		want  time.Duration
		ok    bool
	}{
		{"delay-seconds", "120", now, 2 * time.Minute, true},
		{"zero is absent", "0", now, 0, false},
		{"all zeros is absent", "000", now, 0, false},
		{"leading zeros", "0005", now, 5 * time.Second, true},
		{"negative is absent", "-5", now, 0, false},
		{"plus sign is junk", "+5", now, 0, false},
		{"garbage", "soon", now, 0, false},
		{"empty", "", now, 0, false},
		{"only spaces", "   ", now, 0, false},
		{"surrounding spaces are OWS", " 5 ", now, 5 * time.Second, true},
		{"surrounding tabs are OWS", "\t7\t", now, 7 * time.Second, true},
		{"inner space is junk", "5 5", now, 0, false},
		{"unit suffix is junk", "5s", now, 0, false},
		{"fraction is junk", "5.0", now, 0, false},
		{"exponent is junk", "1e3", now, 0, false},
		{"newline is junk", "5\n", now, 0, false},
		{"exactly MaxRetryAfter", "31536000", now, MaxRetryAfter, true},
		{"just above MaxRetryAfter clamps", "31536001", now, MaxRetryAfter, true},
		{"huge clamps", "99999999999", now, MaxRetryAfter, true},
		{"int64 max clamps", "9223372036854775807", now, MaxRetryAfter, true},
		{"30 digits clamp", strings.Repeat("9", 30), now, MaxRetryAfter, true},
		{"1000 digits clamp", strings.Repeat("1", 1000), now, MaxRetryAfter, true},
		{"huge with junk", strings.Repeat("9", 30) + "x", now, 0, false},
		{"IMF-fixdate future", imfDate, now, 2 * time.Minute, true},
		{"IMF-fixdate past", imfDate, at(7, 30, 0), 0, false},
		{"IMF-fixdate equal to now", imfDate, at(7, 28, 0), 0, false},
		{"IMF-fixdate one second ahead", imfDate, at(7, 27, 59), time.Second, true},
		{"IMF-fixdate with now in another zone", imfDate, now.In(time.FixedZone("CEST", 2*3600)), 2 * time.Minute, true},
		{"IMF-fixdate with spaces", "  Wed, 21 Oct 2015 07:28:00 GMT ", now, 2 * time.Minute, true},
		{"IMF-fixdate with junk", "Wed, 21 Oct 2015 07:28:00 GMT later", now, 0, false},
		{"IMF-fixdate non-GMT zone", "Wed, 21 Oct 2015 07:28:00 CET", now, 0, false},
		{"RFC 850", rfc850Date, now, 2 * time.Minute, true},
		{"RFC 850 past", rfc850Date, at(7, 30, 0), 0, false},
		{"asctime", asctimeDate, now, 2 * time.Minute, true},
		{"asctime past", asctimeDate, at(7, 30, 0), 0, false},
		{"asctime single-digit day", "Fri Oct  2 07:28:00 2015", time.Date(2015, time.October, 2, 7, 27, 0, 0, time.UTC), time.Minute, true},
		{"far future date clamps", "Fri, 31 Dec 9999 23:59:59 GMT", now, MaxRetryAfter, true},
		{"ISO 8601 is not an HTTP-date", "2015-10-21T07:28:00Z", now, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tc.value, tc.now)
			if got != tc.want || ok != tc.ok {
				t.Errorf("ParseRetryAfter(%q, %v) = %v, %v; want %v, %v", tc.value, tc.now, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	base := time.Date(2015, time.October, 21, 7, 26, 0, 0, time.UTC).UnixNano()
	for _, v := range []string{
		"120", "0", "-5", "soon", "", " 5 ", "99999999999", "1e3", strings.Repeat("9", 30),
		imfDate, rfc850Date, asctimeDate,
		"Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT",
	} {
		f.Add(v, base)
	}
	f.Add(imfDate, int64(-1<<63))
	f.Add("1", int64(1<<63-1))
	f.Fuzz(func(t *testing.T, value string, nowNanos int64) {
		d, ok := ParseRetryAfter(value, time.Unix(0, nowNanos))
		if ok && (d <= 0 || d > MaxRetryAfter) {
			t.Fatalf("ParseRetryAfter(%q) = %v, true; want in (0, %v]", value, d, MaxRetryAfter)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false; want 0 when not ok", value, d)
		}
	})
}
