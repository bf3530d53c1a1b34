package httpexec

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/actionledger/actionledger/internal/egress"
)

// Option configures an HTTPExecutor.
type Option func(*config)

type config struct {
	dialTimeout            time.Duration
	tlsHandshakeTimeout    time.Duration
	idleConnTimeout        time.Duration
	maxIdleConnsPerHost    int
	maxResponseHeaderBytes int64
	maxReadBytes           int64
	maxCachedTransports    int
	egress                 *egress.Policy
}

func defaultConfig() config {
	return config{
		dialTimeout:            DefaultDialTimeout,
		tlsHandshakeTimeout:    DefaultTLSHandshakeTimeout,
		idleConnTimeout:        DefaultIdleConnTimeout,
		maxIdleConnsPerHost:    DefaultMaxIdleConnsPerHost,
		maxResponseHeaderBytes: DefaultMaxResponseHeaderBytes,
		maxReadBytes:           DefaultMaxReadBytes,
		maxCachedTransports:    DefaultMaxCachedTransports,
		egress:                 egress.New(egress.Config{}),
	}
}

// WithEgressPolicy sets the policy every dial is checked against, on the resolved address right before
// connect (net.Dialer.Control); nil keeps the default, egress.New(egress.Config{}): the built-in deny set
// (loopback, link-local, unspecified, multicast), no API server addresses. A denied dial sends nothing
// and comes back as ClassEgressDenied with Written false.
func WithEgressPolicy(p *egress.Policy) Option {
	return func(c *config) {
		if p != nil {
			c.egress = p
		}
	}
}

// WithDialTimeout sets the TCP connect timeout; d <= 0 keeps the default
// (DefaultDialTimeout, 10 seconds). The attempt timeout applies as well.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.dialTimeout = d
		}
	}
}

// WithTLSHandshakeTimeout sets the TLS handshake timeout; d <= 0 keeps the
// default (DefaultTLSHandshakeTimeout, 10 seconds).
func WithTLSHandshakeTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.tlsHandshakeTimeout = d
		}
	}
}

// WithIdleConnTimeout sets how long idle keep-alive connections are kept;
// d <= 0 keeps the default (DefaultIdleConnTimeout, 30 seconds).
func WithIdleConnTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.idleConnTimeout = d
		}
	}
}

// WithMaxIdleConnsPerHost sets the idle keep-alive connections kept per host;
// n <= 0 keeps the default (DefaultMaxIdleConnsPerHost).
func WithMaxIdleConnsPerHost(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxIdleConnsPerHost = n
		}
	}
}

// WithMaxResponseHeaderBytes limits the response header size in bytes;
// n <= 0 keeps the default (DefaultMaxResponseHeaderBytes, 1 MiB).
func WithMaxResponseHeaderBytes(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.maxResponseHeaderBytes = n
		}
	}
}

// WithMaxReadBytes sets the hard limit, in bytes, on how much of a response
// body is read and hashed per attempt; n <= 0 keeps the default
// (DefaultMaxReadBytes, 16 MiB).
func WithMaxReadBytes(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.maxReadBytes = n
		}
	}
}

// WithMaxCachedTransports sets how many distinct TLSOptions keep a cached
// transport; n <= 0 keeps the default (DefaultMaxCachedTransports).
func WithMaxCachedTransports(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxCachedTransports = n
		}
	}
}

// clients is the pair of clients for one TLS configuration.
type clients struct {
	// pooled reuses keep-alive connections and may speak HTTP/2 over TLS.
	// Only requests with a body (GetBody cleared) go through it.
	pooled *http.Client
	// fresh dials a new HTTP/1.1 connection for every request and closes it
	// afterwards; body-less requests go through it.
	fresh *http.Client
	// lastUse orders entries for LRU eviction.
	lastUse uint64
}

func (c *clients) closeIdle() {
	c.pooled.CloseIdleConnections()
	c.fresh.CloseIdleConnections()
}

type transportCache struct {
	cfg     config
	mu      sync.Mutex
	tick    uint64
	entries map[[sha256.Size]byte]*clients
}

func newTransportCache(cfg config) *transportCache {
	return &transportCache{cfg: cfg, entries: make(map[[sha256.Size]byte]*clients)}
}

