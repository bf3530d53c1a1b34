package bench

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// watcher records, for every action of a namespace, when this process first saw it Succeeded (through a
// watch: status.completedAt has only second resolution, useless for millisecond latencies).
type watcher struct {
	mu     sync.Mutex
	done   map[string]time.Time
	other  map[string]actionsv1alpha1.Phase
	cancel context.CancelFunc
	// watches counts the watch requests this watcher made (1 + reconnects).
	watches atomic.Int64
}

func watchSucceeded(t *testing.T, e *envtestutil.Env, ns string) *watcher {
	t.Helper()
	w := &watcher{done: map[string]time.Time{}, other: map[string]actionsv1alpha1.Phase{}}
	w.cancel = watchActions(t, e, ns, &w.watches, func(xa *actionsv1alpha1.ExternalAction, now time.Time) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
			if _, seen := w.done[xa.Name]; !seen {
				w.done[xa.Name] = now
			}
		} else if xa.Status.Phase.Terminal() {
			w.other[xa.Name] = xa.Status.Phase
		}
	})
	return w
}

// watchActions watches the ExternalActions of ns and calls on for each object of an event (bookmarks aside) with the time
// it arrived, from one goroutine, until the returned cancel; watches counts the watch requests (1 + reconnects).
// It returns once the first watch request was made.
func watchActions(t *testing.T, e *envtestutil.Env, ns string, watches *atomic.Int64, on func(*actionsv1alpha1.ExternalAction, time.Time)) context.CancelFunc {
	t.Helper()
	wc, err := client.NewWithWatch(e.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	started := make(chan struct{})
	go func() {
		first := true
		// rv is the last resourceVersion this watch saw. The first watch has none and starts with the existing
		// objects; a reconnect resumes from rv, so it misses nothing and does not replay the namespace. (The API
		// server closes a watcher that falls behind, "unresponsive"; under load this one did ~150 times in a
		// 10,000-action run, and replaying every object on each reconnect made the API server's CPU per action
		// grow with the object count: docs/benchmarks.md, "Work that grows with the object count".) If rv is too
		// old (410 Expired, an Error event), the next watch starts over with the existing objects.
		rv := ""
		for ctx.Err() == nil {
			wi, err := wc.Watch(ctx, &actionsv1alpha1.ExternalActionList{}, client.InNamespace(ns),
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			watches.Add(1)
			if first {
				close(started)
				first = false
			}
			if err != nil {
				rv = ""
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				if ev.Type == watch.Error {
					rv = ""
					continue
				}
				xa, ok := ev.Object.(*actionsv1alpha1.ExternalAction)
				if !ok {
					continue
				}
				rv = xa.ResourceVersion
				if ev.Type == watch.Bookmark {
					continue
				}
				on(xa, time.Now())
			}
		}
	}()
	<-started
	return cancel
}

// succeeded is how many actions the watch has seen Succeeded so far.
func (w *watcher) succeeded() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.done)
}

// waitAll waits until n actions named prefix-<i> are Succeeded and returns their times.
func (w *watcher) waitAll(t *testing.T, n int, timeout time.Duration) map[string]time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		done, other := len(w.done), len(w.other)
		w.mu.Unlock()
		if done >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d actions succeeded in %s (%d in another terminal phase)", done, n, timeout, other)
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.done)
}

// rawClientQPS and rawClientBurst are the raw baseline's client-side rate limit: the manager's in the bench
// (--kube-api-qps=5000, --kube-api-burst=10000). With envtestutil's client (QPS 500, burst 1000) the baseline
// was the client's limit, not the API server's: 3 writes per object gave (6,000 - 1,000) / 500 = 10 s for
// 2,000 objects, the ~200 objects/s every run read before.
const rawClientQPS, rawClientBurst = 5000, 10000

