package httpexec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExecuteCapsBodyAndHashesFullBody(t *testing.T) {
	full := bytes.Repeat([]byte("0123456789"), 10) // 100 bytes
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Request-Id", "r-1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(full)
	}))
	e := newExecutor(t)

	tests := []struct {
		name          string
		maxBodyBytes  int
		wantBody      []byte
		wantTruncated bool
	}{
		{"cap 10 of 100", 10, full[:10], true},
		{"cap equals length", 100, full, false},
		{"cap above length", 1000, full, false},
		{"cap 0 keeps nothing", 0, nil, true},
		{"negative cap keeps nothing", -5, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.Execute(context.Background(), Request{
				Method: http.MethodPost, URL: srv.URL + "/x", Body: []byte(`{"a":1}`), Timeout: testTimeout,
			}, tt.maxBodyBytes)
			if res.Err != nil {
				t.Fatalf("Err = %v", res.Err)
			}
			r := res.Response
			if r.StatusCode != http.StatusCreated {
				t.Errorf("StatusCode = %d", r.StatusCode)
			}
			if got := r.Header.Get("X-Request-Id"); got != "r-1" {
				t.Errorf("header X-Request-Id = %q", got)
			}
			if !bytes.Equal(r.Body, tt.wantBody) {
				t.Errorf("Body = %q, want %q", r.Body, tt.wantBody)
			}
			if r.BodyTruncated != tt.wantTruncated {
				t.Errorf("BodyTruncated = %v, want %v", r.BodyTruncated, tt.wantTruncated)
			}
			if r.BodySHA256 != sha(full) {
				t.Errorf("BodySHA256 = %s, want hash of the full body %s", r.BodySHA256, sha(full))
			}
			if r.BodyLength != int64(len(full)) || r.BodyErr != nil {
				t.Errorf("BodyLength = %d, BodyErr = %v", r.BodyLength, r.BodyErr)
			}
			if !res.Written || !res.WroteRequest || res.ErrorClass != "" || res.Duration <= 0 {
				t.Errorf("Written=%v WroteRequest=%v ErrorClass=%q Duration=%v",
					res.Written, res.WroteRequest, res.ErrorClass, res.Duration)
			}
		})
	}
}

func TestExecuteHardReadLimit(t *testing.T) {
	full := bytes.Repeat([]byte("a"), 100)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(full)
	}))
	tests := []struct {
		name          string
		limit         int64
		wantLen       int64
		wantTruncated bool
	}{
		{"limit below body", 50, 50, true},
		{"limit equals body", 100, 100, false},
		{"limit above body", 101, 100, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newExecutor(t, WithMaxReadBytes(tt.limit))
			res := e.Execute(context.Background(), Request{URL: srv.URL, Timeout: testTimeout}, 1000)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			r := res.Response
			if r.BodyLength != tt.wantLen || int64(len(r.Body)) != tt.wantLen {
				t.Errorf("BodyLength = %d, len(Body) = %d, want %d", r.BodyLength, len(r.Body), tt.wantLen)
			}
			if r.BodyTruncated != tt.wantTruncated {
				t.Errorf("BodyTruncated = %v, want %v", r.BodyTruncated, tt.wantTruncated)
			}
			if want := sha(full[:tt.wantLen]); r.BodySHA256 != want {
				t.Errorf("BodySHA256 = %s, want hash over the bytes read %s", r.BodySHA256, want)
			}
		})
	}
}

func TestRedirectsAreNotFollowed(t *testing.T) {
	for _, code := range []int{
		http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect,
	} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			var target seen
			mux := http.NewServeMux()
			mux.HandleFunc("/from", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/to", code)
			})
			mux.HandleFunc("/to", recordingHandler(&target, func(http.ResponseWriter, *http.Request) {}))
			srv := newServer(t, mux)
			e := newExecutor(t)
			for _, body := range [][]byte{nil, []byte(`{}`)} {
				res := e.Execute(context.Background(), Request{
					Method: http.MethodPost, URL: srv.URL + "/from", Body: body, Timeout: testTimeout,
				}, 1024)
				if res.Err != nil {
					t.Fatal(res.Err)
				}
				if res.Response.StatusCode != code {
					t.Errorf("StatusCode = %d, want %d", res.Response.StatusCode, code)
				}
				if loc := res.Response.Header.Get("Location"); loc != "/to" {
					t.Errorf("Location = %q", loc)
				}
			}
			if n := target.count(); n != 0 {
				t.Errorf("redirect target received %d requests, want 0", n)
			}
		})
	}
}

