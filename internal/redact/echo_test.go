package redact

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/actionledger/actionledger/internal/httpexec"
)

// echoToken is the platform's token that a shared destination echoes (case C16); it has a '/' and a '+',
// which JSON encoders write as \/, \u002f or \u002B.
const echoToken = "tok-ab/cd+9Zq7Lw" //nolint:gosec // G101: a test credential

// uEscapeAll writes every character of s as \uXXXX, with upper case hex digits when upper.
func uEscapeAll(s string, upper bool) string {
	var b strings.Builder
	for _, c := range s {
		f := `\u%04x`
		if upper {
			f = `\u%04X`
		}
		fmt.Fprintf(&b, f, c)
	}
	return b.String()
}

// echoRedactor redacts what a bearerToken destination sends: the token and the header value.
func echoRedactor() *Redactor { return New(echoToken, "Bearer "+echoToken) }

// assertNoToken fails when out holds the token, or a part of it of 6 bytes or more, in any form: as it is,
// JSON-escaped (also with \/), base64, hex, or once unescaped up to maxUnescapeLevels times.
func assertNoToken(t *testing.T, out string) {
	t.Helper()
	esc, _ := json.Marshal(echoToken)
	forms := []string{
		strings.Trim(string(esc), `"`), strings.ReplaceAll(echoToken, "/", `\/`),
		base64.StdEncoding.EncodeToString([]byte(echoToken)), hex.EncodeToString([]byte(echoToken)),
	}
	texts := []string{out}
	for u, ok := unescape(out); ok && len(texts) <= maxUnescapeLevels; u, ok = unescape(u.text) {
		texts = append(texts, u.text)
	}
	for _, s := range texts {
		for _, f := range forms {
			if strings.Contains(s, f) {
				t.Fatalf("%q holds the token as %q", out, f)
			}
		}
		for i := 0; i+6 <= len(echoToken); i++ {
			if strings.Contains(s, echoToken[i:i+6]) {
				t.Fatalf("%q (decoded %q) holds %q, a part of the token", out, s, echoToken[i:i+6])
			}
		}
	}
}