// rawStatuses returns the two statuses the raw baseline writes for xa: the claim and the outcome. By default
// the minimal ones (phase, attempts and claim; then phase and a small response). With BENCH_RAW_STATUS=real
// they are the manager's own, the bytes part's lean shape (shapeLean: what internal/ledger writes for an action
// that succeeds at its first attempt against the recording destination, checked field for field by
// TestStatusShapesMatchLedger, with this host's claim holder), so that the baseline writes the same bytes as
// the manager and only the manager's work between the writes differs: the ceiling of any manager that writes
// the contract's status.
func rawStatuses(t *testing.T) (claimed, done statusFn) {
	if os.Getenv("BENCH_RAW_STATUS") == "real" {
		holder := app.NewHolder()
		if t != nil {
			t.Logf("raw baseline writes the manager's status shape (BENCH_RAW_STATUS=real, shapeLean)")
		}
		return func(xa *actionsv1alpha1.ExternalAction) *actionsv1alpha1.ExternalActionStatus {
				return shapeStatus(shapeLean, xa, holder, false)
			}, func(xa *actionsv1alpha1.ExternalAction) *actionsv1alpha1.ExternalActionStatus {
				return shapeStatus(shapeLean, xa, holder, true)
			}
	}
	return func(*actionsv1alpha1.ExternalAction) *actionsv1alpha1.ExternalActionStatus {
			now := metav1.Now()
			return &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseInProgress, Attempts: 1,
				Claim: &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "raw", StartedAt: now, ExpiresAt: now}}
		}, func(*actionsv1alpha1.ExternalAction) *actionsv1alpha1.ExternalActionStatus {
			return &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseSucceeded, Attempts: 1,
				Response: &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"x"}`, BodySHA256: "sha256:0"}}
		}
}

// statusFn returns the status the raw client writes on xa (one of the two of rawStatuses or shapeStatus).
type statusFn = func(*actionsv1alpha1.ExternalAction) *actionsv1alpha1.ExternalActionStatus

// rawClient is the raw baseline's client: envtest's, at the manager's client rate limit (rawClientQPS).
func rawClient(t *testing.T, e *envtestutil.Env) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(e.Config)
	cfg.QPS, cfg.Burst = rawClientQPS, rawClientBurst
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatalf("raw baseline client: %v", err)
	}
	return c
}

// rawRun is one run of a bare client: n objects in secs seconds, CPU per object.
type rawRun struct {
	n    int
	secs float64
	cpu  CPU
}

// rawRuns runs the bare clients a case of kind compares with: the 3-write one, and for the safe kind the
// 2-write one too (index 1).
func rawRuns(t *testing.T, e *envtestutil.Env, n, conc int, kind string) []rawRun {
	t.Helper()
	run := func(withClaim bool) rawRun {
		perS, cpu := rawRate(t, e, n, conc, withClaim)
		return rawRun{n: n, secs: float64(n) / perS, cpu: cpu}
	}
	out := []rawRun{run(true)}
	if kind == destSafe {
		out = append(out, run(false))
	}
	return out
}

// rawRate2 is a bare client's rate over the runs before and after the manager's: objects over their summed time,
// CPU per object weighted by objects, and each run's own rate.
type rawRate2 struct {
	perS float64
	cpu  CPU
	each []float64
}

// straddle combines the bare clients' runs before the manager's (may be nil) with those after it, index by index.
func straddle(before, after []rawRun) []rawRate2 {
	out := make([]rawRate2, len(after))
	for i, a := range after {
		runs := []rawRun{a}
		if i < len(before) {
			runs = []rawRun{before[i], a}
		}
		var n int
		var secs float64
		var cpu CPU
		for _, r := range runs {
			n, secs = n+r.n, secs+r.secs
			out[i].each = append(out[i].each, math.Round(float64(r.n)/r.secs*10)/10)
			cpu = cpu.plus(r.cpu.times(float64(r.n)))
		}
		out[i].perS = float64(n) / secs
		out[i].cpu = cpu.times(1 / float64(n))
	}
	return out
}

// rawRate is the limit: a bare client doing exactly the writes one action needs (withClaim: create, status
// claim, status outcome; else the claimless path's create and status outcome, issue 35) for n objects with conc
// workers in a namespace of its own, with no manager running, at the manager's client rate limit
// (rawClientQPS), while the same observer watch as in the manager's runs (watchSucceeded) is open: the
// measurement's own watch costs the API server alike on both sides. Objects per second, and CPU per object.
//
// It does not wait for a destination: its writes follow one another at once, whatever the run's destination
// latency. The latency table's bound is min(this rate, maxInFlight / latency): an ideal manager hides the
// latency behind maxInFlight sends in flight (docs/benchmarks.md, "How bare is defined").
func rawRate(t *testing.T, e *envtestutil.Env, n, conc int, withClaim bool) (float64, CPU) {
	t.Helper()
	ns := e.Namespace(t)
	c := rawClient(t, e)
	observer := watchSucceeded(t, e, ns)
	defer observer.cancel()
	claimed, done := rawStatuses(t)
	prefix := "raw"
	if !withClaim {
		claimed, prefix = nil, "raw2w"
	}
	meter := newCPUMeter(e, 0)
	cpu0 := meter.read()
	prof := startRawProfile(t, e, prefix, n)
	start := time.Now()
	rawWrites(t, c, ns, prefix, n, conc, claimed, done)
	rate := float64(n) / time.Since(start).Seconds()
	cpu := perActionCPU(cpu0, meter.read(), n)
	prof.finish(t, e)
	// Remove them, the admission policy's finalizer first, so that a manager started after this run has nothing of
	// theirs to finalize (straddle runs a bare client before the manager too).
	removeActions(t, c, ns, conc)
	return rate, cpu
}

// rawWrites creates <prefix>-1 ... <prefix>-n in ns with conc workers, each followed by its claim status PUT
// (none when claimed is nil) and its outcome status PUT (the statuses claimed and done return). A failed write
// ends the test.
func rawWrites(t *testing.T, c client.Client, ns, prefix string, n, conc int, claimed, done statusFn) {
	t.Helper()
	ctx := context.Background()
	err := forEach(n, conc, func(i int) error {
		xa := envtestutil.Action(ns, fmt.Sprintf("%s-%d", prefix, i+1), "none", "/x", `{"i":1}`)
		if err := c.Create(ctx, xa); err != nil {
			return fmt.Errorf("raw create: %w", err)
		}
		if claimed != nil {
			xa.Status = *claimed(xa)
			if err := c.Status().Update(ctx, xa); err != nil {
				return fmt.Errorf("raw claim: %w", err)
			}
		}
		xa.Status = *done(xa)
		if err := c.Status().Update(ctx, xa); err != nil {
			return fmt.Errorf("raw outcome: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Writes are API writes per action, by kind, from the API server's apiserver_request_total.
type Writes struct {
	// Creates, Updates, Patches and StatusWrites are on externalactions (StatusWrites: PUT or PATCH of /status).
	Creates      float64 `json:"creates"`
	Updates      float64 `json:"updates"`
	Patches      float64 `json:"patches"`
	StatusWrites float64 `json:"statusWrites"`
	Deletes      float64 `json:"deletes"`
	// Conflicts are the externalaction writes above that were answered 409 (counted in them).
	Conflicts float64 `json:"conflicts"`
	// ConflictsAll are the writes of any resource answered 409 (Conflicts included).
	ConflictsAll float64 `json:"conflictsAllResources"`
	// Controller is what the manager wrote on externalactions: everything but the test's creates.
	Controller float64 `json:"controllerWrites"`
	// Events and Tombstones are writes of other resources made for the actions.
	Events     float64 `json:"events"`
	Tombstones float64 `json:"tombstones"`
	// Reads are GETs of single objects of any resource (not LIST or WATCH); ActionReads and TombstoneReads
	// are the ones on externalactions and actiontombstones.
	Reads          float64 `json:"reads"`
	ActionReads    float64 `json:"actionReads"`
	TombstoneReads float64 `json:"tombstoneReads"`
}

func (w Writes) String() string {
	return fmt.Sprintf("create %.2f update %.2f patch %.2f status %.2f (409 %.2f) events %.2f; GETs %.2f",
		w.Creates, w.Updates, w.Patches, w.StatusWrites, w.Conflicts, w.Events, w.Reads)
}

// apiWrites reads the API server's apiserver_request_total for writes and single-object GETs as raw counters
// keyed resource|verb|subresource|code.
func apiWrites(t *testing.T, e *envtestutil.Env) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range apiServerMetrics(t, e) {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		switch label(line, "verb") {
		case "GET", "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		default:
			continue
		}
		out[requestKey(line)] += sampleValue(line)
	}
	return out
}

// apiServerMetrics returns the lines of the API server's /metrics (Prometheus text format).
func apiServerMetrics(t *testing.T, e *envtestutil.Env) []string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	body, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading API server metrics: %v", err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// requestKey is an apiserver_request_total sample's key: resource|verb|subresource|code.
func requestKey(line string) string {
	return strings.Join([]string{label(line, "resource"), label(line, "verb"), label(line, "subresource"), label(line, "code")}, "|")
}

// sampleValue is the value of a Prometheus text-format sample line (0 when it does not parse).
func sampleValue(line string) float64 {
	v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
	return v
}

// perAction turns the difference of two apiWrites readings into Writes per action.
func perAction(before, after map[string]float64, n int) Writes {
	var w Writes
	for k, v := range after {
		d := v - before[k]
		if d <= 0 {
			continue
		}
		d /= float64(n)
		p := strings.Split(k, "|")
		res, verb, sub, code := p[0], p[1], p[2], p[3]
		if verb == "GET" {
			w.Reads += d
			if res == "externalactions" && sub == "" {
				w.ActionReads += d
			} else if res == "actiontombstones" {
				w.TombstoneReads += d
			}
			continue
		}
		if code == "409" {
			w.ConflictsAll += d
		}
		switch res {
		case "externalactions":
			switch {
			case sub == "status":
				w.StatusWrites += d
			case verb == "POST":
				w.Creates += d
			case verb == "PUT":
				w.Updates += d
			case verb == "PATCH" || verb == "APPLY":
				w.Patches += d
			default:
				w.Deletes += d
			}
			if code == "409" {
				w.Conflicts += d
			}
		case "events":
			w.Events += d
		case "actiontombstones":
			w.Tombstones += d
		}
	}
	w.Controller = w.Updates + w.Patches + w.StatusWrites
	return w
}

func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	tail := line[i+len(name)+2:]
	return tail[:strings.Index(tail, `"`)]
}