func TestHeadersAndBodySentAsGiven(t *testing.T) {
	var s seen
	srv := newServer(t, recordingHandler(&s, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	e := newExecutor(t)
	body := []byte(`{"amount":100,"currency":"EUR"}`)
	tests := []struct {
		name   string
		method string
		body   []byte
	}{
		{"POST with body", http.MethodPost, body},
		{"PUT with body", http.MethodPut, body},
		{"body-less DELETE", http.MethodDelete, nil},
		{"body-less POST", http.MethodPost, nil},
		{"empty non-nil body", http.MethodPost, []byte{}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{
				hdrIdempotencyKey: {"key-" + strconv.Itoa(i)},
				"Authorization":   {"Bearer token-value"},
				"Content-Type":    {"application/json"},
				"X-Multi":         {"one", "two"},
			}
			orig := h.Clone()
			res := e.Execute(context.Background(), Request{
				Method: tt.method, URL: srv.URL + "/pay?x=1", Header: h, Body: tt.body, Timeout: testTimeout,
			}, 1024)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if res.Response.StatusCode != http.StatusAccepted {
				t.Errorf("StatusCode = %d", res.Response.StatusCode)
			}
			s.mu.Lock()
			got, gotBody, gotMethod := s.headers[i], s.bodies[i], s.methods[i]
			s.mu.Unlock()
			if gotMethod != tt.method {
				t.Errorf("method = %q, want %q", gotMethod, tt.method)
			}
			for k, v := range orig {
				if strings.Join(got[k], ",") != strings.Join(v, ",") {
					t.Errorf("header %s = %q, want %q", k, got[k], v)
				}
			}
			if !bytes.Equal(gotBody, tt.body) {
				t.Errorf("body = %q, want %q", gotBody, tt.body)
			}
			if len(tt.body) > 0 {
				if cl := got.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(tt.body)) {
					t.Errorf("Content-Length = %q", cl)
				}
				if te := got.Get("Transfer-Encoding"); te != "" {
					t.Errorf("Transfer-Encoding = %q, want a fixed Content-Length", te)
				}
			}
			if ae := got.Values("Accept-Encoding"); len(ae) != 1 || ae[0] != "identity" {
				t.Errorf("Accept-Encoding = %q, want only identity: the body must come as it is, uncompressed", ae)
			}
			if !equalHeader(h, orig) {
				t.Errorf("Execute modified the caller's header: %v", h)
			}
		})
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

func TestHostHeaderOverridesRequestHost(t *testing.T) {
	gotHost := make(chan string, 1)
	srv := newServer(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { gotHost <- r.Host }))
	e := newExecutor(t)
	res := e.Execute(context.Background(), Request{
		URL: srv.URL, Header: http.Header{"Host": {"api.example.test"}}, Timeout: testTimeout,
	}, 0)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if h := <-gotHost; h != "api.example.test" {
		t.Errorf("Host = %q", h)
	}
}

// TestFailuresBeforeTheRequestLeft covers failures that prove nothing was
// sent: Written must be false.
func TestFailuresBeforeTheRequestLeft(t *testing.T) {
	refused := closedAddr(t)
	tests := []struct {
		name      string
		url       string
		wantClass ErrorClass
		wantText  string
	}{
		{"connection refused", "http://" + refused + "/x", ClassDial, "dial tcp " + refused + ": connect: connection refused"},
		{"DNS failure", "http://no-such-host.invalid/x", ClassDNS, "lookup no-such-host.invalid"},
		{"unsupported scheme", "ftp://127.0.0.1/x", ClassOther, "unsupported protocol scheme"},
		{"invalid URL", "http://[::1", ClassOther, "invalid request URL"},
	}
	e := newExecutor(t)
	for _, tt := range tests {
		for _, body := range [][]byte{nil, []byte(`{}`)} {
			t.Run(tt.name+"/body="+strconv.Itoa(len(body)), func(t *testing.T) {
				res := e.Execute(context.Background(), Request{
					Method: http.MethodPost, URL: tt.url, Body: body,
					Header:  http.Header{hdrIdempotencyKey: {"k"}},
					Timeout: testTimeout,
				}, 1024)
				if res.Err == nil {
					t.Fatalf("no error, response %+v", res.Response)
				}
				if res.ErrorClass != tt.wantClass {
					t.Errorf("ErrorClass = %q, want %q (err: %v)", res.ErrorClass, tt.wantClass, res.Err)
				}
				var xe *Error
				if !errors.As(res.Err, &xe) || xe.Class != res.ErrorClass {
					t.Errorf("Err is not an *Error with the same class: %#v", res.Err)
				}
				if res.Written || res.WroteRequest || res.Response != nil {
					t.Errorf("Written = %v, WroteRequest = %v, Response = %v; want false, false, nil",
						res.Written, res.WroteRequest, res.Response)
				}
				if !strings.Contains(res.Err.Error(), tt.wantText) {
					t.Errorf("error text %q does not contain %q", res.Err, tt.wantText)
				}
			})
		}
	}
}

func TestDialRefusedErrorTextIsShort(t *testing.T) {
	e := newExecutor(t)
	res := e.Execute(context.Background(), Request{Method: http.MethodPost, URL: "http://127.0.0.1:1/x", Body: []byte("{}")}, 0)
	if got, want := res.Err.Error(), "dial tcp 127.0.0.1:1: connect: connection refused"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	if !errors.Is(res.Err, syscall.ECONNREFUSED) {
		t.Errorf("errors.Is(err, ECONNREFUSED) = false; Unwrap chain lost: %#v", res.Err)
	}
}

func TestTimeoutAfterRequestWasWritten(t *testing.T) {
	for _, body := range [][]byte{nil, []byte(`{"a":1}`)} {
		t.Run("body="+strconv.Itoa(len(body)), func(t *testing.T) {
			var s seen
			received := make(chan struct{}, 1)
			srv := newServer(t, blockUntilClientGone(t, &s, received))
			e := newExecutor(t)
			res := e.Execute(context.Background(), Request{
				Method: http.MethodPost, URL: srv.URL, Body: body,
				Header:  http.Header{hdrIdempotencyKey: {"k"}},
				Timeout: 300 * time.Millisecond,
			}, 1024)
			<-received
			if res.ErrorClass != ClassTimeout || !res.Written || !res.WroteRequest || res.Response != nil {
				t.Errorf("ErrorClass=%q Written=%v WroteRequest=%v Response=%v, want Timeout, true, true, nil (err: %v)",
					res.ErrorClass, res.Written, res.WroteRequest, res.Response, res.Err)
			}
			if !errors.Is(res.Err, context.DeadlineExceeded) {
				t.Errorf("errors.Is(err, DeadlineExceeded) = false: %v", res.Err)
			}
			if !strings.Contains(res.Err.Error(), "attempt timeout 300ms exceeded after the request was sent") {
				t.Errorf("error text = %q", res.Err)
			}
			if n := s.count(); n != 1 {
				t.Errorf("server received %d requests, want exactly 1", n)
			}
		})
	}
}

func TestCallerCancelAfterRequestWasWritten(t *testing.T) {
	var s seen
	received := make(chan struct{}, 1)
	srv := newServer(t, blockUntilClientGone(t, &s, received))
	e := newExecutor(t)
	ctx, cancel := ctxWithCancel(t)
	go func() {
		<-received
		cancel()
	}()
	res := e.Execute(ctx, Request{Method: http.MethodPost, URL: srv.URL, Body: []byte("{}"), Timeout: testTimeout}, 0)
	if res.ErrorClass != ClassCanceled || !res.Written {
		t.Errorf("ErrorClass=%q Written=%v, want Canceled, true (err: %v)", res.ErrorClass, res.Written, res.Err)
	}
	if n := s.count(); n != 1 {
		t.Errorf("server received %d requests, want 1", n)
	}
}

func TestCanceledBeforeConnecting(t *testing.T) {
	e := newExecutor(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := e.Execute(ctx, Request{URL: "http://127.0.0.1:1/", Timeout: testTimeout}, 0)
	if res.ErrorClass != ClassCanceled || res.Written {
		t.Errorf("ErrorClass=%q Written=%v, want Canceled, false (err: %v)", res.ErrorClass, res.Written, res.Err)
	}
}

func TestConnectionClosedAfterServerReadRequest(t *testing.T) {
	for _, body := range [][]byte{nil, []byte(`{"a":1}`)} {
		t.Run("body="+strconv.Itoa(len(body)), func(t *testing.T) {
			var s seen
			srv := newServer(t, recordingHandler(&s, func(w http.ResponseWriter, _ *http.Request) {
				hijackAndClose(t, w)
			}))
			e := newExecutor(t)
			res := e.Execute(context.Background(), Request{
				Method: http.MethodPost, URL: srv.URL, Body: body,
				Header:  http.Header{hdrIdempotencyKey: {"k"}},
				Timeout: testTimeout,
			}, 1024)
			if res.ErrorClass != ClassConnectionReset && res.ErrorClass != ClassProtocol {
				t.Errorf("ErrorClass = %q, want ConnectionReset or Protocol (err: %v)", res.ErrorClass, res.Err)
			}
			if !res.Written || res.Response != nil {
				t.Errorf("Written = %v, Response = %v; want true, nil", res.Written, res.Response)
			}
			if n := s.count(); n != 1 {
				t.Errorf("server received %d requests, want exactly 1", n)
			}
		})
	}
}

// TestBodyReadFailureKeepsTheResponse: the status arrived, so the outcome is
// known; the broken body is reported in Response.BodyErr.
func TestBodyReadFailureKeepsTheResponse(t *testing.T) {
	t.Run("short body then close", func(t *testing.T) {
		srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("0123456789")) // server closes the connection after a short body
		}))
		e := newExecutor(t)
		res := e.Execute(context.Background(), Request{Method: http.MethodPost, URL: srv.URL, Body: []byte("{}"), Timeout: testTimeout}, 5)
		if res.Err != nil || res.Response == nil {
			t.Fatalf("Err = %v", res.Err)
		}
		r := res.Response
		if r.StatusCode != http.StatusOK || !r.BodyTruncated || r.BodyErr == nil || string(r.Body) != "01234" {
			t.Errorf("got status %d truncated %v bodyErr %v body %q", r.StatusCode, r.BodyTruncated, r.BodyErr, r.Body)
		}
		if r.BodySHA256 != sha([]byte("0123456789")) || r.BodyLength != 10 {
			t.Errorf("BodySHA256/BodyLength not over the bytes read: %s %d", r.BodySHA256, r.BodyLength)
		}
		var xe *Error
		if !errors.As(r.BodyErr, &xe) || xe.Class != ClassConnectionReset {
			t.Errorf("BodyErr = %#v, want *Error ConnectionReset", r.BodyErr)
		}
	})
	t.Run("body stalls past the timeout", func(t *testing.T) {
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("partial"))
			_ = http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		e := newExecutor(t)
		res := e.Execute(context.Background(), Request{URL: srv.URL, Timeout: 300 * time.Millisecond}, 100)
		if res.Err != nil || res.Response == nil {
			t.Fatalf("Err = %v", res.Err)
		}
		var xe *Error
		if !errors.As(res.Response.BodyErr, &xe) || xe.Class != ClassTimeout {
			t.Errorf("BodyErr = %v, want Timeout", res.Response.BodyErr)
		}
		if string(res.Response.Body) != "partial" || !res.Response.BodyTruncated {
			t.Errorf("Body = %q truncated %v", res.Response.Body, res.Response.BodyTruncated)
		}
	})
}

