// Package subject holds envtest integration tests of spec.subject: actions of one namespace on one business
// object run one at a time, in creation order, and wait (sending nothing) behind an OutcomeUnknown holder until
// a person decides it. Each test runs the real manager in-process against a real kube-apiserver and a real
// loopback destination that counts requests and records how many were in flight at once.
package subject

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/actionledger/actionledger/test/envtestutil"
)

var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

// recorder is a loopback destination: every path answers 201 after its delay (default none), and the recorder
// counts requests per path, the most in flight at once over all paths, and the order in which paths arrived.
type recorder struct {
	mu       sync.Mutex
	delay    map[string]time.Duration
	count    map[string]int
	inFlight int
	maxIn    int
	order    []string
}

func newRecorder(t *testing.T, delay map[string]time.Duration) (*recorder, string) {
	t.Helper()
	r := &recorder{delay: delay, count: map[string]int{}}
	ts := httptest.NewServer(r)
	t.Cleanup(ts.Close)
	return r, ts.URL
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.count[req.URL.Path]++
	r.order = append(r.order, req.URL.Path)
	r.inFlight++
	r.maxIn = max(r.maxIn, r.inFlight)
	d := r.delay[req.URL.Path]
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.inFlight--; r.mu.Unlock() }()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-req.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (r *recorder) requests(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[path]
}

func (r *recorder) maxInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxIn
}

func (r *recorder) arrivals() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}
