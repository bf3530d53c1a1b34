package redact

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/actionledger/actionledger/internal/httpexec"
)

// View is the one redacted view of a destination's response, made once per response (Redactor.View): status
// (status.response), outputs, successWhen, post-check expressions, errors, conditions and Events all take
// the response from it, never from the httpexec.Response (DESIGN rule 11). A decision over a Secret value
// therefore sees only Redacted and cannot be used to learn it.
type View struct {
	// StatusCode is the response's HTTP status code.
	StatusCode int
	// Header is every response header, under its canonical name (names that differ only in case merged, in
	// the order of their names), each value redacted; a value split across repeated values of one header is
	// redacted in each part; a Location's query is redacted parameter by parameter, decoded.
	Header http.Header
	// Body is the body as the executor kept it (bytes), redacted: a JSON body value by value after decoding
	// (keys and strings, and numbers whose digits hold a value), every body in the encoded forms as well.
	Body []byte
	// BodyTruncated: Body is not the whole body (the executor kept only its beginning).
	BodyTruncated bool
	// BodySHA256 is "sha256:" + hex of the body as the destination sent it (before redaction), as
	// httpexec.Response.BodySHA256.
	BodySHA256 string

	red *Redactor
}

// View returns the redacted view of resp (nil for nil). resp is not changed.
func (r *Redactor) View(resp *httpexec.Response) *View {
	if resp == nil {
		return nil
	}
	return &View{
		StatusCode:    resp.StatusCode,
		Header:        r.header(resp.Header),
		Body:          []byte(r.body(resp.Body, resp.BodyTruncated)),
		BodyTruncated: resp.BodyTruncated,
		BodySHA256:    resp.BodySHA256,
		red:           r,
	}
}

// Cut returns at most limit bytes of the redacted body, cut on a UTF-8 boundary, and whether that is not the
// whole body. Body holds no part of a Secret value (body), so the cut needs no redaction of its own, and
// what it keeps does not depend on the Secret values.
func (v *View) Cut(limit int) (string, bool) {
	if len(v.Body) <= limit {
		return string(v.Body), v.BodyTruncated
	}
	return CutUTF8(string(v.Body), limit), true
}

// Text returns s with every Secret value, in any of its encoded forms, replaced by Redacted; a text that
// still holds one once percent-decoded is replaced whole.
func (r *Redactor) Text(s string) string {
	if r.Empty() {
		return s
	}
	out := replaceSpans(s, r.spans(s))
	if r.hidesSecret(out) {
		return Redacted
	}
	return out
}

// body redacts a response body: a JSON body value by value after decoding (jsonValues), then every body as
// text. more says the body is a prefix of a longer one (the executor stopped reading): its last Longest()-1
// bytes are then dropped whatever they hold, so that a Secret value cut at the end leaves no part of itself
// and the kept text does not depend on whether it ends in the beginning of one (dropping only a matching
// tail would let a destination that echoes the request confirm a guessed prefix, one per action).
func (r *Redactor) body(b []byte, more bool) string {
	if r.Empty() {
		return string(b)
	}
	s := string(b)
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[' || t[0] == '"') {
		s = r.jsonValues(s)
	}
	s = replaceSpans(s, r.spans(s))
	if more {
		s = CutUTF8(s, max(len(s)-(r.Longest()-1), 0))
	}
	if r.hidesSecret(s) {
		return Redacted
	}
	return s
}

// jsonValues decodes s as a stream of JSON tokens (encoding/json) and replaces each string (key or value)
// and number whose decoded text holds a Secret value by its redacted text, re-encoded as a JSON string; the
// rest of s is kept byte for byte. Decoding stops at the first syntax error (a body cut by the executor): the
// rest is left to the text redaction.
func (r *Redactor) jsonValues(s string) string {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var out strings.Builder
	pos := 0
	for {
		before := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			break
		}
		var text string
		switch t := tok.(type) {
		case string:
			text = t
		case json.Number:
			text = string(t)
		default:
			continue
		}
		red := r.Text(text)
		if red == text {
			continue
		}
		after := int(dec.InputOffset())
		i := strings.IndexAny(s[before:after], `"-0123456789`)
		if i < 0 { // not reached (a string or number token starts with one of these): redact it all
			return Redacted
		}
		start := before + i
		out.WriteString(s[pos:start])
		out.WriteString(jsonString(red))
		pos = after
	}
	if pos == 0 {
		return s
	}
	out.WriteString(s[pos:])
	return out.String()
}

// jsonString is s as a JSON string literal, without HTML escaping.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// header redacts every value of h into a new header under canonical names (View.Header).
func (r *Redactor) header(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		ck := http.CanonicalHeaderKey(k)
		out[ck] = append(out[ck], h[k]...)
	}
	if r.Empty() {
		return out
	}
	for k, vs := range out {
		red := make([]string, len(vs))
		for i, v := range vs {
			if k == "Location" || k == "Content-Location" {
				red[i] = r.location(v)
			} else {
				red[i] = r.Text(v)
			}
		}
		out[k] = r.acrossValues(red)
	}
	return out
}

// acrossValues redacts a Secret value split across the repeated values vs of one header: the parts of each
// value that belong to an occurrence in their concatenation are replaced by Redacted.
func (r *Redactor) acrossValues(vs []string) []string {
	if len(vs) < 2 {
		return vs
	}
	spans := r.spans(strings.Join(vs, ""))
	if len(spans) == 0 {
		return vs
	}
	out := make([]string, len(vs))
	off := 0
	for i, v := range vs {
		var local []span
		for _, sp := range spans {
			if start, end := max(sp.start-off, 0), min(sp.end-off, len(v)); start < end {
				local = append(local, span{start, end})
			}
		}
		out[i] = replaceSpans(v, local)
		off += len(v)
	}
	return out
}

// location redacts a URL (Location, Content-Location): each query parameter's name and value decoded
// (net/url) and redacted, written back with Redacted as it is; the rest as text (Text).
func (r *Redactor) location(v string) string {
	base, rest, ok := strings.Cut(v, "?")
	if !ok {
		return r.Text(v)
	}
	query, frag, hasFrag := strings.Cut(rest, "#")
	parts := strings.Split(query, "&")
	for i, p := range parts {
		name, value, hasValue := strings.Cut(p, "=")
		parts[i] = r.queryPart(name)
		if hasValue {
			parts[i] += "=" + r.queryPart(value)
		}
	}
	out := r.Text(base) + "?" + strings.Join(parts, "&")
	if hasFrag {
		out += "#" + r.Text(frag)
	}
	return out
}

// queryPart redacts one escaped query name or value: decoded, redacted and escaped again when it held a
// Secret value (Redacted itself left unescaped), otherwise as text.
func (r *Redactor) queryPart(raw string) string {
	d, err := url.QueryUnescape(raw)
	if err != nil {
		return r.Text(raw)
	}
	red := r.Text(d)
	if red == d {
		return r.Text(raw)
	}
	return strings.ReplaceAll(url.QueryEscape(red), url.QueryEscape(Redacted), Redacted)
}
