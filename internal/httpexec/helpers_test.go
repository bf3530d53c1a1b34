package httpexec

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/actionledger/actionledger/internal/egress"
)

// hdrIdempotencyKey is the header net/http treats as making a request replayable.
const hdrIdempotencyKey = "Idempotency-Key"

// testTimeout bounds every attempt in tests that do not test timeouts, so a
// bug shows up as a failure rather than a hung test.
const testTimeout = 10 * time.Second

// seen records what a test server received.
type seen struct {
	mu      sync.Mutex
	methods []string
	headers []http.Header
	bodies  [][]byte
	remotes []string
	protos  []int
}

func (s *seen) record(r *http.Request, body []byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.methods = append(s.methods, r.Method)
	s.headers = append(s.headers, r.Header.Clone())
	s.bodies = append(s.bodies, body)
	s.remotes = append(s.remotes, r.RemoteAddr)
	s.protos = append(s.protos, r.ProtoMajor)
	return len(s.methods)
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.methods)
}

// recordingHandler records every request (after reading its body) and then
// calls next.
func recordingHandler(s *seen, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.record(r, body)
		next(w, r)
	}
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// allowTestLoopback lifts 127.0.0.1, where httptest servers listen, out of the
// default egress deny set; the other loopback addresses stay denied.
var allowTestLoopback = egress.New(egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})

// newExecutor returns an executor whose egress policy allows 127.0.0.1 (unless
// opts set another one).
func newExecutor(t *testing.T, opts ...Option) *HTTPExecutor {
	t.Helper()
	e := New(append([]Option{WithEgressPolicy(allowTestLoopback)}, opts...)...)
	t.Cleanup(e.CloseIdleConnections)
	return e
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// closedAddr returns a loopback address on which nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l := listenLoopback(t)
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "httpexec test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// clientCert issues a client certificate and returns it and its key as PEM.
func (ca *testCA) clientCert(t *testing.T, cn string) (certPEMBytes, keyPEMBytes []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// blockUntilClientGone returns a handler that records the request, signals
// received, and blocks until the client went away or the test ends.
func blockUntilClientGone(t *testing.T, s *seen, received chan<- struct{}) http.HandlerFunc {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return recordingHandler(s, func(_ http.ResponseWriter, r *http.Request) {
		received <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
}

// hijackAndClose closes the connection without answering. The request
// (including its body) has been read completely, so the close is a clean FIN.
func hijackAndClose(t *testing.T, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	_ = conn.Close()
}

func ctxWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cancel
}
