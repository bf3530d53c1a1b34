package redact

import (
	"net/http"
	"strings"
	"testing"

	"github.com/actionledger/actionledger/internal/httpexec"
)

// The view redacts a JSON body value by value and keeps every other byte (layout, key order, numbers); a
// body that is not JSON, or is cut, is redacted as text; headers are merged under canonical names.
func TestViewKeepsWhatHoldsNoSecret(t *testing.T) {
	r := New("s3cr3t/value")
	for _, tc := range []struct {
		name, body, want string
		truncated        bool
	}{
		{"JSON layout kept", "{ \"b\": 1,\n  \"a\": \"s3cr3t\\/value\", \"n\": 1.50 }", "{ \"b\": 1,\n  \"a\": \"[REDACTED]\", \"n\": 1.50 }", false},
		{"partly redacted string re-encoded", `["x\u0022s3cr3t\/value<"]`, `["x\"[REDACTED]<"]`, false},
		{"a key", `{"s3cr3t\/value":"v"}`, `{"[REDACTED]":"v"}`, false},
		{"no secret: the body as sent", `{"a":"\u0041"}`, `{"a":"\u0041"}`, false},
		{"not JSON", "<p>s3cr3t/value</p>", "<p>[REDACTED]</p>", false},
		{"cut JSON: the decoded part, then the last Longest()-1 bytes dropped",
			`{"a":"s3cr3t\/value","b":"s3cr3t/value","c":"` + strings.Repeat("x", 40) + `s3cr`,
			`{"a":"[REDACTED]","b":"[REDACTED]","c":"` + strings.Repeat("x", 44-(r.Longest()-1)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := r.View(&httpexec.Response{StatusCode: 200, Body: []byte(tc.body), BodyTruncated: tc.truncated, BodySHA256: "sha256:x"})
			if string(v.Body) != tc.want || v.BodySHA256 != "sha256:x" {
				t.Errorf("body %q (sha %s), want %q", v.Body, v.BodySHA256, tc.want)
			}
		})
	}
	v := r.View(&httpexec.Response{Header: http.Header{"location": {"/a?x=1&y=s3cr3t%2Fvalue#f"}, "X-Plain": {"ok"}}})
	if got := v.Header.Get("Location"); got != "/a?x=1&y=[REDACTED]#f" || v.Header.Get("X-Plain") != "ok" {
		t.Errorf("headers %v", v.Header)
	}
	if New().View(nil) != nil {
		t.Error("a view of no response")
	}
}

// A body the executor cut keeps the same text whether or not it ends in the beginning of a Secret value: a
// destination that echoes the request cannot be used to confirm a guessed prefix (issue 23 row 3).
func TestViewCutTailDoesNotDependOnTheSecret(t *testing.T) {
	r := New("s3cr3t/value")
	pad := strings.Repeat(".", 100)
	var kept []string
	for _, tail := range []string{"s3cr3t/va", "zzzzzzzzz", "s3cr"} {
		v := r.View(&httpexec.Response{Body: []byte(pad + tail), BodyTruncated: true})
		body, truncated := v.Cut(4096)
		kept = append(kept, body)
		if !truncated || strings.Contains(body, "s3cr") {
			t.Errorf("tail %q: kept %q (truncated %v)", tail, body, truncated)
		}
	}
	if kept[0] != kept[1] {
		t.Errorf("a tail that begins the secret is kept as %q, another as %q", kept[0], kept[1])
	}
}
