package httpexec

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/test/destination"
)

// countingServer serves 200 on addr ("127.0.0.2:0") and counts accepted connections and requests.
func countingServer(t *testing.T, addr string, tlsServer bool) (*httptest.Server, *destination.CountingListener, *seen) {
	t.Helper()
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	cl := &destination.CountingListener{Listener: l}
	s := &seen{}
	srv := httptest.NewUnstartedServer(recordingHandler(s, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	srv.Listener = cl
	if tlsServer {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, cl, s
}

func policy(t *testing.T, allow string) *egress.Policy {
	t.Helper()
	p, err := egress.ParseCIDRs(allow)
	if err != nil {
		t.Fatal(err)
	}
	return egress.New(egress.Config{Allow: p})
}

func port(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	_, p, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func assertDenied(t *testing.T, res Result, l *destination.CountingListener, s *seen, addr string) {
	t.Helper()
	if res.ErrorClass != ClassEgressDenied || res.Written || res.Response != nil {
		t.Fatalf("result class %q written %v response %v err %v, want EgressDenied, not written",
			res.ErrorClass, res.Written, res.Response != nil, res.Err)
	}
	if n := l.Accepted(); n != 0 {
		t.Errorf("the denied listener accepted %d connections, want 0", n)
	}
	if n := s.count(); n != 0 {
		t.Errorf("the denied listener received %d requests, want 0", n)
	}
	var xerr *Error
	if !errors.As(res.Err, &xerr) || xerr.Class != ClassEgressDenied || !egress.IsDenied(res.Err) {
		t.Errorf("err %v (%T): want an *Error of class EgressDenied wrapping an *egress.DeniedError", res.Err, res.Err)
	}
	if msg := res.Err.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, egress.FlagAllow) {
		t.Errorf("error %q does not name the address %s and %s", msg, addr, egress.FlagAllow)
	}
}

// A server on 127.0.0.1 (denied by default) and one on 127.0.0.2 (allowed by the policy): the denied one
// never sees a connection, with or without a body (the pooled and the fresh transport).
func TestEgressDeniedListenerGetsNothing(t *testing.T) {
	denied, dl, ds := countingServer(t, "127.0.0.1:0", false)
	allowed, al, as := countingServer(t, "127.0.0.2:0", false)
	e := newExecutor(t, WithEgressPolicy(policy(t, "127.0.0.2/32")))
	for _, body := range [][]byte{nil, []byte(`{"a":1}`)} {
		req := Request{Method: http.MethodPost, URL: denied.URL + "/x", Body: body, Timeout: testTimeout,
			Header: http.Header{hdrIdempotencyKey: {"k"}}}
		assertDenied(t, e.Execute(context.Background(), req, 100), dl, ds, "127.0.0.1")

		req.URL = allowed.URL + "/x"
		if res := e.Execute(context.Background(), req, 100); res.Err != nil || res.Response.StatusCode != http.StatusOK {
			t.Fatalf("allowed 127.0.0.2: %+v", res)
		}
	}
	if al.Accepted() == 0 || as.count() != 2 {
		t.Errorf("allowed listener: %d connections, %d requests, want >0 and 2", al.Accepted(), as.count())
	}
}

// New() without options denies loopback: the executor is safe by default.
func TestEgressDefaultPolicyDeniesLoopback(t *testing.T) {
	srv, l, s := countingServer(t, "127.0.0.1:0", false)
	e := New()
	t.Cleanup(e.CloseIdleConnections)
	assertDenied(t, e.Execute(context.Background(), Request{URL: srv.URL, Timeout: testTimeout}, 0), l, s, "127.0.0.1")
}

// The check is on the resolved address: "localhost" is a name, and it resolves to a denied loopback
// address. The same policy lets 127.0.0.2 through, so the name alone is what is refused.
func TestEgressChecksTheResolvedAddress(t *testing.T) {
	srv, l, s := countingServer(t, "127.0.0.1:0", false)
	e := newExecutor(t, WithEgressPolicy(policy(t, "127.0.0.2/32")))
	res := e.Execute(context.Background(), Request{URL: "http://localhost:" + port(t, srv) + "/", Timeout: testTimeout}, 0)
	if res.ErrorClass != ClassEgressDenied {
		t.Fatalf("localhost: class %q err %v, want EgressDenied (is the check on the resolved address?)", res.ErrorClass, res.Err)
	}
	assertDenied(t, res, l, s, "127.0.0.1")
}

// An IPv4-mapped IPv6 literal is unmapped before the check: [::ffff:127.0.0.1] is 127.0.0.1, denied
// unless 127.0.0.1 is allowed, and then it connects.
func TestEgressIPv4MappedLiteral(t *testing.T) {
	srv, l, s := countingServer(t, "127.0.0.1:0", false)
	url := "http://[::ffff:127.0.0.1]:" + port(t, srv) + "/"
	e := newExecutor(t, WithEgressPolicy(policy(t, "127.0.0.2/32")))
	assertDenied(t, e.Execute(context.Background(), Request{URL: url, Timeout: testTimeout}, 0), l, s, "127.0.0.1")

	open := newExecutor(t, WithEgressPolicy(policy(t, "127.0.0.1/32")))
	if res := open.Execute(context.Background(), Request{URL: url, Timeout: testTimeout}, 0); res.Err != nil {
		t.Fatalf("[::ffff:127.0.0.1] with 127.0.0.1/32 allowed: %v", res.Err)
	}
}

// A denied https destination is EgressDenied, not a TLS failure: the handshake never starts.
func TestEgressDeniedBeforeTLS(t *testing.T) {
	srv, l, s := countingServer(t, "127.0.0.1:0", true)
	e := newExecutor(t, WithEgressPolicy(policy(t, "127.0.0.2/32")))
	res := e.Execute(context.Background(), Request{URL: srv.URL, Timeout: testTimeout,
		TLS: &TLSOptions{InsecureSkipVerify: true}}, 0)
	assertDenied(t, res, l, s, "127.0.0.1")
}

// DialContext, for other clients (a token endpoint), applies the same policy.
func TestEgressDialContext(t *testing.T) {
	srv, l, _ := countingServer(t, "127.0.0.1:0", false)
	e := newExecutor(t, WithEgressPolicy(policy(t, "127.0.0.2/32")))
	c, err := e.DialContext(context.Background(), "tcp", srv.Listener.Addr().String())
	if err == nil {
		_ = c.Close()
		t.Fatal("DialContext to 127.0.0.1 succeeded, want denied")
	}
	if !egress.IsDenied(err) {
		t.Errorf("DialContext error %v is not an egress denial", err)
	}
	if n := l.Accepted(); n != 0 {
		t.Errorf("listener accepted %d connections, want 0", n)
	}
	// The policy is the executor's: allowing 127.0.0.1 lets the same dial through.
	open := newExecutor(t)
	c, err = open.DialContext(context.Background(), "tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("DialContext with 127.0.0.1 allowed: %v", err)
	}
	_ = c.Close()
}

// The API server's addresses, set after the executor was built, are denied from then on.
func TestEgressAPIServerAddressesTakeEffect(t *testing.T) {
	srv, l, s := countingServer(t, "127.0.0.2:0", false)
	p := policy(t, "127.0.0.0/8")
	e := newExecutor(t, WithEgressPolicy(p))
	if res := e.Execute(context.Background(), Request{URL: srv.URL, Timeout: testTimeout}, 0); res.Err != nil {
		t.Fatalf("before SetAPIServer: %v", res.Err)
	}
	before := l.Accepted()
	p.SetAPIServer([]netip.Addr{netip.MustParseAddr("127.0.0.2")})
	res := e.Execute(context.Background(), Request{URL: srv.URL, Timeout: testTimeout}, 0)
	if res.ErrorClass != ClassEgressDenied || res.Written {
		t.Fatalf("after SetAPIServer: class %q written %v, want EgressDenied", res.ErrorClass, res.Written)
	}
	if l.Accepted() != before || s.count() != 1 {
		t.Errorf("connections %d -> %d, requests %d: the API server address was reached", before, l.Accepted(), s.count())
	}
}
