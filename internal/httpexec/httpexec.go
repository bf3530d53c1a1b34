// Package httpexec performs one attempt of an external HTTP side effect and
// reports exactly what is known about it: the (capped) response, or a
// classified transport error together with whether any byte of the request
// may have reached the server.
//
// The executor is built so that net/http never sends a request twice on its
// own. net/http's Transport silently re-sends a request after a failure on a
// reused keep-alive connection when it considers the request "replayable":
// GET/HEAD/OPTIONS/TRACE, any request carrying an Idempotency-Key or
// X-Idempotency-Key header, provided it has no body or a GetBody function (see
// Request.isReplayable and persistConn.shouldRetryRequest in net/http). The
// bundled HTTP/2 client likewise re-sends body-less requests after some
// stream errors. The executor therefore:
//
//   - sends a request with a body with GetBody cleared and a fixed
//     Content-Length, so neither the HTTP/1 nor the HTTP/2 client can rewind
//     it; such requests use a pooled transport (keep-alive, HTTP/2 over TLS);
//   - sends a request without a body over a transport with keep-alives
//     disabled and HTTP/1.1 only, so it always goes out on a fresh
//     connection, and net/http never retries on a fresh connection;
//   - never follows redirects and never uses a proxy from the environment;
//   - checks every resolved address against an egress policy (package egress) in
//     net.Dialer.Control, right before connect, and refuses a denied one
//     (ClassEgressDenied, nothing sent): a name that resolves to loopback or
//     cloud metadata, DNS rebinding and IPv4-mapped IPv6 literals are all seen
//     as the address that would be connected to;
//   - asks for the identity content coding (Accept-Encoding: identity, no TE)
//     and decodes a body compressed all the same (gzip, deflate, br, zstd),
//     bounded by the read limit as received and as decoded, before anything
//     reads it: a compressed body would hide an echoed Secret value from
//     redaction, and its length is a compression oracle (BREACH), so a
//     decoded response has no Content-Length; a body in another coding is
//     replaced by UndecodedBody (ClassContentEncoding).
//
// Retrying is the caller's decision, made from Result.Written and
// Result.ErrorClass (see DESIGN.md rules 3 and 4).
package httpexec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"hash"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Defaults used by New when no Option overrides them.
const (
	// DefaultTimeout is the per-attempt timeout used when Request.Timeout is
	// zero or negative: a destination's default spec.timeout (30 seconds,
	// actionsv1alpha1.DefaultTimeout). It covers connecting, sending the
	// request, and reading the response header and body.
	DefaultTimeout = actionsv1alpha1.DefaultTimeout
	// DefaultMaxReadBytes is the hard limit on how many response body bytes are
	// read (and hashed) per attempt: 16 MiB.
	DefaultMaxReadBytes int64 = 16 << 20
	// DefaultDialTimeout bounds establishing the TCP connection (10 seconds).
	DefaultDialTimeout = 10 * time.Second
	// DefaultTLSHandshakeTimeout bounds the TLS handshake (10 seconds).
	DefaultTLSHandshakeTimeout = 10 * time.Second
	// DefaultIdleConnTimeout is how long an idle keep-alive connection is kept
	// in the pool (30 seconds). It is kept below common server keep-alive
	// timeouts (often 60 seconds) to make the idle-close race rare.
	DefaultIdleConnTimeout = 30 * time.Second
	// DefaultMaxIdleConnsPerHost is the number of idle keep-alive connections
	// kept per host.
	DefaultMaxIdleConnsPerHost = 64
	// DefaultMaxResponseHeaderBytes limits the response header size: 1 MiB.
	DefaultMaxResponseHeaderBytes int64 = 1 << 20
	// DefaultMaxCachedTransports is how many distinct TLS configurations keep
	// a cached transport; the least recently used one is closed beyond that.
	DefaultMaxCachedTransports = 64
)

// Request is one fully resolved attempt. Everything secret is already resolved
// into Header by the caller (auth headers); the executor never logs headers or
// bodies and never puts them into errors.
type Request struct {
	// Method is the HTTP method; empty means GET.
	Method string
	// URL is the absolute destination URL (base URL + path, already joined).
	URL string
	// Header holds non-secret headers, the idempotency header and auth
	// headers. It is copied, never modified. A "Host" entry sets the request
	// Host. Content-Length and Transfer-Encoding entries are ignored.
	Header http.Header
	// Body is the exact bytes to send (the caller passes RFC 8785 canonical
	// JSON). nil or empty means no body; such a request is always sent on a
	// fresh HTTP/1.1 connection (see the package documentation).
	Body []byte
	// Timeout is the per-attempt timeout; zero or negative means
	// DefaultTimeout (30 seconds).
	Timeout time.Duration
	// TLS holds the destination's TLS material for https URLs; nil means the
	// system roots, no client certificate.
	TLS *TLSOptions
	// Flow is the namespace the request is made for: a compressed answer's decoder window is charged to its
	// share of the window budget (window_budget.go). "" is a flow of its own.
	Flow string
}

