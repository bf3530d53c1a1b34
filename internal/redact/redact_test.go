package redact

import (
	"strings"
	"testing"
	"unicode/utf8"
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
			if got := New(tc.values...).String(tc.in); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	var nilR *Redactor
	if got := nilR.String("x"); got != "x" || nilR.Longest() != 0 {
		t.Errorf("nil redactor changed %q or has longest %d", got, nilR.Longest())
	}
}

func TestRedactBodyAtTheCap(t *testing.T) {
	const secret = "0123456789abcdef" // 16 bytes
	r := New(secret)
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
	r := New(secret, "tok-9f8e7d6c5b4a")
	const limit = 40
	for off := range 60 {
		full := strings.Repeat("-", off) + secret + strings.Repeat("-", 30)
		window := full[:min(len(full), limit+r.Longest())]
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
		if got := CutUTF8(s, n); got != want || !utf8.ValidString(got) {
			t.Errorf("CutUTF8(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
}