// TestEchoFormsInABody: the echo of an Authorization header in every form of issue row 3 and case C16 is
// redacted, and what holds no secret is kept.
func TestEchoFormsInABody(t *testing.T) {
	slashU := strings.ReplaceAll(strings.ReplaceAll(echoToken, "/", `\u002f`), "+", `\u002B`)
	tests := []struct {
		name, body, want string
	}{
		{"prefix )]}'", ")]}'\n{\"auth\":\"Bearer " + slashU + "\"}", ")]}'\n{\"auth\":\"[REDACTED]\"}"},
		{"byte order mark", "\ufeff{\"auth\":\"Bearer " + slashU + "\"}", "\ufeff{\"auth\":\"[REDACTED]\"}"},
		{"JSONP", `cb({"auth":"Bearer ` + slashU + `","n":1});`, `cb({"auth":"[REDACTED]","n":1});`},
		{"a syntax error before the echo", `{"a": x, "auth":"Bearer ` + slashU + `"}`, `{"a": x, "auth":"[REDACTED]"}`},
		{"a syntax error inside an object before the echo", `{"a":{"b" 1}, "c":["Bearer ` + slashU + `"]}`,
			`{"a":{"b" 1}, "c":["[REDACTED]"]}`},
		{"JSON inside a JSON string", `{"body":"{\"auth\":\"Bearer ` + strings.ReplaceAll(slashU, `\`, `\\`) + `\"}"}`,
			`{"body":"{\"auth\":\"[REDACTED]\"}"}`},
		{"JSON inside a JSON string inside a JSON string",
			`{"o":"{\"body\":\"{\\\"auth\\\":\\\"Bearer ` + strings.ReplaceAll(slashU, `\`, `\\\\`) + `\\\"}\"}"}`, ""},
		{"every character escaped, lower case", `{"auth":"` + uEscapeAll("Bearer "+echoToken, false) + `"}`, `{"auth":"[REDACTED]"}`},
		{"every character escaped, upper case", `{"auth":"` + uEscapeAll(echoToken, true) + `"}`, `{"auth":"[REDACTED]"}`},
		{"\\u002B only", `{"t":"` + strings.ReplaceAll(echoToken, "+", `\u002B`) + `"}`, `{"t":"[REDACTED]"}`},
		{"JSON in HTML", `<script>var s = {"auth":"Bearer ` + slashU + `"};</script>`, `<script>var s = {"auth":"[REDACTED]"};</script>`},
		{"escapes in text", `the header was Bearer ` + slashU + `, rejected`, `the header was [REDACTED], rejected`},
		{"a JavaScript string", `cb('Bearer ` + strings.ReplaceAll(echoToken, "/", `\x2f`) + `')`, `cb('[REDACTED]')`},
		{"a JSON string at the top, after text", `error: "Bearer ` + slashU + `"`, `error: "[REDACTED]"`},
		{"HTML character references", `<p>Bearer ` + strings.ReplaceAll(strings.ReplaceAll(echoToken, "/", "&#x2F;"), "+", "&#43;") + `</p>`,
			`<p>[REDACTED]</p>`},
		{"a surrogate pair next to the echo", `{"a":"\ud83d\ude00` + slashU + `"}`, `{"a":"😀[REDACTED]"}`},
		{"no secret: kept as sent", ")]}'\n{\"a\":\"\\u002f\",\"b\":\"x&amp;y\"}", ")]}'\n{\"a\":\"\\u002f\",\"b\":\"x&amp;y\"}"},
	}
	r := echoRedactor()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := r.View(&httpexec.Response{StatusCode: 200, Body: []byte(tc.body)})
			assertNoToken(t, string(v.Body))
			if tc.want != "" && string(v.Body) != tc.want {
				t.Errorf("body %q, want %q", v.Body, tc.want)
			}
		})
	}
}

// TestEchoFormsInAHeader: \u escapes, \/ and character references in a header value (and split across two
// values of one header) are decoded before the search.
func TestEchoFormsInAHeader(t *testing.T) {
	r := echoRedactor()
	slashU := strings.ReplaceAll(echoToken, "/", `\u002F`)
	for _, tc := range []struct {
		name string
		vs   []string
		want []string
	}{
		{"\\u escapes", []string{"Bearer " + slashU}, []string{Redacted}},
		{"quoted with \\/", []string{`"` + strings.ReplaceAll(echoToken, "/", `\/`) + `"; x=1`}, []string{`"[REDACTED]"; x=1`}},
		{"a character reference", []string{"t=" + strings.ReplaceAll(echoToken, "/", "&#47;")}, []string{"t=[REDACTED]"}},
		{"split across values", []string{"Bearer tok-ab\\u002f", "cd+9Zq7Lw"}, []string{Redacted, Redacted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := r.View(&httpexec.Response{Header: http.Header{"X-Echo": tc.vs}})
			got := v.Header.Values("X-Echo")
			for _, g := range got {
				assertNoToken(t, g)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("X-Echo %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEchoCutInsideAnEscape: a cut body whose end is inside an escaped echo keeps no part of it.
func TestEchoCutInsideAnEscape(t *testing.T) {
	r := echoRedactor()
	body := `{"pad":"` + strings.Repeat(".", 64) + `","auth":"` + uEscapeAll("Bearer "+echoToken, false) + `"}`
	for cut := 70; cut < len(body); cut++ {
		v := r.View(&httpexec.Response{Body: []byte(body[:cut]), BodyTruncated: true})
		assertNoToken(t, string(v.Body))
	}
}

// TestJSONStartsAreBounded: a body of many '{' is decoded at no more than maxJSONStarts places; an echo
// after them is still found through its escapes.
func TestJSONStartsAreBounded(t *testing.T) {
	r := echoRedactor()
	body := strings.Repeat(`{{"a" `, 20000) + `"Bearer ` + strings.ReplaceAll(echoToken, "/", `\u002f`) + `"`
	v := r.View(&httpexec.Response{Body: []byte(body)})
	assertNoToken(t, string(v.Body))
	if !strings.HasSuffix(string(v.Body), `"[REDACTED]"`) {
		t.Errorf("body ends %q", string(v.Body)[len(v.Body)-40:])
	}
}

func TestUnescapeMapsBack(t *testing.T) {
	for _, tc := range []struct{ in, text string }{
		{`a\u002fb`, "a/b"},
		{`\ud83d\ude00x`, "😀x"},
		{`\ud83dx`, "\ufffdx"},
		{`&#x2F;&#47;&amp;&bogus;&#xZZ;`, "//&&bogus;&#xZZ;"},
		{`\x2f\q\u12`, `/\q\u12`},
	} {
		u, ok := unescape(tc.in)
		if !ok || u.text != tc.text || len(u.at) != len(u.text)+1 || u.at[len(u.text)] != len(tc.in) {
			t.Errorf("unescape(%q) = %q, %v (at %v); want %q", tc.in, u.text, ok, u.at, tc.text)
		}
	}
	if _, ok := unescape("plain & simple"); ok {
		t.Error("unescape found an escape in plain text")
	}
}

// BenchmarkViewLargeBody measures the view of a 256 KiB body (the most the executor keeps, for outputs) in the
// shapes that cost the most: escapes decoded three levels deep, many JSON starts, plain JSON.
func BenchmarkViewLargeBody(b *testing.B) {
	const size = 256 << 10
	for _, tc := range []struct{ name, unit string }{
		{"nested-backslashes", `\\\\\\\\u002f`},
		{"u-escapes", `\u0041`},
		{"json-starts", `{{"a" `},
		{"json", `{"k":"v\/w","n":12},`},
	} {
		body := []byte(strings.Repeat(tc.unit, size/len(tc.unit)))
		r := echoRedactor()
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_ = r.View(&httpexec.Response{Body: body})
			}
		})
	}
}
