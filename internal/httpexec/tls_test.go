package httpexec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

func newTLSServer(t *testing.T, h http.Handler, cfg *tls.Config, http2 bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = http2
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestTLSUnknownAuthority(t *testing.T) {
	var s seen
	srv := newTLSServer(t, recordingHandler(&s, func(http.ResponseWriter, *http.Request) {}), nil, false)
	other := newTestCA(t)
	e := newExecutor(t)
	tests := []struct {
		name string
		tls  *TLSOptions
	}{
		{"system roots", nil},
		{"wrong CA bundle", &TLSOptions{CABundle: certPEM(other.cert)}},
	}
	for _, tt := range tests {
		for _, body := range [][]byte{nil, []byte("{}")} {
			t.Run(tt.name+"/body="+strconv.Itoa(len(body)), func(t *testing.T) {
				res := e.Execute(context.Background(), Request{
					Method: http.MethodPost, URL: srv.URL, Body: body, TLS: tt.tls, Timeout: testTimeout,
				}, 0)
				if res.ErrorClass != ClassTLSHandshake || res.Written || res.Response != nil {
					t.Errorf("ErrorClass=%q Written=%v, want TLSHandshake, false (err: %v)", res.ErrorClass, res.Written, res.Err)
				}
				if _, ok := errors.AsType[x509.UnknownAuthorityError](res.Err); !ok {
					t.Errorf("err %v does not unwrap to x509.UnknownAuthorityError", res.Err)
				}
			})
		}
	}
	if n := s.count(); n != 0 {
		t.Errorf("server received %d requests, want 0", n)
	}
}

func TestTLSWithCABundle(t *testing.T) {
	var s seen
	srv := newTLSServer(t, recordingHandler(&s, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}), &tls.Config{NextProtos: []string{"h2", "http/1.1"}}, true)
	e := newExecutor(t)
	opts := &TLSOptions{CABundle: certPEM(srv.Certificate())}
	tests := []struct {
		name      string
		body      []byte
		wantProto int
	}{
		// Requests with a body use the pooled transport: HTTP/2 over TLS.
		{"with body", []byte("{}"), 2},
		// Body-less requests always use a fresh HTTP/1.1 connection.
		{"body-less", nil, 1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.Execute(context.Background(), Request{
				Method: http.MethodPost, URL: srv.URL, Body: tt.body, TLS: opts, Timeout: testTimeout,
				Header: http.Header{hdrIdempotencyKey: {"k"}},
			}, 100)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if res.Response.StatusCode != http.StatusOK || string(res.Response.Body) != "ok" {
				t.Errorf("got %d %q", res.Response.StatusCode, res.Response.Body)
			}
			s.mu.Lock()
			proto := s.protos[i]
			s.mu.Unlock()
			if proto != tt.wantProto {
				t.Errorf("server saw HTTP/%d, want HTTP/%d", proto, tt.wantProto)
			}
		})
	}
}

func TestTLSServerNameOverride(t *testing.T) {
	// The httptest certificate is valid for example.com: connecting by IP
	// with ServerName example.com must verify.
	srv := newTLSServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), nil, false)
	e := newExecutor(t)
	res := e.Execute(context.Background(), Request{
		URL: srv.URL, Timeout: testTimeout,
		TLS: &TLSOptions{CABundle: certPEM(srv.Certificate()), ServerName: "example.com"},
	}, 0)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	res = e.Execute(context.Background(), Request{
		URL: srv.URL, Timeout: testTimeout,
		TLS: &TLSOptions{CABundle: certPEM(srv.Certificate()), ServerName: "wrong.test"},
	}, 0)
	if _, ok := errors.AsType[x509.HostnameError](res.Err); res.ErrorClass != ClassTLSHandshake || res.Written || !ok {
		t.Errorf("wrong ServerName: class %q written %v err %v", res.ErrorClass, res.Written, res.Err)
	}
	res = e.Execute(context.Background(), Request{
		URL: srv.URL, Timeout: testTimeout, TLS: &TLSOptions{InsecureSkipVerify: true},
	}, 0)
	if res.Err != nil {
		t.Errorf("InsecureSkipVerify: %v", res.Err)
	}
}

