package redact

import (
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Redacted replaces every Secret value found in what the controller stores or emits (DESIGN rule 11).
const Redacted = "[REDACTED]"

// MinSecretLength is the shortest Secret value a destination may send, in bytes (after trimming spaces). A
// shorter value could not be redacted without shredding ordinary text ("42" would be replaced in every
// body), so such a value is refused and the destination is not used (see docs/security.md). A Basic
// username is the exception: it is redacted when it has at least MinSecretLength bytes and accepted, not
// redacted, when shorter.
const MinSecretLength = 4

// Redactor replaces the Secret values of one destination with Redacted. It is pure and safe for concurrent
// use; the zero value (and nil) redacts nothing.
type Redactor struct {
	// secrets are the Secret values as given (distinct, at least MinSecretLength bytes long).
	secrets []string
	// values are the secrets and their encoded forms (encodedForms), distinct, at least MinSecretLength bytes
	// long, longest first: what is searched for.
	values []string
	// expose is what View shows of a response (Exposing); nil shows the whole response.
	expose *Exposure
}

// New returns a redactor for values; values shorter than MinSecretLength are ignored (the caller
// refuses those it must not send) and duplicates are dropped. Each value is searched for as it is and in
// the encoded forms a destination may echo it in (encodedForms).
func New(values ...string) *Redactor {
	var secrets, vs []string
	for _, v := range values {
		if len(v) < MinSecretLength || slices.Contains(secrets, v) {
			continue
		}
		secrets = append(secrets, v)
		for _, f := range encodedForms(v) {
			if len(f) >= MinSecretLength && !slices.Contains(vs, f) {
				vs = append(vs, f)
			}
		}
	}
	slices.SortStableFunc(vs, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return &Redactor{secrets: secrets, values: vs}
}

// With returns a redactor for r's values plus values, with r's exposure (r itself is not changed).
func (r *Redactor) With(values ...string) *Redactor {
	if r == nil {
		return New(values...)
	}
	out := New(append(append([]string(nil), r.secrets...), values...)...)
	out.expose = r.expose
	return out
}

// Empty reports whether r redacts nothing (nil, or no value of MinSecretLength bytes).
func (r *Redactor) Empty() bool { return r == nil || len(r.values) == 0 }

// Longest is the length of the longest value or encoded form, in bytes (0 without values).
func (r *Redactor) Longest() int {
	if r == nil || len(r.values) == 0 {
		return 0
	}
	return len(r.values[0])
}

// String returns s with every occurrence of every value replaced by Redacted. Overlapping or adjacent
// occurrences (of one value or of several) become one Redacted, so no fragment of either is left.
func (r *Redactor) String(s string) string {
	out, _ := r.cut(s, -1, false)
	return out
}

// Body returns at most limit bytes of body with every value replaced by Redacted, cut on a UTF-8 boundary,
// and whether the result is not the whole body. more says that body is itself a prefix of a longer body
// (the executor stopped reading): a value may then straddle the end, so the caller should pass at least
// limit+longest() bytes when it has them, and any tail of the result that is a prefix of a value is
// dropped, so a value cut at the boundary leaves no part of itself behind.
func (r *Redactor) Body(body []byte, limit int, more bool) (string, bool) {
	return r.cut(string(body), limit, more)
}

// cut redacts s, then cuts the result to limit bytes (limit < 0: no cut).
func (r *Redactor) cut(s string, limit int, more bool) (string, bool) {
	if r != nil && len(r.values) > 0 {
		s = replaceSpans(s, r.allSpans(s))
	}
	return r.cutRedacted(s, limit, more)
}

// cutRedacted cuts s, already redacted, to limit bytes (limit < 0: no cut) and drops a tail that is a prefix
// of a value when the result is not the whole text (Body).
func (r *Redactor) cutRedacted(s string, limit int, more bool) (string, bool) {
	truncated := more
	if limit >= 0 && len(s) > limit {
		s, truncated = CutUTF8(s, limit), true
	}
	if truncated && r != nil {
		s = r.dropPartialTail(s, limit)
	}
	return s, truncated
}

type span struct{ start, end int }

// spans are the merged byte ranges of s covered by an occurrence of any value, in order.
func (r *Redactor) spans(s string) []span {
	return mergeSpans(r.occurrences(s, nil))
}

// allSpans are spans, and the spans that hold an occurrence once unescaped (escapedSpans), merged.
func (r *Redactor) allSpans(s string) []span {
	return mergeSpans(append(r.occurrences(s, nil), r.escapedSpans(s)...))
}

// occurrences appends to all the byte range of every occurrence of every value in s, unordered.
func (r *Redactor) occurrences(s string, all []span) []span {
	for _, v := range r.values {
		for i := 0; i+len(v) <= len(s); {
			j := strings.Index(s[i:], v)
			if j < 0 {
				break
			}
			all = append(all, span{i + j, i + j + len(v)})
			i += j + 1
		}
	}
	return all
}

// mergeSpans sorts all and merges the spans that overlap or touch.
func mergeSpans(all []span) []span {
	if len(all) == 0 {
		return nil
	}
	slices.SortFunc(all, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	merged := all[:1]
	for _, sp := range all[1:] {
		last := &merged[len(merged)-1]
		if sp.start <= last.end {
			last.end = max(last.end, sp.end)
			continue
		}
		merged = append(merged, sp)
	}
	return merged
}

func replaceSpans(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	pos := 0
	for _, sp := range spans {
		b.WriteString(s[pos:sp.start])
		b.WriteString(Redacted)
		pos = sp.end
	}
	b.WriteString(s[pos:])
	return b.String()
}

// dropPartialTail removes the longest tail of s that is a proper prefix of a value (a value cut at the end).
// A tail of MinSecretLength bytes or more is replaced by Redacted when that fits in limit (limit < 0: no
// bound); otherwise, and for a shorter tail, it is dropped silently.
func (r *Redactor) dropPartialTail(s string, limit int) string {
	cutAt := len(s)
	for _, v := range r.values {
		for k := min(len(v)-1, len(s)); k > 0; k-- {
			if strings.HasSuffix(s, v[:k]) {
				cutAt = min(cutAt, len(s)-k)
				break
			}
		}
	}
	if cutAt == len(s) {
		return s
	}
	if len(s)-cutAt >= MinSecretLength && (limit < 0 || cutAt+len(Redacted) <= limit) {
		return s[:cutAt] + Redacted
	}
	return s[:cutAt]
}

// CutUTF8 returns at most n bytes of s, cut so that no UTF-8 sequence is split (stepping back at most
// utf8.UTFMax-1 bytes; text that is not UTF-8 is cut at n).
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n]
}
