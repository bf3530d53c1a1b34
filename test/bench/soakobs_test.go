package bench

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// soakObserver follows a soak run from outside, as a user would: when each action was created (just before its
// create call) and when this process's watch first saw it end. Actions are named c-<i>; action i is on shard
// i % shards. The warm-up actions (warm-<shard>) are counted apart.
type soakObserver struct {
	shards int

	mu        sync.Mutex
	createdAt []time.Time
	ended     []bool
	succeeded int64
	other     int64
	byShard   []int64
	total     int64 // creates started
	failed    int64 // creates that failed
	warm      map[string]bool
	// The current window: creates started and create → Succeeded latencies (ms) since the last window().
	createdIn int64
	latMs     []float64

	watches atomic.Int64
}

// observeSoak starts the watch of ns.
func observeSoak(t *testing.T, e *envtestutil.Env, ns string, shards int) *soakObserver {
	t.Helper()
	o := &soakObserver{shards: shards, byShard: make([]int64, shards), warm: map[string]bool{}}
	watchActions(t, e, ns, &o.watches, o.on)
	return o
}

// expect makes room for actions c-0 … c-(n-1).
func (o *soakObserver) expect(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.createdAt, o.ended = make([]time.Time, n), make([]bool, n)
}

// created records that the create of action i starts at at.
func (o *soakObserver) created(i int, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.createdAt[i] = at
	o.total++
	o.createdIn++
}

// failedCreate records that action i's create failed: it is not waited for.
func (o *soakObserver) failedCreate(int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed++
}

func (o *soakObserver) createFailures() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}

// on is the watch's callback.
func (o *soakObserver) on(xa *actionsv1alpha1.ExternalAction, now time.Time) {
	phase := xa.Status.Phase
	if !phase.Terminal() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if strings.HasPrefix(xa.Name, "warm-") {
		o.warm[xa.Name] = true
		return
	}
	i, err := strconv.Atoi(strings.TrimPrefix(xa.Name, "c-"))
	if err != nil || i < 0 || i >= len(o.ended) || o.ended[i] {
		return
	}
	o.ended[i] = true
	if phase != actionsv1alpha1.PhaseSucceeded {
		o.other++
		return
	}
	o.succeeded++
	o.byShard[i%o.shards]++
	if !o.createdAt[i].IsZero() {
		o.latMs = append(o.latMs, float64(now.Sub(o.createdAt[i]).Microseconds())/1000)
	}
}

// soakWindow is what the observer saw since the previous window, and the totals.
type soakWindow struct {
	createdIn int64
	latMs     []float64
	succeeded int64
	byShard   []int64
	pending   int64
}

// window returns the current window and starts the next.
func (o *soakObserver) window() soakWindow {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := soakWindow{createdIn: o.createdIn, latMs: o.latMs, succeeded: o.succeeded, byShard: append([]int64(nil), o.byShard...),
		pending: o.total - o.failed - o.succeeded - o.other}
	o.createdIn, o.latMs = 0, nil
	return w
}

// waitSettled waits up to timeout until n actions ended (every warm-up action too, when n is 0), and reports
// whether they did.
func (o *soakObserver) waitSettled(n int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		o.mu.Lock()
		ok := o.succeeded+o.other >= n
		if n == 0 {
			ok = len(o.warm) >= o.shards
		}
		o.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
