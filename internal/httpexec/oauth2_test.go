package httpexec

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actionledger/actionledger/internal/egress"
)

const (
	testClientID     = "orders-client"
	testClientSecret = "cs-8d1f2e7a90b4" //nolint:gosec // G101: a test credential
)

// tokenServer is an OAuth2 token endpoint (RFC 6749 section 4.4) on loopback: it checks the client's Basic
// credentials and the grant, answers "tok-<n>" for the n-th request with expires_in, and keeps every form.
type tokenServer struct {
	*httptest.Server
	requests  atomic.Int32
	expiresIn atomic.Int32
	status    atomic.Int32 // when non-zero, every answer is this status with an invalid_client error
	mu        sync.Mutex
	forms     []url.Values
}

func newTokenServer(t *testing.T, tlsServer bool) *tokenServer {
	t.Helper()
	ts := &tokenServer{}
	ts.expiresIn.Store(3600)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := ts.requests.Add(1)
		_ = r.ParseForm()
		ts.mu.Lock()
		ts.forms = append(ts.forms, r.PostForm)
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		id, secret, ok := r.BasicAuth()
		if code := ts.status.Load(); code != 0 || !ok || id != testClientID || secret != testClientSecret ||
			r.PostForm.Get("grant_type") != "client_credentials" {
			if code == 0 {
				code = http.StatusUnauthorized
			}
			w.WriteHeader(int(code))
			_, _ = fmt.Fprintf(w, `{"error":"invalid_client","error_description":"client authentication failed","echo":%q}`, secret)
			return
		}
		_, _ = fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":%d}`, n, ts.expiresIn.Load())
	})
	if tlsServer {
		ts.Server = httptest.NewTLSServer(h)
	} else {
		ts.Server = httptest.NewServer(h)
	}
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) creds() ClientCredentials {
	return ClientCredentials{TokenURL: ts.URL + "/oauth2/token", ClientID: testClientID, ClientSecret: testClientSecret}
}

func (ts *tokenServer) form(i int) url.Values {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.forms[i]
}

func mustToken(t *testing.T, c *TokenCache, owner string, cc ClientCredentials) string {
	t.Helper()
	tok, err := c.Token(context.Background(), owner, cc)
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return tok
}

// One token per owner and credential: reused across calls, fetched again for another credential or owner,
// with the grant's scope and parameters in the form.
func TestTokenCachedPerOwnerAndCredential(t *testing.T) {
	ts := newTokenServer(t, false)
	c := NewTokenCache(newExecutor(t).TokenClient)
	cc := ts.creds()
	cc.Scopes = []string{"orders:write", "orders:read"}
	cc.EndpointParams = url.Values{"audience": {"https://api.example"}, "resource": {"urn:orders"}}
	for range 3 {
		if tok := mustToken(t, c, "Destination/a/pay", cc); tok != "tok-1" {
			t.Fatalf("token %q, want the cached tok-1", tok)
		}
	}
	if n := ts.requests.Load(); n != 1 {
		t.Fatalf("%d token requests for three calls, want 1", n)
	}
	f := ts.form(0)
	if f.Get("scope") != "orders:write orders:read" || f.Get("audience") != "https://api.example" || f.Get("resource") != "urn:orders" {
		t.Errorf("token request form %v: want scope, audience and resource", f)
	}
	if tok := mustToken(t, c, "Destination/b/pay", cc); tok != "tok-2" {
		t.Errorf("another owner got %q, want its own token tok-2", tok)
	}
	cc.Scopes = []string{"orders:read"}
	if tok := mustToken(t, c, "Destination/a/pay", cc); tok != "tok-3" {
		t.Errorf("a changed credential got %q, want a new token tok-3", tok)
	}
}

