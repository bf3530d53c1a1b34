package httpexec_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/redact"
)

// token is the platform's credential a shared destination echoes (C16).
const token = "tok-7Qx/9fK2+mZ8wLr4Vb6N" //nolint:gosec // G101: a test value

// compress returns b in the coding named (a Content-Encoding list is applied left to right). "deflate-raw" is
// a raw deflate stream sent as "deflate", as some servers do.
func compress(t testing.TB, coding string, b []byte) []byte {
	t.Helper()
	for c := range strings.SplitSeq(coding, ",") {
		var buf bytes.Buffer
		var w io.WriteCloser
		var err error
		switch strings.TrimSpace(c) {
		case "gzip", "x-gzip", "GZIP":
			w = gzip.NewWriter(&buf)
		case "deflate":
			w = zlib.NewWriter(&buf)
		case "deflate-raw":
			w, err = flate.NewWriter(&buf, flate.DefaultCompression)
		case "br":
			w = brotli.NewWriter(&buf)
		case "zstd":
			w, err = zstd.NewWriter(&buf)
		default:
			t.Fatalf("no coding %q", c)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b = buf.Bytes()
	}
	return b
}

// wireCoding is the Content-Encoding header a test coding is sent under.
func wireCoding(coding string) string {
	return strings.ReplaceAll(coding, "deflate-raw", "deflate")
}

// echoBody is what the echoing destination answers: the request's Authorization and X-Guess headers as JSON.
func echoBody(r *http.Request) []byte {
	b, _ := json.Marshal(map[string]string{"auth": r.Header.Get("Authorization"), "guess": r.Header.Get("X-Guess")})
	return b
}

// echoServer answers every request with echoBody compressed in the coding of the query's "ce" parameter,
// whatever the request's Accept-Encoding, with the compressed length as Content-Length. It records the
// Accept-Encoding and TE headers it received.
func echoServer(t *testing.T) (*httptest.Server, *atomic.Value) {
	t.Helper()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store([2][]string{r.Header.Values("Accept-Encoding"), r.Header.Values("Te")})
		body := echoBody(r)
		if ce := r.URL.Query().Get("ce"); ce != "" {
			body = compress(t, ce, body)
			w.Header().Set("Content-Encoding", wireCoding(ce))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func executor(opts ...httpexec.Option) *httpexec.HTTPExecutor {
	allow := egress.New(egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	return httpexec.New(append([]httpexec.Option{httpexec.WithEgressPolicy(allow)}, opts...)...)
}

// send sends one POST with the platform's token and guess to url and returns the response.
func send(t *testing.T, e *httpexec.HTTPExecutor, target, guess string, extra http.Header) *httpexec.Response {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + token}, "X-Guess": {guess}}
	maps.Copy(h, extra)
	res := e.Execute(context.Background(), httpexec.Request{
		Method: http.MethodPost, URL: target, Header: h, Body: []byte(`{}`), Timeout: 10 * time.Second,
	}, 4096)
	if res.Err != nil {
		t.Fatalf("Execute: %v", res.Err)
	}
	return res.Response
}

// secretForms are forms of the token that must not be readable anywhere in a view.
func secretForms() []string {
	esc, _ := json.Marshal(token)
	return []string{
		token, strings.Trim(string(esc), `"`), strings.ReplaceAll(token, "/", `\u002f`),
		base64.StdEncoding.EncodeToString([]byte(token)), hex.EncodeToString([]byte(token)),
	}
}

func TestCompressedEchoIsDecodedThenRedacted(t *testing.T) {
	srv, got := echoServer(t)
	e := executor()
	red := redact.New(token, "Bearer "+token)
	for _, coding := range []string{"gzip", "x-gzip", "GZIP", "deflate", "deflate-raw", "br", "zstd", "gzip, br"} {
		t.Run(coding, func(t *testing.T) {
			// The tenant's Accept-Encoding and TE (refused at admission; an object stored before that rule) are
			// replaced: the server is asked for the identity coding only.
			resp := send(t, e, srv.URL+"/?ce="+url.QueryEscape(coding), "x", http.Header{"Accept-Encoding": {"gzip"}, "Te": {"trailers"}})
			if h := got.Load().([2][]string); len(h[0]) != 1 || h[0][0] != "identity" || len(h[1]) != 0 {
				t.Errorf("server saw Accept-Encoding %q, TE %q; want identity and no TE", h[0], h[1])
			}
			want := `{"auth":"Bearer ` + token + `","guess":"x"}`
			if string(resp.Body) != want {
				t.Errorf("Body = %q, want the decoded echo %q", resp.Body, want)
			}
			if resp.Decoded == "" || resp.BodyTruncated || resp.BodyErr != nil {
				t.Errorf("Decoded %q, BodyTruncated %v, BodyErr %v; want decoded whole", resp.Decoded, resp.BodyTruncated, resp.BodyErr)
			}
			if resp.BodySHA256 != sum([]byte(want)) || resp.BodyLength != int64(len(want)) {
				t.Errorf("BodySHA256 %s, BodyLength %d: want those of the decoded body", resp.BodySHA256, resp.BodyLength)
			}
			for _, name := range []string{"Content-Encoding", "Content-Length"} {
				if v := resp.Header.Values(name); len(v) > 0 {
					t.Errorf("%s: %q kept; the body is decoded, and a compressed length is an oracle", name, v)
				}
			}
			view := red.View(resp)
			for _, f := range secretForms() {
				if bytes.Contains(view.Body, []byte(f)) {
					t.Errorf("redacted body %q holds the token as %q", view.Body, f)
				}
			}
			if !bytes.Contains(view.Body, []byte(redact.Redacted)) {
				t.Errorf("redacted body %q: the echo was not found", view.Body)
			}
		})
	}
}

// TestCompressedLengthIsNoOracle: a guess that shares a prefix with the token compresses better (BREACH), so
// the length as received differs with the guess; what a tenant can see (the view's body and headers) does not.
func TestCompressedLengthIsNoOracle(t *testing.T) {
	srv, _ := echoServer(t)
	e := executor()
	red := redact.New(token, "Bearer "+token)
	right := "Bearer " + token[:12] + "zzzzzzzz" // the first 12 characters guessed right
	wrong := "Bearer " + "QQQQQQQQQQQQ" + "zzzzzzzz"
	for _, coding := range []string{"gzip", "deflate", "br", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			wire := func(guess string) int {
				r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/", nil)
				r.Header.Set("Authorization", "Bearer "+token)
				r.Header.Set("X-Guess", guess)
				return len(compress(t, coding, echoBody(r)))
			}
			if wire(right) >= wire(wrong) {
				t.Skipf("%s does not compress the right guess better here (%d >= %d bytes): no oracle to hide",
					coding, wire(right), wire(wrong))
			}
			seen := map[string]bool{}
			for _, guess := range []string{right, wrong} {
				v := red.View(send(t, e, srv.URL+"/?ce="+coding, guess, nil))
				seen[strconv.Itoa(len(v.Body))+"/"+strings.Join(v.Header.Values("Content-Length"), ",")] = true
			}
			if len(seen) != 1 {
				t.Errorf("body length / Content-Length a tenant sees differ with the guess: %v", seen)
			}
		})
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// bombServer answers with an endless body of zeros in coding: the same compressed member of 1 MiB of zeros
// written again and again (gzip members and zstd frames may follow each other), up to 1 TiB, until the client
// goes away. It counts the members written.
func bombServer(t *testing.T, coding string, written *atomic.Int64) *httptest.Server {
	t.Helper()
	member := compress(t, coding, make([]byte, 1<<20))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", coding)
		for range 1 << 20 {
			if _, err := w.Write(member); err != nil {
				return
			}
			written.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestDecompressionBombStopsAtTheReadLimit: 1 TiB of zeros, about 1 KiB compressed per MiB, is decoded only up
// to the read limit; the attempt ends there, not at its timeout.
func TestDecompressionBombStopsAtTheReadLimit(t *testing.T) {
	const limit = 4 << 20
	for _, coding := range []string{"gzip", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			var written atomic.Int64
			srv := bombServer(t, coding, &written)
			e := executor(httpexec.WithMaxReadBytes(limit))
			res := e.Execute(context.Background(), httpexec.Request{URL: srv.URL, Timeout: time.Minute}, 4096)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			r := res.Response
			if r.BodyLength != limit || !r.BodyTruncated || r.BodyErr != nil || len(r.Body) != 4096 {
				t.Errorf("BodyLength %d (want %d), BodyTruncated %v, BodyErr %v, kept %d bytes (want 4096)",
					r.BodyLength, limit, r.BodyTruncated, r.BodyErr, len(r.Body))
			}
			if w := written.Load(); w >= 1<<20 {
				t.Errorf("the server wrote all %d members: the body was read to its end", w)
			}
		})
	}
}

// BenchmarkDecompressionBomb measures what reading a gzip bomb costs up to the default read limit (16 MiB
// decoded): B/op is what the executor allocates for it.
func BenchmarkDecompressionBomb(b *testing.B) {
	var written atomic.Int64
	member := compress(b, "gzip", make([]byte, 1<<20))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		for range 1 << 20 {
			if _, err := w.Write(member); err != nil {
				return
			}
			written.Add(1)
		}
	}))
	defer srv.Close()
	e := executor()
	b.ReportAllocs()
	for b.Loop() {
		res := e.Execute(context.Background(), httpexec.Request{URL: srv.URL, Timeout: time.Minute}, 4096)
		if res.Err != nil || res.Response.BodyLength != httpexec.DefaultMaxReadBytes {
			b.Fatalf("err %v, BodyLength %d", res.Err, res.Response.BodyLength)
		}
	}
}