// percentiles returns p50/p95/p99 of ms.
func percentiles(ms []float64) map[string]float64 {
	if len(ms) == 0 {
		return nil
	}
	slices.Sort(ms)
	pct := func(p float64) float64 { return ms[min(len(ms)-1, int(p*float64(len(ms))))] }
	return map[string]float64{"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99)}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuSeconds is the user+system CPU time of pid so far, from /proc/<pid>/stat (0 if unknown).
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// Fields after the command name (which may contain spaces) start after the last ')'.
	f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// controlPlanePIDs finds this envtest's kube-apiserver and etcd by etcd's client URL in their command lines.
func controlPlanePIDs(e *envtestutil.Env) (apiserver, etcd int) {
	u := e.Env.ControlPlane.Etcd.URL
	if u == nil {
		return 0, 0
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cl), u.String()) {
			continue
		}
		exe, _, _ := strings.Cut(string(cl), "\x00")
		switch {
		case strings.HasSuffix(exe, "kube-apiserver"):
			apiserver = pid
		case strings.HasSuffix(exe, "etcd"):
			etcd = pid
		}
	}
	return apiserver, etcd
}

// CPU is CPU milliseconds per action by process, over a run.
type CPU struct {
	Manager   float64 `json:"manager"`
	APIServer float64 `json:"apiserver"`
	Etcd      float64 `json:"etcd"`
	Bench     float64 `json:"benchProcess"`
}