// A token is replaced once it is within the early expiry of its expires_in: expires_in 2s with an early expiry
// of 1s keeps it for one second.
func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	ts := newTokenServer(t, false)
	ts.expiresIn.Store(2)
	c := NewTokenCache(newExecutor(t).TokenClient, WithTokenEarlyExpiry(time.Second))
	start := time.Now()
	if tok := mustToken(t, c, "d", ts.creds()); tok != "tok-1" {
		t.Fatalf("first token %q", tok)
	}
	if tok := mustToken(t, c, "d", ts.creds()); time.Since(start) < 900*time.Millisecond && (tok != "tok-1" || ts.requests.Load() != 1) {
		t.Fatalf("second call got %q after %d requests, want the cached tok-1", tok, ts.requests.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for mustToken(t, c, "d", ts.creds()) == "tok-1" {
		if time.Now().After(deadline) {
			t.Fatal("the token was not refreshed within 5s of an expiry 2s away")
		}
		time.Sleep(50 * time.Millisecond) // polling for the refresh, as Eventually would
	}
	if waited := time.Since(start); waited < 900*time.Millisecond {
		t.Errorf("refreshed after %s, want about 1s (expires_in 2s minus the 1s early expiry)", waited)
	}
	if n := ts.requests.Load(); n != 2 {
		t.Errorf("%d token requests, want 2", n)
	}
}

// Invalidate drops the token the destination refused; a stale Invalidate (the token was already replaced)
// keeps the new one.
func TestTokenInvalidate(t *testing.T) {
	ts := newTokenServer(t, false)
	c := NewTokenCache(newExecutor(t).TokenClient)
	first := mustToken(t, c, "d", ts.creds())
	c.Invalidate("d", first)
	second := mustToken(t, c, "d", ts.creds())
	if second == first {
		t.Fatalf("after Invalidate the same token %q came back", first)
	}
	c.Invalidate("d", first) // late 401 of a request that carried the old token
	if tok := mustToken(t, c, "d", ts.creds()); tok != second || ts.requests.Load() != 2 {
		t.Errorf("after a stale Invalidate: %q with %d requests, want %q with 2", tok, ts.requests.Load(), second)
	}
}

// A refusal by the token endpoint is an ErrTokenUnavailable whose text gives the status and the OAuth error
// code, never the secret or the body (which here echoes the secret).
func TestTokenEndpointRefusal(t *testing.T) {
	ts := newTokenServer(t, false)
	c := NewTokenCache(newExecutor(t).TokenClient)
	cc := ts.creds()
	cc.ClientSecret = "cs-wrong-5e6f7a8b" //nolint:gosec // G101: a test credential
	_, err := c.Token(context.Background(), "d", cc)
	if !errors.Is(err, ErrTokenUnavailable) {
		t.Fatalf("err = %v, want ErrTokenUnavailable", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "HTTP 401") || !strings.Contains(msg, "invalid_client") {
		t.Errorf("message %q: want the status and the OAuth error code", msg)
	}
	if strings.Contains(msg, cc.ClientSecret) || strings.Contains(msg, ts.URL) || strings.Contains(msg, "echo") {
		t.Errorf("message %q leaks the secret, the URL or the body", msg)
	}

	ts.status.Store(http.StatusServiceUnavailable)
	if _, err := c.Token(context.Background(), "d", ts.creds()); !errors.Is(err, ErrTokenUnavailable) || !strings.Contains(err.Error(), "HTTP 503") ||
		!strings.Contains(err.Error(), "down or limiting") {
		t.Errorf("err = %v, want ErrTokenUnavailable with HTTP 503, saying the endpoint is down", err)
	}
	ts.Close()
	if _, err := c.Token(context.Background(), "d", ts.creds()); !errors.Is(err, ErrTokenUnavailable) {
		t.Errorf("closed endpoint: err = %v, want ErrTokenUnavailable", err)
	}
}

// The token endpoint is dialled through the executor's egress policy: a denied address is refused before
// connect (no connection accepted) and the error says so.
func TestTokenEndpointEgressDenied(t *testing.T) {
	srv, l, s := countingServer(t, "127.0.0.1:0", false)
	for name, e := range map[string]*HTTPExecutor{"default policy": New(), "127.0.0.2 only": New(WithEgressPolicy(policy(t, "127.0.0.2/32")))} {
		t.Run(name, func(t *testing.T) {
			t.Cleanup(e.CloseIdleConnections)
			c := NewTokenCache(e.TokenClient)
			_, err := c.Token(context.Background(), "d", ClientCredentials{TokenURL: srv.URL + "/token", ClientID: testClientID,
				ClientSecret: testClientSecret})
			if !errors.Is(err, ErrTokenUnavailable) || !egress.IsDenied(err) || !strings.Contains(err.Error(), "egress policy") {
				t.Fatalf("err = %v, want ErrTokenUnavailable wrapping an egress denial", err)
			}
			if l.Accepted() != 0 || s.count() != 0 {
				t.Errorf("the denied token endpoint accepted %d connections and %d requests, want 0", l.Accepted(), s.count())
			}
		})
	}
}

// An https token endpoint is verified with the destination's CA bundle; without it the system roots refuse
// the test certificate.
func TestTokenEndpointTLS(t *testing.T) {
	ts := newTokenServer(t, true)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	c := NewTokenCache(newExecutor(t).TokenClient)
	if _, err := c.Token(context.Background(), "no-ca", ts.creds()); !errors.Is(err, ErrTokenUnavailable) {
		t.Fatalf("without the CA bundle: err = %v, want ErrTokenUnavailable", err)
	}
	cc := ts.creds()
	cc.TLS = &TLSOptions{CABundle: ca, ServerName: "destination.example"} // ServerName names the destination, not this
	if tok := mustToken(t, c, "with-ca", cc); tok == "" {
		t.Fatal("empty token")
	}
}

// Token returns when the caller's context ends, without waiting for a slow token endpoint.
func TestTokenHonoursTheContext(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		<-release
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	c := NewTokenCache(newExecutor(t).TokenClient)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Token(ctx, "d", ClientCredentials{TokenURL: srv.URL, ClientID: testClientID, ClientSecret: testClientSecret})
	if !errors.Is(err, ErrTokenUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrTokenUnavailable and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Token returned after %s, want about 200ms", d)
	}
}

// styleServer is a token endpoint on loopback that counts requests and answers each with answer(r); it
// records whether the client credentials came in the Basic header or in the form body.
func styleServer(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_ = r.ParseForm()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func oauthError(w http.ResponseWriter, code int, oauthCode string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, `{"error":%q}`, oauthCode)
}

// A token endpoint that is down (5xx, 429 or 503 with Retry-After, a closed connection) or refuses the grant for
// another reason than the client authentication is asked once per call: its answer says nothing about where
// the client credentials go (RFC 6749 section 5.2), so the form style is not tried.
func TestTokenEndpointDownAskedOncePerAttempt(t *testing.T) {
	cases := map[string]struct {
		answer     func(w http.ResponseWriter, r *http.Request)
		retryAfter string
	}{
		"500": {answer: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }},
		"503 Retry-After": {answer: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
		}, retryAfter: "7"},
		"429 Retry-After": {answer: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "3")
			oauthError(w, http.StatusTooManyRequests, "slow_down")
		}, retryAfter: "3"},
		"400 invalid_scope": {answer: func(w http.ResponseWriter, _ *http.Request) { oauthError(w, http.StatusBadRequest, "invalid_scope") }},
		"500 invalid_client": {answer: func(w http.ResponseWriter, _ *http.Request) {
			oauthError(w, http.StatusInternalServerError, "invalid_client")
		}},
		"connection closed": {answer: func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv, n := styleServer(t, tc.answer)
			c := NewTokenCache(newExecutor(t).TokenClient)
			cc := ClientCredentials{TokenURL: srv.URL + "/token", ClientID: testClientID, ClientSecret: testClientSecret}
			for attempt := 1; attempt <= 3; attempt++ {
				_, err := c.Token(context.Background(), "d", cc)
				if !errors.Is(err, ErrTokenUnavailable) {
					t.Fatalf("attempt %d: err = %v, want ErrTokenUnavailable", attempt, err)
				}
				if got := n.Load(); got != int32(attempt) {
					t.Fatalf("%d token requests after %d attempts, want one per attempt", got, attempt)
				}
				if ra := TokenRetryAfter(err); ra != tc.retryAfter {
					t.Errorf("TokenRetryAfter = %q, want %q", ra, tc.retryAfter)
				}
			}
		})
	}
}

