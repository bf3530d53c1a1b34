package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Exposure is what a shared destination lets the namespaces that send to it read of its responses (a
// ClusterDestination's spec.response.expose): the status code always, the headers named in Headers and the
// parts of a JSON body that the pointers in Body point at. A nil *Exposure exposes the whole response (a
// namespaced Destination, or a ClusterDestination stored before the field existed).
type Exposure struct {
	// Headers are header names, compared case-insensitively. A name in NeverExposed is never exposed, whatever
	// the list says.
	Headers []string
	// Body are JSON Pointers (RFC 6901) into the body; "" is the whole body, as it is.
	Body []string
}

// NeverExposed are the response headers an Exposure never shows, in canonical form: each carries a session or
// a credential that a destination issued for the credentials it was sent (RFC 6265 Set-Cookie, RFC 2965
// Set-Cookie2, RFC 7615 Authentication-Info and Proxy-Authentication-Info, and the request's own Cookie,
// Authorization and Proxy-Authorization where a destination echoes them). The API server refuses them in
// spec.response.expose.headers already; this list holds the line for whatever reaches the manager anyway.
var NeverExposed = []string{"Set-Cookie", "Set-Cookie2", "Cookie", "Authorization", "Proxy-Authorization",
	"Authentication-Info", "Proxy-Authentication-Info"}

// Exposing returns a redactor for r's values whose views (View) show only what e exposes; nil e shows the whole
// response. r itself is not changed.
func (r *Redactor) Exposing(e *Exposure) *Redactor {
	out := &Redactor{}
	if r != nil {
		*out = *r
	}
	out.expose = e
	return out
}

// exposed returns what of v the exposure e lets a tenant read: the status code, the headers e names (except
// NeverExposed) and the body made of the values at e's pointers (exposedBody), redacted as text once more,
// since re-encoding writes the values anew. Retry-After is kept (View.RetryAfter). BodySHA256 and BodyTruncated
// are kept only when the whole body is exposed ("" in e.Body).
func (v *View) exposed(e *Exposure) *View {
	out := &View{StatusCode: v.StatusCode, Header: http.Header{}, RetryAfter: v.RetryAfter, Limited: true, red: v.red}
	for _, name := range e.Headers {
		ck := http.CanonicalHeaderKey(name)
		if vs, ok := v.Header[ck]; ok && !slices.Contains(NeverExposed, ck) {
			out.Header[ck] = vs
		}
	}
	if slices.Contains(e.Body, "") {
		out.Body, out.BodyTruncated, out.BodySHA256 = v.Body, v.BodyTruncated, v.BodySHA256
		return out
	}
	if v.BodyTruncated {
		return out // not one whole JSON value
	}
	if b := exposedBody(v.Body, e.Body); b != nil {
		out.Body = []byte(v.red.body(b, false))
	}
	return out
}

// exposedBody returns the JSON text made of the values of body at pointers, each at its place (an object keeps
// only the exposed members; an array keeps the exposed elements at their indices, with null before them), or
// nil when body is not one whole JSON value or no pointer is found in it. Numbers keep their text
// (json.Number); the text is written without HTML escaping.
func exposedBody(body []byte, pointers []string) []byte {
	if len(pointers) == 0 {
		return nil
	}
	doc, ok := decodeOne(body)
	if !ok {
		return nil
	}
	var out any
	found := false
	for _, p := range pointers {
		tokens, ok := parsePointer(p)
		if !ok {
			continue
		}
		if v, ok := lookup(doc, tokens); ok {
			out, found = place(out, doc, tokens, v), true
		}
	}
	if !found {
		return nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil // not reached: out is made of decoded JSON values
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// decodeOne decodes body as exactly one JSON value (surrounding white space allowed), numbers as json.Number.
func decodeOne(body []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return doc, true
}

// parsePointer splits a JSON Pointer (RFC 6901 section 3) into its reference tokens, unescaped ("~1" is '/',
// "~0" is '~'). "" has no tokens; a pointer that does not start with '/' or holds a '~' not followed by '0' or
// '1' is not a pointer.
func parsePointer(p string) ([]string, bool) {
	if p == "" {
		return nil, true
	}
	if p[0] != '/' {
		return nil, false
	}
	tokens := strings.Split(p[1:], "/")
	for i, t := range tokens {
		if strings.Count(t, "~") != strings.Count(t, "~0")+strings.Count(t, "~1") {
			return nil, false
		}
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return tokens, true
}

// index is the array index a reference token names (RFC 6901 section 4: "0" or digits without a leading zero),
// if it is below n.
func index(token string, n int) (int, bool) {
	if token == "" || (len(token) > 1 && token[0] == '0') || strings.Trim(token, "0123456789") != "" {
		return 0, false
	}
	i, err := strconv.Atoi(token)
	return i, err == nil && i < n
}

// lookup evaluates a parsed JSON Pointer on doc (RFC 6901 section 4).
func lookup(doc any, tokens []string) (any, bool) {
	for _, t := range tokens {
		switch d := doc.(type) {
		case map[string]any:
			v, ok := d[t]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, ok := index(t, len(d))
			if !ok {
				return nil, false
			}
			doc = d[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// place puts v into dst at tokens, where src is the document the tokens were looked up in (lookup found them),
// and returns dst: the containers on the way are made after src's (an object, or an array grown with null).
func place(dst, src any, tokens []string, v any) any {
	if len(tokens) == 0 {
		return v
	}
	t, rest := tokens[0], tokens[1:]
	switch s := src.(type) {
	case map[string]any:
		d, ok := dst.(map[string]any)
		if !ok {
			d = map[string]any{}
		}
		d[t] = place(d[t], s[t], rest, v)
		return d
	case []any:
		i, _ := index(t, len(s))
		d, _ := dst.([]any)
		for len(d) <= i {
			d = append(d, nil)
		}
		d[i] = place(d[i], s[i], rest, v)
		return d
	default:
		return v // not reached: lookup found the tokens in src
	}
}
