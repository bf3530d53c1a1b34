package httpexec

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/actionledger/actionledger/internal/egress"
)

// DefaultTokenEarlyExpiry is how long before its expiry (expires_in, RFC 6749 section 5.1) a cached token is
// replaced by a new one: 30 seconds, so that a token never expires while a request carrying it is on its way.
// A token that lives shorter than that is fetched for each request.
const DefaultTokenEarlyExpiry = 30 * time.Second

// DefaultTokenTimeout bounds one token request (connect, send, read the answer): 30 seconds. The caller's
// context bounds the wait for it as well.
const DefaultTokenTimeout = 30 * time.Second

// ErrTokenUnavailable marks a failure to obtain an OAuth2 access token (TokenCache.Token). Nothing was sent
// to the destination.
var ErrTokenUnavailable = errors.New("oauth2 token unavailable")

// ClientCredentials is one OAuth 2.0 client credentials grant (RFC 6749 section 4.4), already read from
// Secrets by the caller. The token endpoint is dialled with the executor's dialer (egress policy) and the
// TLS material in TLS (its ServerName is ignored: it names the destination's host, not the token
// endpoint's).
type ClientCredentials struct {
	// TokenURL is the token endpoint (absolute http or https URL).
	TokenURL string
	// ClientID and ClientSecret authenticate the client: in an HTTP Basic Authorization header first and, only
	// if the endpoint refuses the client authentication (RFC 6749 section 5.2: 400 or 401 with error
	// invalid_client), in the form body (section 2.3.1); the style that worked is kept per owner.
	ClientID, ClientSecret string
	// Scopes are sent space-separated as the "scope" parameter (RFC 6749 section 3.3).
	Scopes []string
	// EndpointParams are further form parameters of the token request (audience, resource, ...).
	EndpointParams url.Values
	// TLS is the TLS material for an https token endpoint; nil means the system roots.
	TLS *TLSOptions
}

// key is a SHA-256 over every field, so that a changed credential gets a new token source (and the old
// token is never sent with the new configuration).
func (c *ClientCredentials) key() [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) {
		_, _ = h.Write([]byte(strconv.Itoa(len(s)) + ":" + s)) // netstring framing
	}
	field("httpexec.ClientCredentials/v1")
	field(c.TokenURL)
	field(c.ClientID)
	field(c.ClientSecret)
	field(strconv.Itoa(len(c.Scopes)))
	for _, s := range c.Scopes {
		field(s)
	}
	names := make([]string, 0, len(c.EndpointParams))
	for k := range c.EndpointParams {
		names = append(names, k)
	}
	slices.Sort(names)
	field(strconv.Itoa(len(names)))
	for _, k := range names {
		field(k)
		field(strconv.Itoa(len(c.EndpointParams[k])))
		for _, v := range c.EndpointParams[k] {
			field(v)
		}
	}
	t := tlsKey(c.tlsOptions())
	_, _ = h.Write(t[:])
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

func (c *ClientCredentials) tlsOptions() *TLSOptions {
	if c.TLS == nil {
		return nil
	}
	t := *c.TLS
	t.ServerName = ""
	return &t
}

// TokenClients returns the HTTP client for a token endpoint with the given TLS material; HTTPExecutor's
// TokenClient is one.
type TokenClients func(tls *TLSOptions) (*http.Client, error)

// TokenClient returns an HTTP client for OAuth2 token requests: the executor's pooled transport for tls
// (dial timeout, egress policy checked on the resolved address before connect, no proxy from the
// environment, no redirects followed) with DefaultTokenTimeout as its overall timeout.
func (e *HTTPExecutor) TokenClient(tls *TLSOptions) (*http.Client, error) {
	cl, err := e.cache.get(tls)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: cl.pooled.Transport, CheckRedirect: cl.pooled.CheckRedirect, Timeout: DefaultTokenTimeout}, nil
}

// TokenCache keeps one OAuth2 client-credentials token source per owner (a destination), in memory only.
// A token is reused until DefaultTokenEarlyExpiry (or WithTokenEarlyExpiry) before it expires, then
// fetched anew (oauth2.ReuseTokenSourceWithExpiry); a changed credential replaces the owner's source.
// Tokens are never logged and never part of an error. Safe for concurrent use.
type TokenCache struct {
	clients TokenClients
	early   time.Duration

	mu      sync.Mutex
	entries map[string]*tokenEntry
}

type tokenEntry struct {
	key   [sha256.Size]byte
	style *authStyle         // how the client authenticates at the token endpoint; shared with base
	base  oauth2.TokenSource // fetches a new token on every call
	src   oauth2.TokenSource // base, reused until early expiry
	last  string             // the token src returned last
}