// An endpoint that wants the credentials in the form body refuses the Basic header with 401 invalid_client:
// the first token costs two requests, every later one a single request in the form style, also after the
// secret rotates; an endpoint that refuses both styles is asked twice until one worked.
func TestTokenAuthStyleLearnedPerDestination(t *testing.T) {
	var basic, issued atomic.Int32
	srv, n := styleServer(t, func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); ok {
			basic.Add(1)
			oauthError(w, http.StatusUnauthorized, "invalid_client")
			return
		}
		if r.PostForm.Get("client_id") != testClientID || r.PostForm.Get("client_secret") == "" {
			oauthError(w, http.StatusBadRequest, "invalid_client")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":3600}`, issued.Add(1))
	})
	c := NewTokenCache(newExecutor(t).TokenClient)
	cc := ClientCredentials{TokenURL: srv.URL + "/token", ClientID: testClientID, ClientSecret: testClientSecret}
	first := mustToken(t, c, "d", cc)
	if n.Load() != 2 || basic.Load() != 1 {
		t.Fatalf("first token: %d requests (%d Basic), want 2 (1 Basic)", n.Load(), basic.Load())
	}
	c.Invalidate("d", first)
	mustToken(t, c, "d", cc)
	cc.ClientSecret = "cs-rotated-1a2b3c" //nolint:gosec // G101: a test credential
	mustToken(t, c, "d", cc)
	if n.Load() != 4 || basic.Load() != 1 {
		t.Errorf("after a refresh and a rotated secret: %d requests (%d Basic), want 4 (1 Basic)", n.Load(), basic.Load())
	}
	if tok := mustToken(t, c, "other", cc); tok == "" || basic.Load() != 2 {
		t.Errorf("another destination: %d Basic requests, want its own probe (2)", basic.Load())
	}
}
