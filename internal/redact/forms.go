package redact

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
)

// encodedForms are the forms in which a destination may echo the Secret value v, v itself first: JSON string
// escapes (as encoding/json writes them, and with "/" written "\/"), percent-encoding (query and path
// escaping, and every byte escaped, each with upper and lower case hex digits), hex (upper and lower case),
// and base64 and base64url with and without padding, also where v is a part of a longer encoded text (the
// characters that encode v alone, at each of the three byte alignments). Forms of a decoded text (a JSON
// string value, a query parameter) are handled where the text is decoded (View).
func encodedForms(v string) []string {
	forms := []string{v}
	if b, err := json.Marshal(v); err == nil {
		esc := string(b[1 : len(b)-1])
		forms = append(forms, esc, strings.ReplaceAll(esc, "/", `\/`))
	}
	every := percentEveryByte(v)
	for _, p := range []string{url.QueryEscape(v), url.PathEscape(v), every} {
		forms = append(forms, p, lowerPercentHex(p))
	}
	h := hex.EncodeToString([]byte(v))
	forms = append(forms, h, strings.ToUpper(h))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		forms = append(forms, enc.EncodeToString([]byte(v)))
		forms = append(forms, base64Cores(enc.WithPadding(base64.NoPadding), v)...)
	}
	return forms
}

// base64Cores are, for each byte offset k in 0..2 of v inside a longer text, the characters of the
// unpadded encoding enc that depend on bytes of v only (the characters at either end that share bits with
// the neighbouring bytes are left out). At offset 0 with len(v) a multiple of 3 that is the whole encoding.
func base64Cores(enc *base64.Encoding, v string) []string {
	var cores []string
	for k := range 3 {
		e := enc.EncodeToString(append(make([]byte, k), v...))
		first := (8*k + 5) / 6       // the first character whose 6 bits all come from v
		last := 8 * (k + len(v)) / 6 // one past the last such character
		if last <= len(e) && last-first >= MinSecretLength {
			cores = append(cores, e[first:last])
		}
	}
	return cores
}

// percentEveryByte is v with every byte percent-encoded ("%74%6F%6B"), upper case hex.
func percentEveryByte(v string) string {
	var b strings.Builder
	for _, c := range []byte(v) {
		b.WriteByte('%')
		b.WriteString(strings.ToUpper(hex.EncodeToString([]byte{c})))
	}
	return b.String()
}

// lowerPercentHex is s with the hex digits of every percent-escape ("%2F") in lower case ("%2f").
func lowerPercentHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerASCII(b[i+1]), lowerASCII(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// hidesSecret reports whether s, percent-decoded (as a query or as a path, by net/url), still holds a Secret
// value: an escape the encoded forms do not list (mixed case hex, some characters escaped and others not).
// Text that is not valid percent-encoding is taken as it is (false).
func (r *Redactor) hidesSecret(s string) bool {
	if r.Empty() || !strings.ContainsRune(s, '%') && !strings.ContainsRune(s, '+') {
		return false
	}
	for _, unescape := range []func(string) (string, error){url.QueryUnescape, url.PathUnescape} {
		if d, err := unescape(s); err == nil && d != s && len(r.spans(d)) > 0 {
			return true
		}
	}
	return false
}