// TLSOptions are the TLS inputs of a destination, already read from Secrets
// by the caller. Transports are cached per distinct value (by SHA-256 of all
// fields), so changing any field takes effect on the next attempt with new
// connections.
type TLSOptions struct {
	// CABundle is PEM; when non-empty it replaces the system roots.
	CABundle []byte
	// ClientCert is the PEM client certificate chain for mutual TLS.
	ClientCert []byte
	// ClientKey is the PEM private key of ClientCert.
	ClientKey []byte
	// ServerName overrides the name used for SNI and certificate
	// verification; empty means the URL host.
	ServerName string
	// InsecureSkipVerify disables server certificate verification.
	InsecureSkipVerify bool
}

// Response is what was received and recorded (capped).
type Response struct {
	// StatusCode is the final HTTP status code (1xx are skipped; 3xx are not
	// followed and are returned as is).
	StatusCode int
	// Header is the full response header (the caller selects what to store).
	Header http.Header
	// Body holds at most the maxBodyBytes passed to Execute.
	Body []byte
	// BodyTruncated is true when Body is not the whole body: the body was
	// longer than maxBodyBytes, longer than the hard read limit, or reading it
	// failed (see BodyErr).
	BodyTruncated bool
	// BodySHA256 is "sha256:" + lowercase hex over the body bytes as read,
	// decoded (Decoded; a body that cannot be decoded: as received): the
	// full body, except that at most the executor's hard read limit
	// (DefaultMaxReadBytes, 16 MiB, unless WithMaxReadBytes) is read; beyond
	// it reading stops, BodyTruncated is set and the hash covers only the
	// bytes read. The same applies when reading fails (BodyErr).
	BodySHA256 string
	// BodyLength is the number of body bytes read and hashed (bytes; of the
	// decoded body when Decoded is set).
	BodyLength int64
	// BodyErr is non-nil when the status and header arrived but reading the
	// body failed (timeout, reset), or the body could not be decoded
	// (ClassContentEncoding). It is an *Error. The server did answer,
	// so the attempt is not a transport failure; Body and BodySHA256 cover
	// what was read.
	BodyErr error
	// Decoded lists the content codings removed from the body ("gzip", or
	// "gzip, br" in the order they were applied); "" for a body sent in the
	// identity coding. Header then has neither Content-Encoding nor
	// Content-Length, and Body, BodyLength and BodySHA256 are of the decoded
	// body (see readResponseBody).
	Decoded string
}

// ErrorClass names a transport failure (for status.attemptHistory[].errorClass).
type ErrorClass string

// Error classes. For failures before a connection was obtained the class
// names the phase that failed (a connect timeout is Dial, a handshake timeout
// is TLSHandshake); Written is false for all of them.
const (
	// ClassDNS: resolving the host failed. Nothing was sent.
	ClassDNS ErrorClass = "DNS"
	// ClassDial: the TCP connection could not be established (refused,
	// unreachable, connect timeout). Nothing was sent.
	ClassDial ErrorClass = "Dial"
	// ClassTLSHandshake: the TLS handshake failed (unknown authority, bad
	// certificate, alert from the server, handshake timeout). Nothing was sent
	// unless Written says otherwise (a TLS 1.3 server rejects a client
	// certificate only after the client already sent its request).
	ClassTLSHandshake ErrorClass = "TLSHandshake"
	// ClassTimeout: the attempt timeout (or the caller's deadline) expired.
	ClassTimeout ErrorClass = "Timeout"
	// ClassConnectionReset: the connection was reset or closed before a
	// complete response header arrived.
	ClassConnectionReset ErrorClass = "ConnectionReset"
	// ClassCanceled: the caller's context was canceled.
	ClassCanceled ErrorClass = "Canceled"
	// ClassProtocol: the server violated HTTP (malformed response, HTTP/2
	// stream or connection error).
	ClassProtocol ErrorClass = "Protocol"
	// ClassEgressDenied: the egress policy refused the resolved address before connect (see
	// WithEgressPolicy). Nothing was sent; it is retried like a dial error, so a policy change lets the
	// action proceed.
	ClassEgressDenied ErrorClass = "EgressDenied"
	// ClassTokenUnavailable: no OAuth2 access token could be obtained from the token endpoint (TokenCache);
	// nothing was sent to the destination, so it is retried like a dial error.
	ClassTokenUnavailable ErrorClass = "TokenUnavailable"
	// ClassSigningFailed: the request could not be signed (spec.signing); nothing was sent, so it is retried
	// like a dial error.
	ClassSigningFailed ErrorClass = "SigningFailed"
	// ClassContentEncoding: only in Response.BodyErr: the response's body is
	// in a content coding the executor does not decode (Body is then
	// UndecodedBody), or does not decode as its Content-Encoding says (Body
	// holds what decoded before the error). The request was sent and
	// answered: the status code and headers stand.
	ClassContentEncoding ErrorClass = "ContentEncoding"
	// ClassOther: anything else, including invalid requests and TLS options.
	ClassOther ErrorClass = "Other"
)

