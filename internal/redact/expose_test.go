package redact

import (
	"net/http"
	"strings"
	"testing"

	"github.com/actionledger/actionledger/internal/httpexec"
)

// The body a tenant sees is made of the values at the exposed JSON Pointers, at their places, and nothing
// else; a body that is not one whole JSON value, or holds none of them, is empty.
func TestExposedBody(t *testing.T) {
	doc := `{"id":"ch_1","amount":12.50,"token":"tok_live","a/b":1,"m~n":2,"items":[{"id":"i0","secret":"x"},{"id":"i1"},{"id":"i2","n":3}],"nested":{"k":{"v":true}}}`
	for _, tc := range []struct {
		name     string
		pointers []string
		body     string
		want     string
	}{
		{"nothing listed", nil, doc, ""},
		{"one member", []string{"/id"}, doc, `{"id":"ch_1"}`},
		{"number text kept", []string{"/amount"}, doc, `{"amount":12.50}`},
		{"escaped tokens (~1 is /, ~0 is ~)", []string{"/a~1b", "/m~0n"}, doc, `{"a/b":1,"m~n":2}`},
		{"array element at its index, null before it", []string{"/items/2/n"}, doc, `{"items":[null,null,{"n":3}]}`},
		{"two elements of one array", []string{"/items/1/id", "/items/0/id"}, doc, `{"items":[{"id":"i0"},{"id":"i1"}]}`},
		{"a whole subtree", []string{"/nested"}, doc, `{"nested":{"k":{"v":true}}}`},
		{"a subtree and a pointer inside it", []string{"/nested/k/v", "/nested"}, doc, `{"nested":{"k":{"v":true}}}`},
		{"missing member", []string{"/nope"}, doc, ""},
		{"index out of range", []string{"/items/3"}, doc, ""},
		{"index with a leading zero", []string{"/items/01"}, doc, ""},
		{"index '-' (past the end)", []string{"/items/-"}, doc, ""},
		{"member of a string", []string{"/id/x"}, doc, ""},
		{"not a pointer", []string{"id", "/~2"}, doc, ""},
		{"root array", []string{"/1"}, `["a","b"]`, `[null,"b"]`},
		{"root scalar with a pointer", []string{"/x"}, `"text"`, ""},
		{"not JSON", []string{"/id"}, `id=ch_1`, ""},
		{"JSON followed by more", []string{"/id"}, `{"id":"ch_1"} {"id":"ch_2"}`, ""},
		{"JSONP", []string{"/id"}, `cb({"id":"ch_1"})`, ""},
		{"white space around", []string{"/id"}, " \n{\"id\":\"ch_1\"}\n", `{"id":"ch_1"}`},
		{"no HTML escaping", []string{"/h"}, `{"h":"<a&b>"}`, `{"h":"<a&b>"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(exposedBody([]byte(tc.body), tc.pointers)); got != tc.want {
				t.Errorf("exposed body %q, want %q", got, tc.want)
			}
		})
	}
}

// A view with an exposure holds the status code, the exposed headers (names in any case, never a session or
// credential header) and the exposed body; Retry-After is kept for scheduling; bodySHA256 and bodyTruncated
// only with the whole body. Without an exposure the view is the whole (redacted) response.
func TestViewExposure(t *testing.T) {
	resp := &httpexec.Response{
		StatusCode: 201,
		Header: http.Header{
			"Set-Cookie":   {"session=platform-session; Path=/"},
			"X-Request-Id": {"req-1"},
			"Content-Type": {"application/json"},
			"Retry-After":  {"7"},
			"X-Echo":       {"Bearer platform-token"},
		},
		Body:       []byte(`{"id":"ch_1","auth":"Bearer platform-token","session":"s-123"}`),
		BodySHA256: "sha256:abc",
	}
	r := New("platform-token")
	for _, tc := range []struct {
		name        string
		e           *Exposure
		wantHeaders http.Header
		wantBody    string
		wantSHA     string
		wantLimited bool
	}{
		{"no exposure: the whole response", nil, http.Header{"Set-Cookie": {"session=platform-session; Path=/"},
			"X-Request-Id": {"req-1"}, "Content-Type": {"application/json"}, "Retry-After": {"7"}, "X-Echo": {"Bearer [REDACTED]"}},
			`{"id":"ch_1","auth":"Bearer [REDACTED]","session":"s-123"}`, "sha256:abc", false},
		{"empty exposure: the status code", &Exposure{}, http.Header{}, "", "", true},
		{"headers in any case, never Set-Cookie", &Exposure{Headers: []string{"x-request-id", "SET-COOKIE", "x-missing"}},
			http.Header{"X-Request-Id": {"req-1"}}, "", "", true},
		{"an exposed header is still redacted", &Exposure{Headers: []string{"X-Echo"}}, http.Header{"X-Echo": {"Bearer [REDACTED]"}}, "", "", true},
		{"one body member", &Exposure{Body: []string{"/id"}}, http.Header{}, `{"id":"ch_1"}`, "", true},
		{"an exposed member is still redacted", &Exposure{Body: []string{"/auth"}}, http.Header{}, `{"auth":"Bearer [REDACTED]"}`, "", true},
		{"the whole body", &Exposure{Body: []string{""}}, http.Header{},
			`{"id":"ch_1","auth":"Bearer [REDACTED]","session":"s-123"}`, "sha256:abc", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := r.Exposing(tc.e).View(resp)
			if v.StatusCode != 201 || v.RetryAfter != "7" || v.Limited != tc.wantLimited {
				t.Errorf("status %d, retryAfter %q, limited %v", v.StatusCode, v.RetryAfter, v.Limited)
			}
			if !equalHeaders(v.Header, tc.wantHeaders) {
				t.Errorf("headers %v, want %v", v.Header, tc.wantHeaders)
			}
			if string(v.Body) != tc.wantBody || v.BodySHA256 != tc.wantSHA {
				t.Errorf("body %q sha %q, want %q sha %q", v.Body, v.BodySHA256, tc.wantBody, tc.wantSHA)
			}
			if w := r.Exposing(tc.e).WholeView(resp); w.Header.Get("Set-Cookie") == "" || w.Limited {
				t.Errorf("the whole view lost Set-Cookie or is limited: %v", w.Header)
			}
		})
	}
	// The exposure survives With (a per-request redactor: an OAuth2 token added).
	if v := r.Exposing(&Exposure{}).With("s-123").View(resp); len(v.Body) != 0 || len(v.Header) != 0 {
		t.Errorf("With dropped the exposure: %v %q", v.Header, v.Body)
	}
	if v := r.Exposing(&Exposure{Body: []string{"/session"}}).With("s-123").View(resp); string(v.Body) != `{"session":"[REDACTED]"}` {
		t.Errorf("With: body %q", v.Body)
	}
	// A body the executor cut is not one whole JSON value: nothing of it unless the whole body is exposed.
	cut := &httpexec.Response{StatusCode: 200, Body: []byte(`{"id":"ch_1","pad":"` + strings.Repeat("x", 64)), BodyTruncated: true}
	if v := r.Exposing(&Exposure{Body: []string{"/id"}}).View(cut); len(v.Body) != 0 || v.BodyTruncated {
		t.Errorf("cut body, /id exposed: %q truncated %v", v.Body, v.BodyTruncated)
	}
	if v := r.Exposing(&Exposure{Body: []string{""}}).View(cut); len(v.Body) == 0 || !v.BodyTruncated {
		t.Errorf("cut body, whole exposed: %q truncated %v", v.Body, v.BodyTruncated)
	}
	if (*Redactor)(nil).Exposing(&Exposure{}).View(nil) != nil {
		t.Error("a view of no response")
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, vs := range a {
		if strings.Join(vs, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}