// TestErrorsCarryNoSecrets: errors never echo userinfo, header values, the
// query or the body.
func TestErrorsCarryNoSecrets(t *testing.T) {
	const secret = "s3cr3tvalue"
	var s seen
	srv := newServer(t, recordingHandler(&s, func(w http.ResponseWriter, _ *http.Request) { hijackAndClose(t, w) }))
	received := make(chan struct{}, 1)
	slow := newServer(t, blockUntilClientGone(t, &seen{}, received))
	hostPort := func(u string) string { return strings.TrimPrefix(u, "http://") }
	tests := []struct {
		name    string
		url     string
		timeout time.Duration
	}{
		{"refused", "http://user:" + secret + "@" + closedAddr(t) + "/p?token=" + secret, testTimeout},
		{"reset", "http://user:" + secret + "@" + hostPort(srv.URL) + "/p?token=" + secret, testTimeout},
		{"timeout", "http://user:" + secret + "@" + hostPort(slow.URL) + "/p?token=" + secret, 200 * time.Millisecond},
		{"bad escape in userinfo", "http://user:" + secret + "%zz@127.0.0.1/", testTimeout},
		{"bad port", "http://user:" + secret + "@127.0.0.1:99999999/", testTimeout},
		{"bad host", "http://user:" + secret + "@exa mple.com/", testTimeout},
	}
	e := newExecutor(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.Execute(context.Background(), Request{
				Method: http.MethodPost, URL: tt.url, Timeout: tt.timeout, Body: []byte(`{"p":"` + secret + `"}`),
				Header: http.Header{"Authorization": {"Bearer " + secret}, hdrIdempotencyKey: {secret}},
			}, 0)
			if res.Err == nil {
				t.Fatal("expected an error")
			}
			if strings.Contains(res.Err.Error(), secret) || strings.Contains(res.Err.Error(), "user") {
				t.Errorf("error leaks a secret: %q", res.Err)
			}
			if len(res.Err.Error()) > maxErrorText+3 {
				t.Errorf("error text too long: %d bytes", len(res.Err.Error()))
			}
		})
	}
}

