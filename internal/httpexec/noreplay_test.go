package httpexec

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
)

// dropServer reproduces the situation in which net/http's Transport replays
// a request on its own (transport.go, persistConn.shouldRetryRequest):
//
//  1. GET/POST /warm is answered normally with keep-alive, so the client
//     puts the connection into its idle pool.
//  2. The next request to /target goes out on that reused connection. The
//     server reads it completely (it "received" the side effect) and then
//     closes the connection without answering, exactly what the client sees
//     when a keep-alive connection is closed by the server (idle timeout,
//     restart, load balancer) while the request is in flight.
//  3. The client's read loop gets io.EOF on a reused connection and wraps it
//     in transportReadFromServerError. Bytes were written, so it is not a
//     nothingWrittenError, but if Request.isReplayable() is true (no body or
//     GetBody set, and a safe method or an Idempotency-Key /
//     X-Idempotency-Key header), shouldRetryRequest returns true and the
//     Transport silently sends the request again on a new connection.
//  4. Later /target requests are answered with 200, so a replay turns the
//     failure into a "success" while the server got the request twice.
type dropServer struct {
	srv    *httptest.Server
	warm   seen
	target seen
}

func newDropServer(t *testing.T) *dropServer {
	d := &dropServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/warm", recordingHandler(&d.warm, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("warm"))
	}))
	mux.HandleFunc("/target", recordingHandler(&d.target, func(w http.ResponseWriter, _ *http.Request) {
		if d.target.count() == 1 {
			hijackAndClose(t, w)
			return
		}
		_, _ = w.Write([]byte("second delivery"))
	}))
	d.srv = newServer(t, mux)
	return d
}

// targets returns the remote addresses of the /target requests and of the
// /warm request.
func (d *dropServer) addrs() (targets []string, warm string) {
	d.target.mu.Lock()
	targets = append([]string(nil), d.target.remotes...)
	d.target.mu.Unlock()
	d.warm.mu.Lock()
	defer d.warm.mu.Unlock()
	if len(d.warm.remotes) > 0 {
		warm = d.warm.remotes[0]
	}
	return targets, warm
}

var noReplayCases = []struct {
	name   string
	method string
	body   []byte
	header http.Header
	// keepGetBody keeps the GetBody that http.NewRequest sets for a
	// *bytes.Reader (control client only; the executor always clears it).
	keepGetBody bool
	// netHTTPDeliveries is how many times plain net/http delivers the request.
	netHTTPDeliveries int
}{
	{"body-less POST with Idempotency-Key", http.MethodPost, nil,
		http.Header{hdrIdempotencyKey: {"k1"}}, false, 2},
	{"body-less POST with X-Idempotency-Key", http.MethodPost, nil,
		http.Header{"X-Idempotency-Key": {"k1"}}, false, 2},
	{"body-less DELETE with Idempotency-Key", http.MethodDelete, nil,
		http.Header{hdrIdempotencyKey: {"k1"}}, false, 2},
	{"GET", http.MethodGet, nil, nil, false, 2},
	{"POST with body and GetBody, Idempotency-Key", http.MethodPost, []byte(`{"a":1}`),
		http.Header{hdrIdempotencyKey: {"k1"}}, true, 2},
	{"POST with body, GetBody cleared, Idempotency-Key", http.MethodPost, []byte(`{"a":1}`),
		http.Header{hdrIdempotencyKey: {"k1"}}, false, 1},
}

// TestNetHTTPReplaysOnReusedConnection is the control: it shows that the
// dropServer scenario does trigger net/http's replay path for a plain
// http.Transport, so TestExecutorNeverReplays below proves something.
func TestNetHTTPReplaysOnReusedConnection(t *testing.T) {
	for _, tc := range noReplayCases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDropServer(t)
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: tr}

			warm, err := http.NewRequestWithContext(context.Background(), http.MethodGet, d.srv.URL+"/warm", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(warm)
			if err != nil {
				t.Fatal(err)
			}
			// Reading to EOF returns the connection to the idle pool before
			// Read returns io.EOF.
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()

			var body io.Reader
			if tc.body != nil {
				body = bytes.NewReader(tc.body)
			}
			req, err := http.NewRequestWithContext(context.Background(), tc.method, d.srv.URL+"/target", body)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.keepGetBody {
				req.GetBody = nil
			}
			maps.Copy(req.Header, tc.header)
			resp, err = client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}

			targets, warmAddr := d.addrs()
			if len(targets) == 0 || targets[0] != warmAddr {
				t.Fatalf("first /target delivery did not reuse the warm connection (%v vs %s)", targets, warmAddr)
			}
			if len(targets) != tc.netHTTPDeliveries {
				t.Errorf("net/http delivered the request %d times, expected %d: net/http's replay behaviour changed",
					len(targets), tc.netHTTPDeliveries)
			}
			if tc.netHTTPDeliveries == 2 && (err != nil || resp.StatusCode != http.StatusOK) {
				t.Errorf("replayed request should have looked successful: err=%v", err)
			}
		})
	}
}

