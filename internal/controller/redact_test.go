package controller

import (
	"strings"
	"testing"
	"unicode/utf8"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

func TestRedactString(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		in     string
		want   string
	}{
		{"no values", nil, "token abcd", "token abcd"},
		{"one value", []string{"s3cr3t"}, "a s3cr3t b s3cr3t", "a [REDACTED] b [REDACTED]"},
		{"longest first: the header value and the token", []string{"tok-1234", "Bearer tok-1234"},
			"auth=Bearer tok-1234;", "auth=[REDACTED];"},
		{"overlapping values leave no fragment", []string{"abcdefgh", "efghijkl"}, "xabcdefghijklx", "x[REDACTED]x"},
		{"a value overlapping itself", []string{"aaaa"}, "aaaaaa", "[REDACTED]"},
		{"adjacent occurrences merge", []string{"k3y!"}, "k3y!k3y!", "[REDACTED]"},
		{"short values are ignored", []string{"ab", "xyz"}, "ab xyz", "ab xyz"},
		{"duplicates", []string{"same-value", "same-value"}, "same-value", "[REDACTED]"},
		{"inside an error text", []string{"hunter22"}, `malformed MIME header line: X-Echo: hunter22`,
			`malformed MIME header line: X-Echo: [REDACTED]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newRedactor(tc.values...).String(tc.in); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	var nilR *redactor
	if got := nilR.String("x"); got != "x" || nilR.longest() != 0 {
		t.Errorf("nil redactor changed %q or has longest %d", got, nilR.longest())
	}
}

func TestRedactBodyAtTheCap(t *testing.T) {
	const secret = "0123456789abcdef" // 16 bytes
	r := newRedactor(secret)
	pad := func(n int) string { return strings.Repeat(".", n) }
	for _, tc := range []struct {
		name      string
		body      string
		limit     int
		more      bool
		want      string
		truncated bool
	}{
		{"fits", "x" + secret, 64, false, "x[REDACTED]", false},
		// The executor kept limit+16 bytes: the secret starting 4 bytes before the cap is seen whole.
		{"straddles the cap", pad(28) + secret + pad(4), 32, false, pad(28) + "[RED", true},
		{"the redacted text is shorter than the cap", pad(8) + secret + "tail", 32, false, pad(8) + "[REDACTED]tail", false},
		// The body continues beyond what was read: a tail that is a prefix of the secret is dropped.
		{"prefix at the end of a read that stopped", pad(20) + secret[:10], 64, true, pad(20) + "[REDACTED]", true},
		{"short prefix at the end is dropped silently", pad(20) + secret[:3], 64, true, pad(20), true},
		{"prefix at the cap", pad(26) + secret[:6] + "zzzz", 32, false, pad(26), true},
		{"a complete body ending in a prefix keeps it", pad(4) + secret[:6], 64, false, pad(4) + secret[:6], false},
		{"marker never exceeds the cap", pad(26) + secret[:6], 32, true, pad(26), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, truncated := r.Body([]byte(tc.body), tc.limit, tc.more)
			if got != tc.want || truncated != tc.truncated {
				t.Errorf("Body(%q, %d, %v) = %q, %v; want %q, %v", tc.body, tc.limit, tc.more, got, truncated, tc.want, tc.truncated)
			}
			if len(got) > tc.limit {
				t.Errorf("result has %d bytes, over the limit %d", len(got), tc.limit)
			}
			for k := MinSecretLength; k <= len(secret); k++ {
				for i := 0; i+k <= len(secret); i++ {
					if strings.Contains(got, secret[i:i+k]) && strings.Contains(tc.body, secret) {
						t.Fatalf("result %q holds %q, a %d-byte part of the secret", got, secret[i:i+k], k)
					}
				}
			}
		})
	}
}

// Every cut of a body holding a secret, at every offset, keeps no prefix of the secret of MinSecretLength bytes.
func TestRedactBodyNoPrefixAtAnyOffset(t *testing.T) {
	const secret = "Bearer tok-9f8e7d6c5b4a" //nolint:gosec // G101: a test credential
	r := newRedactor(secret, "tok-9f8e7d6c5b4a")
	const limit = 40
	for off := range 60 {
		full := strings.Repeat("-", off) + secret + strings.Repeat("-", 30)
		window := full[:min(len(full), limit+r.longest())]
		got, _ := r.Body([]byte(window), limit, len(window) < len(full))
		for k := MinSecretLength; k <= len(secret); k++ {
			if strings.Contains(got, secret[:k]) || strings.Contains(got, "tok-9f8e7d6c5b4a"[:min(k, 16)]) {
				t.Fatalf("offset %d: %q holds a %d-byte prefix of a secret", off, got, k)
			}
		}
	}
}

func TestCutUTF8(t *testing.T) {
	s := "aé€😀" // 1 + 2 + 3 + 4 bytes
	for n, want := range map[int]string{0: "", 1: "a", 2: "a", 3: "aé", 5: "aé", 6: "aé€", 9: "aé€", 10: s, 99: s} {
		if got := cutUTF8(s, n); got != want || !utf8.ValidString(got) {
			t.Errorf("cutUTF8(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
}

func TestBoundStatus(t *testing.T) {
	long := strings.Repeat("é", 5000) // 10000 bytes
	st := &actionsv1alpha1.ExternalActionStatus{
		AttemptHistory: []actionsv1alpha1.AttemptRecord{{Number: 1, RetryAfter: strings.Repeat("9", 200)}},
		LastError:      long,
		Response: &actionsv1alpha1.ResponseRecord{StatusCode: 503, Body: long,
			Headers: map[string]string{"Location": long}},
	}
	boundStatus(st)
	if got := st.AttemptHistory[0].RetryAfter; len(got) != actionsv1alpha1.MaxRetryAfterLength {
		t.Errorf("retryAfter has %d bytes", len(got))
	}
	for name, v := range map[string]string{"lastError": st.LastError, "body": st.Response.Body, "Location": st.Response.Headers["Location"]} {
		if !utf8.ValidString(v) || len(v) > actionsv1alpha1.MaxResponseBodyLength {
			t.Errorf("%s: %d bytes, valid UTF-8 %v", name, len(v), utf8.ValidString(v))
		}
	}
	if len(st.Response.Headers["Location"]) > actionsv1alpha1.MaxResponseHeaderValueLength || !st.Response.BodyTruncated ||
		len(st.LastError) > actionsv1alpha1.MaxLastErrorLength {
		t.Errorf("bounds not applied: %d, %v, %d", len(st.Response.Headers["Location"]), st.Response.BodyTruncated, len(st.LastError))
	}
}
