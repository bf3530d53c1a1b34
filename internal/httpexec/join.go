package httpexec

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// ErrPathOutsideBase marks a request path that could leave the destination's base path: a "." or ".."
// segment in any spelling, or a segment separator hidden inside a segment. Nothing may be sent for it.
var ErrPathOutsideBase = errors.New("path outside the base URL")

// maxDecodeRounds bounds the percent-decoding rounds a segment is checked under: a destination (or a proxy in
// front of it) that decodes twice still sees no dot segment in "%252e%252e".
const maxDecodeRounds = 3

// JoinURL appends path (an action's request.path: "/seg/seg?query", empty means "/", a missing leading "/" is
// added) to base (an absolute http or https URL, the destination's spec.url) and returns the URL to send to.
//
// The result is always under base, compared segment by segment (base "/tenant-a" admits "/tenant-a/x", never
// "/tenant-ab"), or an error wrapping ErrPathOutsideBase is returned and nothing may be sent. Refused, in base
// and path: a segment that is "." or ".." (RFC 3986 section 3.3) after up to three rounds of percent-decoding
// ("%2e", "%2E", "%252e"), also before a ";" parameter ("..;x", which some servers resolve as ".."); a segment
// holding "/" or "\" in any encoding ("%2f", "%5c", a raw backslash, which some servers read as "/"); control
// characters; and a "#" fragment. The result is then parsed again and its path, with dot segments removed as
// RFC 3986 section 5.2.4 does, checked to still start with base's segments. The query (after the first "?") is
// passed through unchanged; base must have none of its own.
func JoinURL(base, path string) (string, error) {
	return join(base, path, false)
}

// JoinURLEscapedValues is JoinURL for a path whose placeholders were filled with URL-escaped values (a
// reconciliation post-check path with {key}): a "%2F" or "%5C" inside a segment is accepted there, since an
// escaped key such as "ns%2Fname" is one segment to the destination, but no part of a decoded segment split
// at "/" or "\" may be "." or "..": "..%2F..%2Fadmin" is refused as JoinURL refuses it.
func JoinURLEscapedValues(base, path string) (string, error) {
	return join(base, path, true)
}

func join(base, path string, allowEncodedSeparators bool) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("base url %q does not parse: %w", base, err)
	}
	if (b.Scheme != "http" && b.Scheme != "https") || b.Host == "" || b.Opaque != "" {
		return "", fmt.Errorf("base url %q is not an absolute http or https URL", base)
	}
	if b.RawQuery != "" || b.ForceQuery || b.Fragment != "" {
		return "", fmt.Errorf("base url %q may not have a query or fragment: put them in the action's path", base)
	}
	baseRaw := strings.TrimSuffix(b.EscapedPath(), "/")
	if err := checkSegments(baseRaw, false); err != nil {
		return "", fmt.Errorf("base url %q: %w", base, err)
	}

	rawPath, query, hasQuery := strings.Cut(path, "?")
	if strings.Contains(path, "#") {
		return "", fmt.Errorf("%w: path %q has a \"#\" fragment, which is never sent; escape it as %%23 if it is data",
			ErrPathOutsideBase, path)
	}
	if !strings.HasPrefix(rawPath, "/") {
		rawPath = "/" + rawPath
	}
	if err := checkSegments(rawPath, allowEncodedSeparators); err != nil {
		return "", fmt.Errorf("path %q: %w", path, err)
	}
	// Built as a string from the escaped parts, so that the client sends exactly the checked segments.
	out := (&url.URL{Scheme: b.Scheme, User: b.User, Host: b.Host}).String() + baseRaw + rawPath
	if hasQuery {
		out += "?" + query
	}

	// Check the result as the HTTP client will read it, independently of how it was built.
	if err := Under(base, out); err != nil {
		return "", err
	}
	return out, nil
}