func TestTLSOptionsErrors(t *testing.T) {
	ca := newTestCA(t)
	certPEMBytes, _ := ca.clientCert(t, "client")
	tests := []struct {
		name string
		tls  *TLSOptions
		want string
	}{
		{"CA bundle without PEM", &TLSOptions{CABundle: []byte("not pem")}, "CA bundle contains no PEM certificate"},
		{"cert without key", &TLSOptions{ClientCert: certPEMBytes}, "client certificate/key"},
		{"key mismatch", &TLSOptions{ClientCert: certPEMBytes, ClientKey: []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")}, "client certificate/key"},
	}
	e := newExecutor(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.Execute(context.Background(), Request{URL: "https://127.0.0.1:1/", TLS: tt.tls}, 0)
			if res.ErrorClass != ClassOther || res.Written || !strings.Contains(res.Err.Error(), tt.want) {
				t.Errorf("got %q written=%v err=%v", res.ErrorClass, res.Written, res.Err)
			}
		})
	}
}

func TestAttemptTimeoutDefault(t *testing.T) {
	// A zero timeout must mean DefaultTimeout, not "no timeout". The
	// attempt deadline is observed by swapping the cached fresh client's
	// transport for a fake.
	var deadline time.Time
	var ok bool
	e := newExecutor(t)
	cl, err := e.cache.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	orig := cl.fresh.Transport
	cl.fresh.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		deadline, ok = r.Context().Deadline()
		return nil, errors.New("stop")
	})
	t.Cleanup(func() { cl.fresh.Transport = orig })
	start := time.Now()
	_ = e.Execute(context.Background(), Request{URL: "http://127.0.0.1:1/"}, 0)
	if !ok {
		t.Fatal("attempt context has no deadline")
	}
	if d := deadline.Sub(start); d < DefaultTimeout-time.Second || d > DefaultTimeout+time.Second {
		t.Errorf("deadline in %v, want about %v", d, DefaultTimeout)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestReadBody(t *testing.T) {
	data := []byte("abcdefghij")
	tests := []struct {
		name     string
		keep     int
		limit    int64
		wantBody string
		wantN    int64
		wantMore bool
	}{
		{"all", 100, 100, "abcdefghij", 10, false},
		{"keep 3", 3, 100, "abc", 10, false},
		{"limit exact", 100, 10, "abcdefghij", 10, false},
		{"limit below", 100, 4, "abcd", 4, true},
		{"keep above limit", 100, 4, "abcd", 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, n, more, sum, err := readBody(bytes.NewReader(data), tt.keep, tt.limit)
			if err != nil || string(body) != tt.wantBody || n != tt.wantN || more != tt.wantMore || sum != sha(data[:n]) {
				t.Errorf("got %q %d %v %s %v", body, n, more, sum, err)
			}
		})
	}
	_, n, _, _, err := readBody(io.MultiReader(bytes.NewReader(data), errReader{}), 100, 100)
	if n != 10 || !errors.Is(err, net.ErrClosed) {
		t.Errorf("read error: n=%d err=%v", n, err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, net.ErrClosed }