// TestExecutorNeverReplays: the same scenario through the executor delivers
// the request exactly once and reports an uncertain outcome.
func TestExecutorNeverReplays(t *testing.T) {
	for _, tc := range noReplayCases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDropServer(t)
			e := newExecutor(t)

			// Leaves an idle keep-alive connection in the pooled transport.
			warm := e.Execute(context.Background(), Request{
				Method: http.MethodPost, URL: d.srv.URL + "/warm", Body: []byte("{}"), Timeout: testTimeout,
			}, 100)
			if warm.Err != nil {
				t.Fatal(warm.Err)
			}

			res := e.Execute(context.Background(), Request{
				Method: tc.method, URL: d.srv.URL + "/target", Body: tc.body, Header: tc.header, Timeout: testTimeout,
			}, 100)

			targets, warmAddr := d.addrs()
			if len(targets) != 1 {
				t.Fatalf("server received the request %d times, want exactly 1 (result: %+v)", len(targets), res)
			}
			if res.Err == nil {
				t.Fatalf("got response %d, want the connection-closed error", res.Response.StatusCode)
			}
			if res.ErrorClass != ClassConnectionReset || !res.Written {
				t.Errorf("ErrorClass=%q Written=%v, want ConnectionReset, true (err: %v)", res.ErrorClass, res.Written, res.Err)
			}
			if want := "server closed the connection after the request was sent: EOF"; res.Err.Error() != want {
				t.Errorf("error text = %q, want %q", res.Err, want)
			}
			// Requests with a body did go out on the reused connection (so the
			// replay path was reachable and GetBody==nil is what stopped it);
			// body-less ones were sent on a fresh connection.
			reused := targets[0] == warmAddr
			if wantReused := len(tc.body) > 0; reused != wantReused {
				t.Errorf("reused warm connection = %v, want %v", reused, wantReused)
			}
		})
	}
}

// TestBodylessRequestsNeverReuseConnections: every body-less request gets its
// own connection, even back to back, and no connection is kept idle for them.
func TestBodylessRequestsNeverReuseConnections(t *testing.T) {
	var s seen
	srv := newServer(t, recordingHandler(&s, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	e := newExecutor(t)
	for range 3 {
		res := e.Execute(context.Background(), Request{
			Method: http.MethodPost, URL: srv.URL, Header: http.Header{hdrIdempotencyKey: {"k"}}, Timeout: testTimeout,
		}, 10)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs := map[string]bool{}
	for _, a := range s.remotes {
		addrs[a] = true
	}
	if len(addrs) != 3 {
		t.Errorf("3 body-less requests used %d connections, want 3: %v", len(addrs), s.remotes)
	}
	for _, h := range s.headers {
		if h.Get("Connection") != "close" {
			t.Errorf("Connection header = %q, want close", h.Get("Connection"))
		}
	}
}

// TestRequestsWithBodyReuseConnections: the pooled transport does keep
// connections alive.
func TestRequestsWithBodyReuseConnections(t *testing.T) {
	var s seen
	srv := newServer(t, recordingHandler(&s, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	e := newExecutor(t)
	for range 3 {
		res := e.Execute(context.Background(), Request{
			Method: http.MethodPost, URL: srv.URL, Body: []byte("{}"), Timeout: testTimeout,
		}, 10)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.remotes[0] != s.remotes[1] || s.remotes[1] != s.remotes[2] {
		t.Errorf("requests with a body did not reuse the connection: %v", s.remotes)
	}
}