// total is the CPU of every process of c together.
func (c CPU) total() float64 { return c.Manager + c.APIServer + c.Etcd + c.Bench }

// times is c with every process's figure multiplied by f.
func (c CPU) times(f float64) CPU {
	return CPU{Manager: c.Manager * f, APIServer: c.APIServer * f, Etcd: c.Etcd * f, Bench: c.Bench * f}
}

// plus is the sum of c and d, process by process.
func (c CPU) plus(d CPU) CPU {
	return CPU{Manager: c.Manager + d.Manager, APIServer: c.APIServer + d.APIServer, Etcd: c.Etcd + d.Etcd, Bench: c.Bench + d.Bench}
}

func (c CPU) String() string {
	return fmt.Sprintf("manager %.2f, apiserver %.2f, etcd %.2f, bench %.2f", c.Manager, c.APIServer, c.Etcd, c.Bench)
}

// cpuMeter samples the CPU time of the manager, the control plane and this process.
type cpuMeter struct{ pids [4]int }

func newCPUMeter(e *envtestutil.Env, manager int) cpuMeter {
	a, et := controlPlanePIDs(e)
	return cpuMeter{pids: [4]int{manager, a, et, os.Getpid()}}
}

func (m cpuMeter) read() [4]float64 {
	var out [4]float64
	for i, p := range m.pids {
		out[i] = cpuSeconds(p)
	}
	return out
}

func perActionCPU(a, b [4]float64, n int) CPU {
	f := func(i int) float64 { return (b[i] - a[i]) * 1000 / float64(n) }
	return CPU{Manager: f(0), APIServer: f(1), Etcd: f(2), Bench: f(3)}
}