func TestTLSClientCertificate(t *testing.T) {
	ca := newTestCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	certPEMBytes, keyPEMBytes := ca.clientCert(t, "actionledger")

	for _, maxVersion := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(maxVersion), func(t *testing.T) {
			var s seen
			gotCN := make(chan string, 1)
			srv := newTLSServer(t, recordingHandler(&s, func(_ http.ResponseWriter, r *http.Request) {
				gotCN <- r.TLS.PeerCertificates[0].Subject.CommonName
			}), &tls.Config{
				ClientAuth: tls.RequireAndVerifyClientCert,
				ClientCAs:  pool,
				MaxVersion: maxVersion,
			}, false)
			e := newExecutor(t)
			caBundle := certPEM(srv.Certificate())

			res := e.Execute(context.Background(), Request{
				Method: http.MethodPost, URL: srv.URL, Body: []byte("{}"), Timeout: testTimeout,
				TLS: &TLSOptions{CABundle: caBundle, ClientCert: certPEMBytes, ClientKey: keyPEMBytes},
			}, 0)
			if res.Err != nil {
				t.Fatalf("with client certificate: %v", res.Err)
			}
			if cn := <-gotCN; cn != "actionledger" {
				t.Errorf("server saw client CN %q", cn)
			}

			res = e.Execute(context.Background(), Request{
				Method: http.MethodPost, URL: srv.URL, Body: []byte("{}"), Timeout: testTimeout,
				TLS: &TLSOptions{CABundle: caBundle},
			}, 0)
			if res.ErrorClass != ClassTLSHandshake && res.ErrorClass != ClassConnectionReset {
				t.Errorf("without client certificate: class %q (err: %v)", res.ErrorClass, res.Err)
			}
			// TLS 1.2: the handshake fails before the client has a connection.
			// TLS 1.3: the client finishes its side of the handshake and
			// sends the request before the server's alert arrives, so the
			// executor cannot claim nothing was written.
			if wantWritten := maxVersion == tls.VersionTLS13; res.Written != wantWritten {
				t.Errorf("without client certificate: Written = %v, want %v (err: %v)", res.Written, wantWritten, res.Err)
			}
			if n := s.count(); n != 1 {
				t.Errorf("handler ran %d times, want 1", n)
			}
		})
	}
}

func TestTLSHandshakeTimeout(t *testing.T) {
	// A listener that accepts TCP connections but never speaks TLS.
	l := listenLoopback(t)
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	e := newExecutor(t, WithTLSHandshakeTimeout(200*time.Millisecond))
	res := e.Execute(context.Background(), Request{
		Method: http.MethodPost, URL: "https://" + l.Addr().String(), Body: []byte("{}"), Timeout: testTimeout,
	}, 0)
	if res.ErrorClass != ClassTLSHandshake || res.Written {
		t.Errorf("ErrorClass=%q Written=%v, want TLSHandshake, false (err: %v)", res.ErrorClass, res.Written, res.Err)
	}
}

func TestTransportCache(t *testing.T) {
	ca := newTestCA(t)
	e := newExecutor(t, WithMaxCachedTransports(2))
	a := &TLSOptions{CABundle: certPEM(ca.cert)}
	a2 := &TLSOptions{CABundle: certPEM(ca.cert)}
	b := &TLSOptions{CABundle: certPEM(ca.cert), ServerName: "x"}
	get := func(o *TLSOptions) *clients {
		c, err := e.cache.get(o)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if get(a) != get(a2) {
		t.Error("equal TLS options must share a transport")
	}
	if get(nil) != get(&TLSOptions{}) {
		t.Error("nil and zero TLS options must share a transport")
	}
	if get(a) == get(b) {
		t.Error("changed TLS options must get a new transport")
	}
	if n := e.cache.len(); n != 2 {
		t.Errorf("cache holds %d entries, want 2 (LRU bound)", n)
	}
	// Field boundaries are part of the key.
	if tlsKey(&TLSOptions{ClientCert: []byte("ab"), ClientKey: []byte("c")}) ==
		tlsKey(&TLSOptions{ClientCert: []byte("a"), ClientKey: []byte("bc")}) {
		t.Error("tlsKey is ambiguous across fields")
	}
	if tlsKey(&TLSOptions{InsecureSkipVerify: true}) == tlsKey(nil) {
		t.Error("InsecureSkipVerify not in the key")
	}
}