// rawServer answers 201 with body as it is, under the Content-Encoding given.
func rawServer(t *testing.T, ce string, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", ce)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestUndecodableBodyIsNotKept: a coding the executor does not know, too many codings, or a body that is not
// in the coding named: the response stands (status code, headers), the body is the marker, hashed as received,
// and BodyErr has ClassContentEncoding. A body that decodes part way keeps what decoded.
func TestUndecodableBodyIsNotKept(t *testing.T) {
	echo := []byte(`{"auth":"Bearer ` + token + `"}`)
	gz := compress(t, "gzip", echo)
	tests := []struct {
		name, ce string
		body     []byte
		wantBody string
	}{
		{"unknown coding", "compress", echo, httpexec.UndecodedBody},
		{"unknown coding after a known one", "gzip, compress", gz, httpexec.UndecodedBody},
		{"three codings", "gzip, gzip, gzip", compress(t, "gzip,gzip,gzip", echo), httpexec.UndecodedBody},
		{"not gzip", "gzip", echo, httpexec.UndecodedBody},
		{"not zstd", "zstd", echo, httpexec.UndecodedBody},
		{"gzip cut short", "gzip", gz[:len(gz)-12], string(echo)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := rawServer(t, tt.ce, tt.body)
			res := executor().Execute(context.Background(), httpexec.Request{URL: srv.URL, Timeout: 10 * time.Second}, 4096)
			if res.Err != nil || !res.Written {
				t.Fatalf("Err %v, Written %v: the request was sent and answered", res.Err, res.Written)
			}
			r := res.Response
			if r.StatusCode != http.StatusCreated {
				t.Errorf("StatusCode = %d, want 201", r.StatusCode)
			}
			var xerr *httpexec.Error
			if !errors.As(r.BodyErr, &xerr) || xerr.Class != httpexec.ClassContentEncoding {
				t.Errorf("BodyErr = %v, want class %s", r.BodyErr, httpexec.ClassContentEncoding)
			}
			if undecoded := tt.wantBody == httpexec.UndecodedBody; undecoded && string(r.Body) != tt.wantBody ||
				!undecoded && (!strings.HasPrefix(tt.wantBody, string(r.Body)) || len(r.Body) == 0) {
				t.Errorf("Body = %q, want %q", r.Body, tt.wantBody)
			}
			if !r.BodyTruncated || len(r.Header.Values("Content-Length")) > 0 {
				t.Errorf("BodyTruncated %v, Content-Length %q: want truncated, no length as received", r.BodyTruncated, r.Header.Values("Content-Length"))
			}
			if tt.wantBody == httpexec.UndecodedBody && (r.BodySHA256 != sum(tt.body) || r.BodyLength != int64(len(tt.body))) {
				t.Errorf("BodySHA256 %s, BodyLength %d: want those of the body as received", r.BodySHA256, r.BodyLength)
			}
		})
	}
}

// TestEmptyBodyInACoding: a 204 (or a HEAD answer) may name a coding and have no body: nothing to decode.
func TestEmptyBodyInACoding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	res := executor().Execute(context.Background(), httpexec.Request{URL: srv.URL, Timeout: 10 * time.Second}, 4096)
	if res.Err != nil || res.Response.BodyErr != nil || len(res.Response.Body) != 0 || res.Response.BodyTruncated {
		t.Fatalf("Err %v, BodyErr %v, Body %q, truncated %v", res.Err, res.Response.BodyErr, res.Response.Body, res.Response.BodyTruncated)
	}
}