// Under reports, as an error wrapping ErrPathOutsideBase, whether target is not under base: another scheme,
// user or host, or a path whose segments (percent-decoded, dot segments removed per RFC 3986 section 5.2.4) do
// not start with base's segments. It is the invariant JoinURL guarantees.
func Under(base, target string) error {
	b, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("base url %q does not parse: %w", base, err)
	}
	t, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("%w: joined url %q does not parse: %v", ErrPathOutsideBase, target, err)
	}
	if t.Scheme != b.Scheme || t.Host != b.Host || t.User.String() != b.User.String() || t.Opaque != "" {
		return fmt.Errorf("%w: joined url %q leaves %s://%s", ErrPathOutsideBase, target, b.Scheme, b.Host)
	}
	bs, ts := resolvedSegments(b.EscapedPath()), resolvedSegments(t.EscapedPath())
	if len(bs) > 0 && bs[len(bs)-1] == "" {
		bs = bs[:len(bs)-1] // a trailing "/" on the base adds no segment to stay under
	}
	if len(ts) < len(bs) || !slices.Equal(ts[:len(bs)], bs) {
		return fmt.Errorf("%w: joined url %q resolves to path %q, which is not under the base path %q",
			ErrPathOutsideBase, target, "/"+strings.Join(ts, "/"), b.Path)
	}
	return nil
}

// resolvedSegments splits an escaped path into percent-decoded segments with "." and ".." removed as RFC 3986
// section 5.2.4 does (a ".." at the root stays at the root). A segment that does not decode stays escaped.
func resolvedSegments(escaped string) []string {
	escaped = strings.TrimPrefix(escaped, "/")
	if escaped == "" {
		return nil
	}
	var out []string
	for s := range strings.SplitSeq(escaped, "/") {
		if d, err := url.PathUnescape(s); err == nil {
			s = d
		}
		switch s {
		case ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, s)
		}
	}
	return out
}

// checkSegments refuses any segment of the escaped path p that is, or decodes to, a dot segment or hides a
// separator (see JoinURL). allowEncodedSeparators accepts "%2F" and "%5C" when no part they separate is a dot
// segment.
func checkSegments(p string, allowEncodedSeparators bool) error {
	for seg := range strings.SplitSeq(strings.TrimPrefix(p, "/"), "/") {
		if strings.Contains(seg, `\`) {
			return fmt.Errorf("%w: segment %q has a backslash, which some servers read as \"/\"", ErrPathOutsideBase, seg)
		}
		cur := seg
		for round := 0; round <= maxDecodeRounds; round++ {
			if err := checkDecoded(seg, cur, round, allowEncodedSeparators); err != nil {
				return err
			}
			next, err := url.PathUnescape(cur)
			if err != nil {
				if round == 0 {
					return fmt.Errorf("%w: segment %q has an invalid percent-encoding", ErrPathOutsideBase, seg)
				}
				break // a literal "%" after a decoding round is data, not an escape
			}
			if next == cur {
				break
			}
			cur = next
		}
	}
	return nil
}

// checkDecoded checks one decoding round (round 0 is the segment as written) of seg.
func checkDecoded(seg, cur string, round int, allowEncodedSeparators bool) error {
	for _, c := range cur {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: segment %q has a control character", ErrPathOutsideBase, seg)
		}
	}
	if round > 0 && strings.ContainsAny(cur, `/\`) && !allowEncodedSeparators {
		return fmt.Errorf("%w: segment %q has an encoded \"/\" or \"\\\" (%%2F, %%5C), which some servers decode "+
			"into a separator; it is refused", ErrPathOutsideBase, seg)
	}
	for _, part := range strings.FieldsFunc(cur, func(r rune) bool { return r == '/' || r == '\\' }) {
		if isDot(part) {
			return fmt.Errorf("%w: segment %q is a %q segment (RFC 3986 section 3.3) once decoded; a path may not "+
				"climb out of the destination's base path", ErrPathOutsideBase, seg, dotName(part))
		}
	}
	return nil
}

// isDot reports whether s is "." or "..", also with a ";parameter" suffix.
func isDot(s string) bool {
	s, _, _ = strings.Cut(s, ";")
	return s == "." || s == ".."
}

func dotName(s string) string {
	s, _, _ = strings.Cut(s, ";")
	return s
}
