package httpexec

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestJoinURL(t *testing.T) {
	const base = "https://api.example/tenant-a"
	for _, tc := range []struct {
		name, base, path, want string
		refused                bool
	}{
		{name: "plain", path: "/charges", want: base + "/charges"},
		{name: "empty path is the base with a slash", path: "", want: base + "/"},
		{name: "root", path: "/", want: base + "/"},
		{name: "missing leading slash is added", path: "orders/1", want: base + "/orders/1"},
		{name: "trailing slash on the base", base: base + "/", path: "/x", want: base + "/x"},
		{name: "no base path", base: "http://127.0.0.1:8080", path: "/x/y", want: "http://127.0.0.1:8080/x/y"},
		{name: "fragment after the query", path: "/search?q=a#x", refused: true},
		{name: "query kept verbatim", path: "/search?q=../b&x=%2e%2e&y=a+b", want: base + "/search?q=../b&x=%2e%2e&y=a+b"},
		{name: "empty query kept", path: "/x?", want: base + "/x?"},
		{name: "escaped data kept escaped", path: "/a%20b/c%3Fd", want: base + "/a%20b/c%3Fd"},
		{name: "dots inside a name are data", path: "/v1.2/file..txt/.well-known/...", want: base + "/v1.2/file..txt/.well-known/..."},
		{name: "double slash stays a path", path: "//evil.example/x", want: base + "//evil.example/x"},
		{name: "double slash with no base path keeps the host", base: "http://h.example", path: "//evil.example/x", want: "http://h.example//evil.example/x"},
		{name: "userinfo kept", //nolint:gosec // G101: a test URL, no credential
			base: "http://u:p@h.example/b", path: "/x", want: "http://u:p@h.example/b/x"},

		{name: "dot-dot", path: "/../admin", refused: true},
		{name: "dot-dot in the middle", path: "/x/../../admin", refused: true},
		{name: "dot", path: "/./x", refused: true},
		{name: "trailing dot-dot", path: "/x/..", refused: true},
		{name: "encoded dot-dot lower", path: "/%2e%2e/admin", refused: true},
		{name: "encoded dot-dot upper", path: "/%2E%2E/admin", refused: true},
		{name: "half encoded", path: "/.%2e/admin", refused: true},
		{name: "encoded dot", path: "/%2e/x", refused: true},
		{name: "double encoded", path: "/%252e%252e/admin", refused: true},
		{name: "triple encoded", path: "/%25252e%25252e/admin", refused: true},
		{name: "encoded slash", path: "/x%2fy", refused: true},
		{name: "encoded slash upper", path: "/x%2Fy", refused: true},
		{name: "dot-dot behind an encoded slash", path: "/..%2fadmin", refused: true},
		{name: "encoded backslash", path: "/x%5cy", refused: true},
		{name: "raw backslash", path: `/..\admin`, refused: true},
		{name: "backslash alone", path: `/a\b`, refused: true},
		{name: "path parameter dot-dot", path: "/..;x/admin", refused: true},
		{name: "encoded path parameter dot-dot", path: "/%2e%2e;/admin", refused: true},
		{name: "fragment", path: "/x#frag", refused: true},
		{name: "invalid escape", path: "/x%zz", refused: true},
		{name: "encoded NUL", path: "/x%00", refused: true},
		{name: "raw control character", path: "/x\ny", refused: true},
		{name: "string prefix is not segment prefix", base: "https://api.example/tenant-a", path: "b/x", want: base + "/b/x"},

		{name: "base with dot-dot", base: "https://api.example/a/../b", path: "/x", refused: true},
		{name: "base with a query", base: "https://api.example/a?x=1", path: "/x", refused: true},
		{name: "base not absolute", base: "/relative", path: "/x", refused: true},
		{name: "base other scheme", base: "file:///etc", path: "/passwd", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.base
			if b == "" {
				b = base
			}
			got, err := JoinURL(b, tc.path)
			if tc.refused {
				if err == nil {
					t.Fatalf("JoinURL(%q, %q) = %q, want an error", b, tc.path, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("JoinURL(%q, %q): %v", b, tc.path, err)
			}
			if got != tc.want {
				t.Fatalf("JoinURL(%q, %q) = %q, want %q", b, tc.path, got, tc.want)
			}
			assertUnder(t, b, tc.path, got)
		})
	}
}

// The refusals for a request path say why and wrap ErrPathOutsideBase (the controller maps it to a reason).
func TestJoinURLRefusalNamesTheCause(t *testing.T) {
	for path, want := range map[string]string{
		"/%2e%2e/admin": `".." segment`,
		"/x%2fy":        "encoded",
		`/a\b`:          "backslash",
		"/x#y":          "fragment",
	} {
		_, err := JoinURL("https://api.example/tenant-a", path)
		if !errors.Is(err, ErrPathOutsideBase) || !strings.Contains(err.Error(), want) {
			t.Errorf("JoinURL(%q): err = %v, want ErrPathOutsideBase mentioning %q", path, err, want)
		}
	}
}

// A post-check path filled with escaped values may carry an encoded "/" inside a segment, never a dot segment.
func TestJoinURLEscapedValues(t *testing.T) {
	const base = "http://127.0.0.1:1/tenant-a"
	for path, ok := range map[string]bool{
		"/orders/ns%2Fname":        true,
		"/orders?key=ns%2Fname":    true,
		"/orders/..%2F..%2Fadmin":  false,
		"/orders/a%2F..":           false,
		"/orders/a%5C..%5Cadmin":   false,
		"/orders/%2e%2e":           false,
		"/orders/x/../../admin":    false,
		"/orders/%252e%252e%252fx": false,
	} {
		got, err := JoinURLEscapedValues(base, path)
		if ok != (err == nil) {
			t.Errorf("JoinURLEscapedValues(%q) = %q, %v; want ok=%v", path, got, err, ok)
		}
		if err == nil && !strings.HasPrefix(got, base+"/") {
			t.Errorf("JoinURLEscapedValues(%q) = %q, not under %q", path, got, base)
		}
	}
	if _, err := JoinURL(base, "/orders/ns%2Fname"); err == nil {
		t.Error("JoinURL accepted an encoded slash that only JoinURLEscapedValues allows")
	}
}

// Under compares segments, not strings: "/tenant-ab" is not under "/tenant-a".
func TestUnderIsSegmentWise(t *testing.T) {
	for target, ok := range map[string]bool{
		"https://api.example/tenant-a":             true,
		"https://api.example/tenant-a/":            true,
		"https://api.example/tenant-a/x":           true,
		"https://api.example/tenant-ab":            false,
		"https://api.example/tenant-ab/x":          false,
		"https://api.example/tenant-a/../admin":    false,
		"https://api.example/tenant-a/%2e%2e/x":    false,
		"https://other.example/tenant-a/x":         false,
		"http://api.example/tenant-a/x":            false,
		"https://u@api.example/tenant-a/x":         false,
		"https://api.example/tenant-a/x/../y":      true,
		"https://api.example/tenant-a/x/../../y/z": false,
	} {
		err := Under("https://api.example/tenant-a", target)
		if ok != (err == nil) {
			t.Errorf("Under(%q) = %v, want ok=%v", target, err, ok)
		}
	}
}

// FuzzJoinURL asserts the invariant: JoinURL returns an error, or a URL on the base's scheme, user and host
// whose path is the base path, a "/", and segments no decoding round turns into a dot segment or a separator,
// with the query passed through unchanged.
func FuzzJoinURL(f *testing.F) {
	for _, s := range []string{
		"/", "", "/x", "/../admin", "/%2e%2e/admin", "/%2E%2E/admin", "/.%2e/x", "/%252e%252e/x", "/x%2fy",
		"/..%2f..%2fadmin", `/..\admin`, "/..;/admin", "//evil.example/x", "/a?b=../c", "/a#b", "/%zz",
		"/tenant-ab", "b/../x", "/x/./y", "/%2e", "/a/%2e%2e%3f", "/é/%C3%A9",
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
		f.Add(s, uint8(2))
	}
	bases := []string{"https://api.example/tenant-a", "http://127.0.0.1:8080", "http://h.example/a/b/"}
	f.Fuzz(func(t *testing.T, path string, which uint8) {
		base := bases[int(which)%len(bases)]
		for _, lenient := range []bool{false, true} {
			var got string
			var err error
			if lenient {
				got, err = JoinURLEscapedValues(base, path)
			} else {
				got, err = JoinURL(base, path)
			}
			if err != nil {
				continue
			}
			assertUnderMode(t, base, path, got, lenient)
		}
	})
}

func assertUnder(t *testing.T, base, path, got string) {
	t.Helper()
	assertUnderMode(t, base, path, got, false)
}

// assertUnderMode checks the join invariant on got independently of join's own code.
func assertUnderMode(t *testing.T, base, path, got string, lenient bool) {
	t.Helper()
	b, _ := url.Parse(base)
	u, err := url.Parse(got)
	if err != nil {
		t.Fatalf("join(%q, %q) = %q, which does not parse: %v", base, path, got, err)
	}
	if u.Scheme != b.Scheme || u.Host != b.Host || u.User.String() != b.User.String() || u.Fragment != "" {
		t.Fatalf("join(%q, %q) = %q leaves the base's origin", base, path, got)
	}
	prefix := strings.TrimSuffix(b.EscapedPath(), "/") + "/"
	ep := u.EscapedPath()
	if !strings.HasPrefix(ep, prefix) {
		t.Fatalf("join(%q, %q) = %q: path %q does not start with %q", base, path, got, ep, prefix)
	}
	for seg := range strings.SplitSeq(ep, "/") {
		cur := seg
		for range 4 {
			for _, part := range strings.FieldsFunc(cur, func(r rune) bool { return r == '/' || r == '\\' }) {
				if p, _, _ := strings.Cut(part, ";"); p == "." || p == ".." {
					t.Fatalf("join(%q, %q) = %q: segment %q decodes to a dot segment", base, path, got, seg)
				}
			}
			if !lenient && cur != seg && strings.ContainsAny(cur, `/\`) {
				t.Fatalf("join(%q, %q) = %q: segment %q decodes to a separator", base, path, got, seg)
			}
			next, err := url.PathUnescape(cur)
			if err != nil || next == cur {
				break
			}
			cur = next
		}
	}
	if _, q, ok := strings.Cut(path, "?"); ok && u.RawQuery != q {
		t.Fatalf("join(%q, %q) = %q: query %q, want %q unchanged", base, path, got, u.RawQuery, q)
	}
}
