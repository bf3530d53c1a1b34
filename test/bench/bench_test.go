// Package bench measures actionledger against the API server's own limit: throughput and latency from
// creation to Succeeded, the raw-write rate of a bare client doing the same writes, API writes per action
// (from the API server's apiserver_request_total), and the manager's heap per cached action.
//
// `make bench` runs the full variant (BENCH_FULL=1); `make test` runs a quick variant that only proves the
// harness works. Speed is reported, never asserted.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

// Result is one measured run.
type Result struct {
	Actions            int                `json:"actions"`
	Creators           int                `json:"creators"`
	Reconciles         int                `json:"maxConcurrentReconciles"`
	Seconds            float64            `json:"seconds"`
	ActionsPerSecond   float64            `json:"actionsPerSecond"`
	RawPerSecond       float64            `json:"rawWritesObjectsPerSecond"`
	RatioToRaw         float64            `json:"ratioToRaw"`
	P50ms, P95ms, P99  float64            `json:"-"`
	LatencyMs          map[string]float64 `json:"latencyMs"`
	WritesPerAction    map[string]float64 `json:"writesPerAction"`
	HeapBytesPerAction float64            `json:"heapBytesPerCachedAction"`
}

func intEnv(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestBenchmark(t *testing.T) {
	full := os.Getenv("BENCH_FULL") != ""
	n := intEnv("BENCH_ACTIONS", map[bool]int{true: 2000, false: 150}[full])
	creators := intEnv("BENCH_CREATORS", 16)
	reconciles := intEnv("BENCH_RECONCILES", 16)

	raw := rawWriteRate(t, n, creators)
	res := run(t, n, creators, reconciles)
	res.RawPerSecond = raw
	if raw > 0 {
		res.RatioToRaw = res.ActionsPerSecond / raw
	}
	report(t, []Result{res})
}

// rawWriteRate is the limit: a bare client doing exactly the writes one action needs (create, status claim,
// status outcome) for n objects at the same concurrency, with no manager running.
func rawWriteRate(t *testing.T, n, conc int) float64 {
	ns := env.Namespace(t)
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				xa := envtestutil.Action(ns, fmt.Sprintf("raw-%d", i), "none", "/x", `{"i":1}`)
				if err := env.Client.Create(ctx, xa); err != nil {
					t.Errorf("raw create: %v", err)
					return
				}
				now := metav1.Now()
				xa.Status = actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseInProgress, Attempts: 1,
					Claim: &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "raw", StartedAt: now, ExpiresAt: now}}
				if err := env.Client.Status().Update(ctx, xa); err != nil {
					t.Errorf("raw claim: %v", err)
					return
				}
				xa.Status.Claim = nil
				xa.Status.Phase = actionsv1alpha1.PhaseSucceeded
				xa.Status.Response = &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"x"}`, BodySHA256: "sha256:0"}
				if err := env.Client.Status().Update(ctx, xa); err != nil {
					t.Errorf("raw outcome: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rate := float64(n) / time.Since(start).Seconds()
	// Remove them before the manager starts so it never sees them.
	_ = env.Client.DeleteAllOf(ctx, &actionsv1alpha1.ExternalAction{}, client.InNamespace(ns))
	return rate
}

func run(t *testing.T, n, creators, reconciles int) Result {
	ctx := context.Background()
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	env.CreateDestination(t, ns, "fast", url, nil)

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	writes0 := apiWrites(t)
	env.StartManager(t, app.Options{MaxConcurrentReconciles: reconciles})

	created := make([]time.Time, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < creators; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				created[i] = time.Now()
				if err := env.Client.Create(ctx, envtestutil.Action(ns, fmt.Sprintf("a-%d", i), "fast", "/x", `{"i":1}`)); err != nil {
					t.Errorf("create: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()

	// Poll until all are Succeeded; completion time is status.completedAt (the controller's clock, same host).
	deadline := time.Now().Add(time.Duration(n)*50*time.Millisecond + 60*time.Second)
	var list actionsv1alpha1.ExternalActionList
	for {
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		done := 0
		for i := range list.Items {
			if list.Items[i].Status.Phase == actionsv1alpha1.PhaseSucceeded {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d actions succeeded in time", done, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var last time.Time
	lat := make([]float64, 0, n)
	for i := range list.Items {
		xa := &list.Items[i]
		var idx int
		_, _ = fmt.Sscanf(xa.Name, "a-%d", &idx)
		c := xa.Status.CompletedAt.Time
		if c.After(last) {
			last = c
		}
		lat = append(lat, float64(c.Sub(created[idx]).Microseconds())/1000)
	}
	elapsed := last.Sub(start).Seconds()
	writes := apiWrites(t)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)

	sort.Float64s(lat)
	pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	per := map[string]float64{}
	for k, v := range writes {
		if d := v - writes0[k]; d > 0 {
			per[k] = d / float64(n)
		}
	}
	return Result{
		Actions: n, Creators: creators, Reconciles: reconciles, Seconds: elapsed,
		ActionsPerSecond: float64(n) / elapsed,
		LatencyMs:        map[string]float64{"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99)},
		WritesPerAction:  per,
		// In-process: includes the test's own client cache-free objects; an upper bound for the manager's share.
		HeapBytesPerAction: float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n),
	}
}

// apiWrites reads apiserver_request_total for externalactions from the API server's /metrics, by
// verb and subresource ("create", "update", "update/status", "patch", ...).
func apiWrites(t *testing.T) map[string]float64 {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	body, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading API server metrics: %v", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="externalactions"`) {
			continue
		}
		verb := label(line, "verb")
		if verb == "GET" || verb == "LIST" || verb == "WATCH" {
			continue
		}
		key := strings.ToLower(verb)
		if sub := label(line, "subresource"); sub != "" {
			key += "/" + sub
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		out[key] += v
	}
	return out
}

func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.Index(rest, `"`)]
}

func report(t *testing.T, rs []Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-8s %-9s %-10s %-10s %-8s %-9s %-9s %-9s %-s\n", "actions", "reconc.", "actions/s", "raw obj/s", "ratio", "p50 ms", "p95 ms", "p99 ms", "API writes per action")
	for _, r := range rs {
		fmt.Fprintf(&b, "%-8d %-9d %-10.1f %-10.1f %-8.2f %-9.1f %-9.1f %-9.1f %v\n", r.Actions, r.Reconciles, r.ActionsPerSecond,
			r.RawPerSecond, r.RatioToRaw, r.LatencyMs["p50"], r.LatencyMs["p95"], r.LatencyMs["p99"], r.WritesPerAction)
	}
	t.Log(b.String())
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "bench.json")
	}
	data, _ := json.MarshalIndent(rs, "", "  ")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatalf("writing %s: %v", out, err)
	}
	t.Logf("wrote %s", out)
	for _, r := range rs {
		if r.ActionsPerSecond <= 0 || len(r.WritesPerAction) == 0 {
			t.Fatalf("the harness measured nothing: %+v", r)
		}
	}
}
