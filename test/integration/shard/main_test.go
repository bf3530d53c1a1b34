// Package shard holds envtest integration tests of sharded managers (--watch-label-selector): two managers in
// one process against a real kube-apiserver, each watching its own shard of ExternalActions, share one
// destination's limits through their member Leases (docs/sharding.md), and a real loopback destination records
// when each request arrived and how many were in flight at once.
package shard

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/actionledger/actionledger/test/envtestutil"
)

var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

// recorder is a loopback destination: every request answers 201 after delay, and the recorder keeps every
// arrival time and the most requests in flight at once.
type recorder struct {
	delay time.Duration

	mu       sync.Mutex
	at       []time.Time
	inFlight int
	maxIn    int
}

func newRecorder(t *testing.T, delay time.Duration) (*recorder, string) {
	t.Helper()
	r := &recorder{delay: delay}
	ts := httptest.NewServer(r)
	t.Cleanup(ts.Close)
	return r, ts.URL
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.at = append(r.at, time.Now())
	r.inFlight++
	r.maxIn = max(r.maxIn, r.inFlight)
	r.mu.Unlock()
	defer func() { r.mu.Lock(); r.inFlight--; r.mu.Unlock() }()
	if r.delay > 0 {
		select {
		case <-time.After(r.delay):
		case <-req.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"ok":true}`))
}

// arrivals returns the arrival times so far, in order.
func (r *recorder) arrivals() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.at)
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}

func (r *recorder) maxInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxIn
}

// busiest returns the most arrivals in any window [a, a+d) that starts at an arrival, and where that window starts.
func busiest(at []time.Time, d time.Duration) (int, time.Time) {
	worst, start := 0, time.Time{}
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < d {
			j++
		}
		if j-i > worst {
			worst, start = j-i, at[i]
		}
	}
	return worst, start
}

// between counts the arrivals in [from, to).
func between(at []time.Time, from, to time.Time) int {
	n := 0
	for _, a := range at {
		if !a.Before(from) && a.Before(to) {
			n++
		}
	}
	return n
}