// TokenCacheOption configures a TokenCache.
type TokenCacheOption func(*TokenCache)

// WithTokenEarlyExpiry sets how long before its expiry a token is replaced; d <= 0 keeps
// DefaultTokenEarlyExpiry.
func WithTokenEarlyExpiry(d time.Duration) TokenCacheOption {
	return func(c *TokenCache) {
		if d > 0 {
			c.early = d
		}
	}
}

// NewTokenCache returns an empty cache whose token requests use clients (for example
// HTTPExecutor.TokenClient, so that the egress policy and TLS settings apply).
func NewTokenCache(clients TokenClients, opts ...TokenCacheOption) *TokenCache {
	c := &TokenCache{clients: clients, early: DefaultTokenEarlyExpiry, entries: map[string]*tokenEntry{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Token returns a valid access token of owner's credential cc, from the cache or from the token endpoint.
// An error wraps ErrTokenUnavailable; its text names the failure (HTTP status and the OAuth error code of a
// refusal, RFC 6749 section 5.2; a dial or egress error) without the token endpoint's URL, the credential or
// the answer's body. When ctx ends first, Token returns at once; the request in flight finishes (bounded by
// DefaultTokenTimeout) and its token is cached for the next call.
func (c *TokenCache) Token(ctx context.Context, owner string, cc ClientCredentials) (string, error) {
	src, err := c.source(owner, &cc)
	if err != nil {
		return "", &tokenError{msg: "oauth2 token endpoint: " + err.Error(), cause: err}
	}
	type answer struct {
		tok *oauth2.Token
		err error
	}
	done := make(chan answer, 1)
	go func() {
		t, err := src.Token()
		done <- answer{t, err}
	}()
	var a answer
	select {
	case a = <-done:
	case <-ctx.Done():
		return "", &tokenError{msg: "oauth2 token endpoint: no token before the attempt's deadline: " + ctx.Err().Error(), cause: ctx.Err()}
	}
	if a.err != nil {
		return "", newTokenError(a.err)
	}
	c.mu.Lock()
	if e, ok := c.entries[owner]; ok && e.src == src {
		e.last = a.tok.AccessToken
	}
	c.mu.Unlock()
	return a.tok.AccessToken, nil
}

// Invalidate drops owner's cached token when it is still token (the destination refused it with a 401),
// so that the next Token call fetches a new one. A token already replaced is left alone.
func (c *TokenCache) Invalidate(owner, token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[owner]; ok && e.last == token {
		e.src = oauth2.ReuseTokenSourceWithExpiry(nil, e.base, c.early)
		e.last = ""
	}
}

// Cached reports whether owner has an entry (a token source, with or without a token yet).
func (c *TokenCache) Cached(owner string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[owner]
	return ok
}

// Forget drops owner's entry (the destination is gone).
func (c *TokenCache) Forget(owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, owner)
}

func (c *TokenCache) source(owner string, cc *ClientCredentials) (oauth2.TokenSource, error) {
	key := cc.key()
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.entries[owner]
	if ok && old.key == key {
		return old.src, nil
	}
	hc, err := c.clients(cc.tlsOptions())
	if err != nil {
		return nil, err
	}
	style := &authStyle{}
	if ok && old.style.tokenURL == cc.TokenURL {
		style = old.style // a rotated secret keeps the style the same endpoint accepted
	}
	style.tokenURL = cc.TokenURL
	conf := func(s oauth2.AuthStyle) *clientcredentials.Config {
		return &clientcredentials.Config{ClientID: cc.ClientID, ClientSecret: cc.ClientSecret, TokenURL: cc.TokenURL,
			Scopes: slices.Clone(cc.Scopes), EndpointParams: cloneValues(cc.EndpointParams), AuthStyle: s}
	}
	// The context only carries the HTTP client (oauth2.HTTPClient); fetch keeps it for every later request.
	base := fetch{header: conf(oauth2.AuthStyleInHeader), params: conf(oauth2.AuthStyleInParams), style: style,
		ctx: context.WithValue(context.Background(), oauth2.HTTPClient, hc)}
	e := &tokenEntry{key: key, style: style, base: base, src: oauth2.ReuseTokenSourceWithExpiry(nil, base, c.early)}
	c.entries[owner] = e
	return e.src, nil
}

// authStyle is how one owner's client authenticates at its token endpoint (RFC 6749 section 2.3.1). Until a
// token was issued it is unknown: the Basic header is tried first. The style is set explicitly on every request
// (never oauth2.AuthStyleAutoDetect, which re-sends in the other style after any failure, a 500 or a timeout
// included, so that a down endpoint is asked twice per attempt).
type authStyle struct {
	tokenURL string // the endpoint the style was learned at

	mu     sync.Mutex
	known  bool // a token was issued in style
	inForm bool // the credentials go in the form body, not the Basic header
}

func (a *authStyle) get() (inForm, known bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inForm, a.known
}

func (a *authStyle) worked(inForm bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inForm, a.known = inForm, true
}

// fetch asks the token endpoint on every call (clientcredentials.Config.TokenSource would cache, and a
// cached source cannot be told to drop a refused token): one request in the known style or, while the style is
// unknown, in the Basic header and a second one in the form body only if the first refused the client
// authentication (refusesClient). Any other failure (5xx, 429, a timeout, a refused dial) is the endpoint being
// down and is returned after one request.
type fetch struct {
	header, params *clientcredentials.Config // the same grant, AuthStyleInHeader and AuthStyleInParams
	style          *authStyle
	ctx            context.Context
}

func (f fetch) Token() (*oauth2.Token, error) {
	inForm, known := f.style.get()
	tok, err := f.conf(inForm).Token(f.ctx)
	if err != nil && !known && refusesClient(err) {
		inForm = !inForm
		tok, err = f.conf(inForm).Token(f.ctx)
	}
	if err != nil {
		return nil, err
	}
	f.style.worked(inForm)
	return tok, nil
}

func (f fetch) conf(inForm bool) *clientcredentials.Config {
	if inForm {
		return f.params
	}
	return f.header
}

// refusesClient reports whether err is a token endpoint's refusal of the client authentication: HTTP 400 or
// 401 with the error code invalid_client (RFC 6749 section 5.2), the only answer that says something about
// where the credentials go.
func refusesClient(err error) bool {
	rerr, ok := errors.AsType[*oauth2.RetrieveError](err)
	if !ok || rerr.Response == nil || rerr.ErrorCode != "invalid_client" {
		return false
	}
	return rerr.Response.StatusCode == http.StatusBadRequest || rerr.Response.StatusCode == http.StatusUnauthorized
}

// TokenRetryAfter returns the Retry-After header (RFC 9110 section 10.2.3, unparsed) of a token endpoint that
// answered 429 or 503 in err (a TokenCache.Token error), or "" for any other error.
func TokenRetryAfter(err error) string {
	rerr, ok := errors.AsType[*oauth2.RetrieveError](err)
	if !ok || rerr.Response == nil {
		return ""
	}
	if c := rerr.Response.StatusCode; c != http.StatusTooManyRequests && c != http.StatusServiceUnavailable {
		return ""
	}
	return rerr.Response.Header.Get("Retry-After")
}

func cloneValues(v url.Values) url.Values {
	if v == nil {
		return nil
	}
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// tokenError is a failure to obtain a token; it wraps ErrTokenUnavailable and the cause.
type tokenError struct {
	msg   string
	cause error
}

func (e *tokenError) Error() string   { return e.msg }
func (e *tokenError) Unwrap() []error { return []error{ErrTokenUnavailable, e.cause} }

// newTokenError describes a token fetch failure without the URL, the credential or the body.
func newTokenError(err error) *tokenError {
	msg := "oauth2 token endpoint: "
	rerr, isRetrieve := errors.AsType[*oauth2.RetrieveError](err)
	switch {
	case egress.IsDenied(err):
		msg += "the egress policy refused its address before connect: " + errorText(err)
	case isRetrieve:
		code := 0
		if rerr.Response != nil {
			code = rerr.Response.StatusCode
		}
		msg += fmt.Sprintf("answered HTTP %d", code)
		if rerr.ErrorCode != "" {
			msg += fmt.Sprintf(" with error %q", cut(rerr.ErrorCode, 64))
			if rerr.ErrorDescription != "" {
				msg += fmt.Sprintf(" (%q)", cut(rerr.ErrorDescription, 160))
			}
		}
		if code >= http.StatusInternalServerError || code == http.StatusTooManyRequests {
			msg += "; the token endpoint is down or limiting requests (retried within the retry policy)"
		} else {
			msg += "; the client credential or the token endpoint needs fixing"
		}
	default:
		msg += errorText(err)
	}
	return &tokenError{msg: cut(msg, maxErrorText), cause: err}
}

// errorText is err's text without a *url.Error's operation and URL.
func errorText(err error) string {
	if uerr, ok := errors.AsType[*url.Error](err); ok {
		return uerr.Err.Error()
	}
	return err.Error()
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