// Result is the outcome of one attempt.
type Result struct {
	// Response is what the server answered; nil when Err != nil.
	Response *Response
	// Err is the transport error (an *Error); its text never contains the
	// URL's userinfo, header values or the body.
	Err error
	// ErrorClass classifies Err; "" when Err == nil.
	ErrorClass ErrorClass
	// Written reports whether any byte of the request may have reached the
	// server. It is false only when that is certain: no connection was
	// obtained (DNS, egress policy, dial or TLS handshake failure, invalid request, canceled
	// or timed out before connecting). Once a connection was obtained it is
	// true, even if the failure happened while writing (conservative).
	// Always true when Response != nil.
	Written bool
	// WroteRequest reports that the whole request (header and body) was
	// handed to the connection without error. Informational; Written is the
	// bit to base retry decisions on.
	WroteRequest bool
	// Duration is the wall time of the attempt, including reading the body.
	Duration time.Duration
}

// Executor performs one attempt. Implementations must not retry on their own.
type Executor interface {
	// Execute sends req once and keeps at most maxBodyBytes bytes of the
	// response body (negative means 0).
	Execute(ctx context.Context, req Request, maxBodyBytes int) Result
}

// HTTPExecutor is the net/http based Executor. It caches transports per
// distinct TLSOptions so connections are reused. Safe for concurrent use.
type HTTPExecutor struct {
	cfg   config
	cache *transportCache
}

var _ Executor = (*HTTPExecutor)(nil)

// New returns an HTTPExecutor configured by opts.
func New(opts ...Option) *HTTPExecutor {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return &HTTPExecutor{cfg: cfg, cache: newTransportCache(cfg)}
}

// DialContext dials network/address with the executor's dialer (dial timeout, egress policy), for other
// clients that must obey the same policy, such as an OAuth2 token endpoint client: set it as
// http.Transport.DialContext. A denied address returns an error for which egress.IsDenied is true.
func (e *HTTPExecutor) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return newDialer(e.cfg).DialContext(ctx, network, address)
}

// CloseIdleConnections closes the idle connections of all cached transports.
func (e *HTTPExecutor) CloseIdleConnections() {
	e.cache.closeIdle()
}

// Execute sends req exactly once (net/http is prevented from re-sending it)
// and returns the response, capped to maxBodyBytes bytes, or the classified
// transport error. It never panics on bad input; invalid requests come back
// as ClassOther with Written false.
func (e *HTTPExecutor) Execute(ctx context.Context, req Request, maxBodyBytes int) Result {
	start := time.Now()
	res := e.execute(ctx, req, maxBodyBytes)
	res.Duration = time.Since(start)
	return res
}

