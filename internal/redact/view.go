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
// (status.response), outputs, successWhen, post-check records, errors, conditions and Events all take the
// response from it, never from the httpexec.Response (DESIGN rule 11). A decision over a Secret value
// therefore sees only Redacted and cannot be used to learn it. A view of a shared destination with an Exposure
// (Redactor.Exposing) holds only the exposed parts, so none of those consumers can see the rest; WholeView is
// the view of the destination's own admin (its post-check expressions).
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
	// httpexec.Response.BodySHA256; empty in a view whose exposure does not expose the whole body.
	BodySHA256 string
	// RetryAfter is the redacted Retry-After header, whatever the exposure: the manager schedules the next
	// attempt by it (DESIGN rule 5), and that time is in status anyway.
	RetryAfter string
	// Limited: the view holds only what the destination's exposure exposes (Redactor.Exposing), so a
	// header or a part of the body that an expression misses may be there and not exposed.
	Limited bool

	red *Redactor
}

// View returns the redacted view of resp (nil for nil) that the namespace of the action may read: with r's
// exposure (Exposing), the status code, the exposed headers and the exposed parts of the body only; without
// one, the whole response (WholeView). resp is not changed.
func (r *Redactor) View(resp *httpexec.Response) *View {
	v := r.WholeView(resp)
	if v == nil || r == nil || r.expose == nil {
		return v
	}
	return v.exposed(r.expose)
}

// WholeView returns the redacted view of the whole of resp (nil for nil), whatever r's exposure: for the
// destination's admin only (a ClusterDestination's reconciliation.applied and notApplied), never for what a
// tenant reads. resp is not changed.
func (r *Redactor) WholeView(resp *httpexec.Response) *View {
	if resp == nil {
		return nil
	}
	h := r.header(resp.Header)
	return &View{
		StatusCode:    resp.StatusCode,
		Header:        h,
		Body:          []byte(r.body(resp.Body, resp.BodyTruncated)),
		BodyTruncated: resp.BodyTruncated,
		BodySHA256:    resp.BodySHA256,
		RetryAfter:    h.Get("Retry-After"),
		red:           r,
	}
}

// NotExposed is the note added to the error of a tenant's expression (successWhen, outputs) evaluated on v
// when v holds only the exposed parts of the response (Limited), since what the expression missed may be in
// the response and not exposed; "" for a view of the whole response.
func (v *View) NotExposed() string {
	if v == nil || !v.Limited {
		return ""
	}
	return " (the ClusterDestination lets the namespaces that use it read only the status code and the headers and " +
		"body parts its spec.response.expose lists; ask its admin to expose what the expression reads)"
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

// Text returns s with every Secret value, in any of its encoded forms, replaced by Redacted, also where s
// writes it with JSON, JavaScript or HTML escapes (unescape: each escape that is part of a value is replaced
// with it); a text that still holds one once percent-decoded is replaced whole.
func (r *Redactor) Text(s string) string {
	if r.Empty() {
		return s
	}
	out := replaceSpans(s, r.allSpans(s))
	if r.hidesSecret(out) {
		return Redacted
	}
	return out
}

// body redacts a response body: the JSON in it value by value after decoding (jsonValues), wherever it
// stands, then every body as text (Text's forms and escapes). more says the body is a prefix of a longer one
// (the executor stopped reading): its last Longest()-1 bytes are then dropped whatever they hold, so that a
// Secret value cut at the end leaves no part of itself and the kept text does not depend on whether it ends in
// the beginning of one (dropping only a matching tail would let a destination that echoes the request confirm
// a guessed prefix, one per action).
func (r *Redactor) body(b []byte, more bool) string {
	if r.Empty() {
		return string(b)
	}
	s := r.jsonValues(string(b), maxJSONDepth)
	s = replaceSpans(s, r.allSpans(s))
	if more {
		s = CutUTF8(s, max(len(s)-(r.Longest()-1), 0))
	}
	if r.hidesSecret(s) {
		return Redacted
	}
	return s
}

const (
	// maxJSONDepth is how deep JSON inside a JSON string is decoded value by value (a JSON text in a string of
	// a JSON text in a string: 2); deeper, the escapes are still decoded (unescape).
	maxJSONDepth = 2
	// maxJSONStarts bounds the places of one text where decoding JSON is tried (jsonValues), so that a body
	// of many '{' costs no more than a few decodes; the escapes of the rest are still decoded (unescape).
	maxJSONStarts = 32
)

// jsonValues decodes the JSON in s wherever it stands (after a prefix such as ")]}'" or a byte order mark,
// inside JSONP "cb(...)", after a syntax error) as streams of JSON tokens (encoding/json), each starting at a
// '{', a '[' or a '"' and ending at the first syntax error, and replaces each string (key or value) and
// number whose decoded text holds a Secret value by its redacted text (value: JSON in the string decoded too,
// depth levels deep), re-encoded as a JSON string; the rest of s is kept byte for byte. At most maxJSONStarts
// places are tried.
func (r *Redactor) jsonValues(s string, depth int) string {
	var out strings.Builder
	pos := 0 // s[:pos] is in out
	for from, starts := 0, 0; from < len(s) && starts < maxJSONStarts; starts++ {
		i := strings.IndexAny(s[from:], `{["`)
		if i < 0 {
			break
		}
		i += from
		from = max(r.jsonStream(s, i, depth, &out, &pos), i+1)
	}
	if pos == 0 {
		return s
	}
	out.WriteString(s[pos:])
	return out.String()
}

// jsonStream decodes s from i as a stream of JSON tokens until the first error, writing s[*pos:] up to each
// value it replaces, and the replacement, to out. It returns the offset where the last token read ended.
func (r *Redactor) jsonStream(s string, i, depth int, out *strings.Builder, pos *int) int {
	dec := json.NewDecoder(strings.NewReader(s[i:]))
	dec.UseNumber()
	end := i
	for {
		before := i + int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return end
		}
		end = i + int(dec.InputOffset())
		var text string
		switch t := tok.(type) {
		case string:
			text = t
		case json.Number:
			text = string(t)
		default:
			continue
		}
		red := r.value(text, depth)
		if red == text {
			continue
		}
		k := strings.IndexAny(s[before:end], `"-0123456789`) // a string or number token starts so
		if k < 0 {
			continue // not reached; Text still redacts the token's bytes
		}
		out.WriteString(s[*pos : before+k])
		out.WriteString(jsonString(red))
		*pos = end
	}
}

// value redacts a decoded JSON string or number: the JSON in it value by value (depth levels deep), then as
// text (Text).
func (r *Redactor) value(text string, depth int) string {
	if depth > 1 && strings.ContainsAny(text, `{[`) {
		text = r.jsonValues(text, depth-1)
	}
	return r.Text(text)
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
	spans := r.allSpans(strings.Join(vs, ""))
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
