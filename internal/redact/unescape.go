package redact

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxUnescapeLevels is how many times a text is unescaped in turn (unescaped): a JSON text inside a JSON
// string inside a JSON string has its Secret value escaped three times ("\\\\u002f").
const maxUnescapeLevels = 3

// unescaped is a text decoded from another, src, with the offset in src where the source of each of its
// bytes begins: the bytes of one escape all begin at the escape, and at[len(text)] is len(src). A span of text
// [a, b) so comes from src[at[a]:at[b]].
type unescaped struct {
	text string
	at   []int
}

// srcSpan is the span of the source that sp of u.text was decoded from.
func (u unescaped) srcSpan(sp span) span { return span{u.at[sp.start], u.at[sp.end]} }

// unescape decodes in s every escape that a JSON or JavaScript string, or HTML, writes a character with,
// wherever it stands (inside a string or not, in a body or a header value): \" \\ \/ \b \f \n \r \t, \uXXXX
// (a surrogate pair as one character), \xHH, and the character references &#NN; &#xHH; &amp; &lt; &gt; &quot;
// &apos;. Anything else is kept as it is. ok is false when s holds no such escape.
func unescape(s string) (u unescaped, ok bool) {
	if !strings.ContainsAny(s, `\&`) {
		return unescaped{}, false
	}
	var b strings.Builder
	at := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		r, n := escapeAt(s, i)
		if n == 0 {
			b.WriteByte(s[i])
			at = append(at, i)
			i++
			continue
		}
		ok = true
		var enc [utf8.UTFMax]byte
		m := utf8.EncodeRune(enc[:], r)
		b.Write(enc[:m])
		for range m {
			at = append(at, i)
		}
		i += n
	}
	if !ok {
		return unescaped{}, false
	}
	return unescaped{text: b.String(), at: append(at, len(s))}, true
}

// escapeAt decodes the escape that begins at s[i], if any: the character and the escape's length (0: none).
func escapeAt(s string, i int) (rune, int) {
	switch s[i] {
	case '\\':
		return backslashEscape(s, i)
	case '&':
		return charReference(s, i)
	}
	return 0, 0
}

// simpleEscapes are the one-character escapes of JSON (RFC 8259 section 7), and \' of JavaScript.
var simpleEscapes = map[byte]rune{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', '\'': '\''}

func backslashEscape(s string, i int) (rune, int) {
	if i+1 >= len(s) {
		return 0, 0
	}
	if r, ok := simpleEscapes[s[i+1]]; ok {
		return r, 2
	}
	switch s[i+1] {
	case 'u':
		r, ok := hexRune(s, i+2, 4)
		if !ok {
			return 0, 0
		}
		if utf16.IsSurrogate(r) {
			if i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
				if lo, ok := hexRune(s, i+8, 4); ok {
					if pair := utf16.DecodeRune(r, lo); pair != utf8.RuneError {
						return pair, 12
					}
				}
			}
			return utf8.RuneError, 6
		}
		return r, 6
	case 'x':
		if r, ok := hexRune(s, i+2, 2); ok {
			return r, 4
		}
	}
	return 0, 0
}

// hexRune reads n hex digits of s at i.
func hexRune(s string, i, n int) (rune, bool) {
	if i+n > len(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s[i:i+n], 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true //nolint:gosec // G115: at most 4 hex digits
}

// namedReferences are the HTML character references a destination escapes text with (html.EscapeString and
// its like).
var namedReferences = map[string]rune{"amp": '&', "lt": '<', "gt": '>', "quot": '"', "apos": '\'', "sol": '/', "plus": '+', "equals": '='}

// maxReference is the length of the longest character reference decoded ("&#x10FFFF;").
const maxReference = 10

func charReference(s string, i int) (rune, int) {
	end := strings.IndexByte(s[i+1:min(len(s), i+maxReference+1)], ';')
	if end < 0 {
		return 0, 0
	}
	name := s[i+1 : i+1+end]
	n := end + 2
	if r, ok := namedReferences[name]; ok {
		return r, n
	}
	if len(name) < 2 || name[0] != '#' {
		return 0, 0
	}
	base, digits := 10, name[1:]
	if digits[0] == 'x' || digits[0] == 'X' {
		base, digits = 16, digits[1:]
	}
	v, err := strconv.ParseUint(digits, base, 32)
	if err != nil || v > utf8.MaxRune {
		return 0, 0
	}
	return rune(v), n
}

// escapedSpans are the spans of s that encode an occurrence of a value once s is unescaped, once or up to
// maxUnescapeLevels times in turn, each mapped back to the bytes of s it was decoded from.
func (r *Redactor) escapedSpans(s string) []span {
	var out []span
	u, ok := unescape(s)
	for level := 0; ok; level++ {
		for _, sp := range r.spans(u.text) {
			out = append(out, u.srcSpan(sp))
		}
		if level+1 == maxUnescapeLevels {
			break
		}
		var next unescaped
		if next, ok = unescape(u.text); ok {
			for k, a := range next.at {
				next.at[k] = u.at[a] // compose: an offset in u.text to one in s
			}
			u = next
		}
	}
	return out
}