func (e *HTTPExecutor) execute(ctx context.Context, req Request, maxBodyBytes int) Result {
	if ctx == nil {
		ctx = context.Background()
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	cl, err := e.cache.get(req.TLS)
	if err != nil {
		return failed(&Error{Class: ClassOther, msg: err.Error(), cause: err})
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	tr := &tracker{}
	hreq, err := newHTTPRequest(httptrace.WithClientTrace(actx, tr.clientTrace()), req)
	if err != nil {
		return failed(&Error{Class: ClassOther, msg: err.Error(), cause: err})
	}
	client := cl.pooled
	if hreq.Body == nil {
		// net/http treats a body-less request as replayable (for safe methods
		// and whenever an Idempotency-Key header is present) and would resend
		// it after a failure on a reused connection. Never reuse one for it.
		client = cl.fresh
	}

	resp, err := client.Do(hreq)
	if err != nil {
		written := tr.gotConn.Load()
		stage := ""
		if written {
			stage = tr.stage()
		}
		xerr := newError(ctx, actx, timeout, err, written, stage, tr)
		return Result{
			Err:          xerr,
			ErrorClass:   xerr.Class,
			Written:      written,
			WroteRequest: tr.wroteRequest.Load(),
		}
	}
	defer func() { _ = resp.Body.Close() }()

	out := &Response{StatusCode: resp.StatusCode, Header: resp.Header}
	if rerr := readResponseBody(out, resp.Body, max(maxBodyBytes, 0), e.cfg.maxReadBytes, req.Flow); rerr != nil {
		out.BodyErr = newError(ctx, actx, timeout, rerr, true, stageResponse, tr)
	}
	return Result{Response: out, Written: true, WroteRequest: tr.wroteRequest.Load()}
}

func failed(err *Error) Result {
	return Result{Err: err, ErrorClass: err.Class}
}

// newHTTPRequest builds the *http.Request so that net/http can never rewind
// and resend the body: GetBody is cleared and Content-Length is fixed.
func newHTTPRequest(ctx context.Context, req Request) (*http.Request, error) {
	var body io.Reader
	if len(req.Body) > 0 {
		body = bytes.NewReader(req.Body)
	}
	hreq, err := http.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err != nil {
		return nil, sanitizeRequestError(err)
	}
	// NewRequest sets GetBody for a *bytes.Reader. With GetBody, net/http
	// considers the request replayable and re-sends it after a failure on a
	// reused connection (and HTTP/2 after some stream errors). Without it,
	// and with ContentLength > 0, it never does.
	hreq.GetBody = nil
	hreq.ContentLength = int64(len(req.Body))
	hreq.Header = req.Header.Clone()
	if hreq.Header == nil {
		hreq.Header = make(http.Header)
	}
	if host := hreq.Header.Get("Host"); host != "" {
		hreq.Host = host
	}
	hreq.Header.Del("Host")
	// Ask for the body as it is (RFC 9110 section 12.5.3): a compressed body would hide an echoed Secret
	// value from redaction, and its length is a compression oracle. A body compressed all the same is
	// decoded (readResponseBody). TE asks for transfer codings (RFC 9110 section 10.1.4): never sent.
	hreq.Header.Set("Accept-Encoding", "identity")
	hreq.Header.Del("TE")
	return hreq, nil
}

// tracker records, via httptrace, how far the attempt got. Hooks may run on
// other goroutines (and even after Do returned), hence the atomics.
type tracker struct {
	gotConn      atomic.Bool
	wroteHeaders atomic.Bool
	wroteRequest atomic.Bool
	dnsFailed    atomic.Bool
	dialFailed   atomic.Bool
	tlsFailed    atomic.Bool
}

func (t *tracker) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		DNSDone: func(i httptrace.DNSDoneInfo) {
			if i.Err != nil {
				t.dnsFailed.Store(true)
			}
		},
		ConnectDone: func(_, _ string, err error) {
			if err != nil {
				t.dialFailed.Store(true)
			}
		},
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			if err != nil {
				t.tlsFailed.Store(true)
			}
		},
		// Bytes of the request can only reach the server on a connection
		// obtained for it; before GotConn nothing was written.
		GotConn:      func(httptrace.GotConnInfo) { t.gotConn.Store(true) },
		WroteHeaders: func() { t.wroteHeaders.Store(true) },
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				t.wroteRequest.Store(true)
			}
		},
	}
}

// capWriter keeps the first limit bytes written to it and discards the rest.
type capWriter struct {
	buf   []byte
	limit int
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.limit - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// readBody reads at most hardLimit bytes of r through a SHA-256 hasher and
// keeps the first keep bytes. more reports that the body continued beyond
// hardLimit (probed with one extra byte that is not hashed).
func readBody(r io.Reader, keep int, hardLimit int64) (body []byte, n int64, more bool, sum string, err error) {
	if hardLimit <= 0 {
		hardLimit = DefaultMaxReadBytes
	}
	if int64(keep) > hardLimit {
		keep = int(hardLimit) //nolint:gosec // hardLimit < keep, which is an int
	}
	h := sha256.New()
	cw := &capWriter{limit: keep}
	n, err = io.Copy(io.MultiWriter(h, cw), io.LimitReader(r, hardLimit))
	if err == nil && n == hardLimit {
		var probe [1]byte
		m, _ := io.ReadFull(r, probe[:])
		more = m > 0
	}
	return cw.buf, n, more, hashString(h), err
}

func hashString(h hash.Hash) string {
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