// get returns the clients for opts, building and caching them on first use.
// Entries are keyed by a SHA-256 over all TLS inputs, so changed material
// gets new transports (and new connections); the least recently used entry
// beyond the limit has its idle connections closed and is dropped.
func (tc *transportCache) get(opts *TLSOptions) (*clients, error) {
	key := tlsKey(opts)
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.tick++
	if c, ok := tc.entries[key]; ok {
		c.lastUse = tc.tick
		return c, nil
	}
	tlsCfg, err := buildTLSConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &clients{
		pooled:  newClient(tc.cfg, tlsCfg, true),
		fresh:   newClient(tc.cfg, tlsCfg, false),
		lastUse: tc.tick,
	}
	for len(tc.entries) >= tc.cfg.maxCachedTransports {
		tc.evictOldestLocked()
	}
	tc.entries[key] = c
	return c, nil
}

func (tc *transportCache) evictOldestLocked() {
	var oldestKey [sha256.Size]byte
	var oldest *clients
	for k, c := range tc.entries {
		if oldest == nil || c.lastUse < oldest.lastUse {
			oldestKey, oldest = k, c
		}
	}
	if oldest != nil {
		// In-flight requests finish; their connections are closed when
		// returned because nothing reuses this transport afterwards.
		oldest.closeIdle()
		delete(tc.entries, oldestKey)
	}
}

func (tc *transportCache) closeIdle() {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, c := range tc.entries {
		c.closeIdle()
	}
}

func (tc *transportCache) len() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return len(tc.entries)
}

// tlsKey hashes every TLS input, length-prefixed so that field boundaries are
// unambiguous. nil and the zero TLSOptions are the same configuration.
func tlsKey(o *TLSOptions) [sha256.Size]byte {
	if o == nil {
		o = &TLSOptions{}
	}
	h := sha256.New()
	field := func(b []byte) {
		_, _ = h.Write([]byte(strconv.Itoa(len(b)) + ":")) // netstring framing
		_, _ = h.Write(b)
	}
	field([]byte("httpexec.TLSOptions/v1"))
	field(o.CABundle)
	field(o.ClientCert)
	field(o.ClientKey)
	field([]byte(o.ServerName))
	if o.InsecureSkipVerify {
		field([]byte{1})
	} else {
		field([]byte{0})
	}
	var key [sha256.Size]byte
	copy(key[:], h.Sum(nil))
	return key
}

// buildTLSConfig turns TLSOptions into a tls.Config. Errors never contain
// key material.
func buildTLSConfig(o *TLSOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o == nil {
		return cfg, nil
	}
	cfg.ServerName = o.ServerName
	// The destination explicitly asked for it.
	cfg.InsecureSkipVerify = o.InsecureSkipVerify //nolint:gosec // opt-in per destination
	if len(o.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(o.CABundle) {
			return nil, errors.New("httpexec: CA bundle contains no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	if len(o.ClientCert) > 0 || len(o.ClientKey) > 0 {
		cert, err := tls.X509KeyPair(o.ClientCert, o.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("httpexec: client certificate/key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// newDialer returns the dialer of every connection: Control checks the resolved address against the
// egress policy before connect, so neither DNS rebinding nor an IPv4-mapped literal bypasses it.
func newDialer(cfg config) *net.Dialer {
	return &net.Dialer{Timeout: cfg.dialTimeout, KeepAlive: 30 * time.Second, Control: cfg.egress.Control}
}

// newClient builds a client that never follows redirects and never uses a
// proxy. pooled selects keep-alive + HTTP/2 (for requests with a body);
// otherwise every request gets a fresh HTTP/1.1 connection (for body-less
// requests, which net/http would otherwise replay on a reused connection).
func newClient(cfg config, tlsCfg *tls.Config, pooled bool) *http.Client {
	dialer := newDialer(cfg)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(pooled) // HTTP/2 over TLS only (no unencrypted HTTP/2)
	t := &http.Transport{
		Proxy:                  nil, // destinations are explicit; ignore HTTP(S)_PROXY
		DialContext:            dialer.DialContext,
		TLSClientConfig:        tlsCfg.Clone(),
		TLSHandshakeTimeout:    cfg.tlsHandshakeTimeout,
		DisableKeepAlives:      !pooled,
		DisableCompression:     true, // record the bytes exactly as sent
		MaxIdleConns:           0,    // no global limit; per host below
		MaxIdleConnsPerHost:    cfg.maxIdleConnsPerHost,
		IdleConnTimeout:        cfg.idleConnTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: cfg.maxResponseHeaderBytes,
		Protocols:              protocols,
	}
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
