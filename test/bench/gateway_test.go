package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// GatewayResult is the gateway part of the benchmark (docs/benchmarks.md, "The gateway").
type GatewayResult struct {
	Actions  int `json:"actions"`
	Creators int `json:"clients"`
	// FirstMs are the latencies of first requests (new keys): create, claim, send, record, answer.
	FirstMs map[string]float64 `json:"firstRequestLatencyMs"`
	// ReplayMs are the latencies of repeats of finished keys, served from the gateway's cache.
	ReplayMs map[string]float64 `json:"replayLatencyMs"`
	// GatewayPerSecond is first requests answered per second; ManagerPerSecond the manager's own actions per
	// second (objects created with the client) on the same control plane; Ratio the first over the second.
	GatewayPerSecond float64 `json:"gatewayRequestsPerSecond"`
	ManagerPerSecond float64 `json:"managerActionsPerSecond"`
	Ratio            float64 `json:"ratio"`
	Load             string  `json:"loadavg"`
}

// TestBenchmarkGateway measures the gateway (BENCH_PARTS part "gateway", run by `make bench` with the other
// parts; BENCH_GATEWAY_ACTIONS
// sets its size, BENCH_CREATORS its concurrent clients): first-request latency p50/p99 at a fast
// destination, replay p50/p99 (target: p99 under 10 ms), and the gateway's first requests per second as a
// ratio to the manager's own throughput in the same run. The quick variant (make test) proves it runs.
func TestBenchmarkGateway(t *testing.T) {
	if parts := os.Getenv("BENCH_PARTS"); parts != "" && !slices.Contains(strings.Split(parts, ","), "gateway") {
		t.Skipf("BENCH_PARTS=%s does not include gateway", parts)
	}
	full := os.Getenv("BENCH_FULL") != ""
	n := intEnv("BENCH_GATEWAY_ACTIONS", map[bool]int{true: 1000, false: 20}[full])
	creators := intEnv("BENCH_CREATORS", map[bool]int{true: 16, false: 4}[full])
	reconciles := intEnv("BENCH_RECONCILES", 16)
	dir := t.TempDir()
	e := newEnv(t)
	bin := managerBinary(t, dir)

	own := throughput(t, e, bin, dir, n, creators, reconciles, 0)

	ctx := context.Background()
	ns := e.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	createBenchDestination(t, e, ns, "fast", url, defaultDest())
	p := startManager(t, e, bin, dir, reconciles, managerInFlightArgs(t, bin, defaultDest().MaxInFlight)...)
	defer p.stop()
	token := benchCaller(t, e, ns)
	base := startGateway(t, e, bin, dir)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: creators * 2}, Timeout: 90 * time.Second}
	send := func(key string) (int, bool, time.Duration) {
		r, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/namespaces/"+ns+"/destinations/fast/x",
			strings.NewReader(`{"i":1}`))
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set("Idempotency-Key", `"`+key+`"`)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Prefer", "wait=60")
		start := time.Now()
		resp, err := c.Do(r)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return 0, false, 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", time.Since(start)
	}
	if code, _, _ := send("warm"); code != http.StatusCreated {
		t.Fatalf("warm-up through the gateway: %d", code)
	}
	phase := func(wantReplay bool) ([]float64, time.Duration) {
		lat := make([]float64, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range creators {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					code, replayed, d := send(fmt.Sprintf("g-%d", i))
					if code != http.StatusCreated || replayed != wantReplay {
						t.Errorf("g-%d: status %d, replayed %v; want 201, replayed %v", i, code, replayed, wantReplay)
					}
					lat[i] = float64(d.Microseconds()) / 1000
				}
			})
		}
		wg.Wait()
		return lat, time.Since(start)
	}
	load := loadavg()
	first, elapsed := phase(false)
	replays, _ := phase(true)
	if s := srv.Summary(); s.Applied != n+1 || s.Duplicates != 0 {
		t.Errorf("destination applied %d effects (%d duplicates), want %d", s.Applied, s.Duplicates, n+1)
	}
	res := GatewayResult{Actions: n, Creators: creators, FirstMs: percentiles(first), ReplayMs: percentiles(replays),
		GatewayPerSecond: float64(n) / elapsed.Seconds(), ManagerPerSecond: own.ActionsPerSecond, Load: load + " -> " + loadavg()}
	res.Ratio = res.GatewayPerSecond / res.ManagerPerSecond
	t.Logf("gateway: %d actions, %d clients: first request p50 %.1f ms p99 %.1f ms; replay p50 %.2f ms p99 %.2f ms "+
		"(target p99 < 10 ms: %v); %.1f requests/s vs the manager's own %.1f actions/s (ratio %.2f); load %s",
		n, creators, res.FirstMs["p50"], res.FirstMs["p99"], res.ReplayMs["p50"], res.ReplayMs["p99"],
		res.ReplayMs["p99"] < 10, res.GatewayPerSecond, res.ManagerPerSecond, res.Ratio, res.Load)
	t.Logf("gateway JSON: %s", envtestutil.JSON(res))
}

// benchCaller creates a ServiceAccount allowed to create and get ExternalActions in ns and returns a token
// for it from the TokenRequest API.
func benchCaller(t *testing.T, e *envtestutil.Env, ns string) string {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []func() error{
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "client"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "client"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{actionsv1alpha1.GroupVersion.Group}, Resources: []string{"externalactions"},
					Verbs: []string{"create", "get"}}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "client"},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "client"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "client", Namespace: ns}}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := o(); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "client", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// startGateway runs `actionledger gateway` (plain HTTP on loopback) against e until the test ends and
// returns its base URL once it is ready.
func startGateway(t *testing.T, e *envtestutil.Env, bin, dir string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logf, err := os.CreateTemp(dir, "gateway-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), bin, "gateway", "--kubeconfig="+e.Kubeconfig(t), "--insecure-listen", //nolint:gosec // the binary the test built
		"--bind-address="+addr, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--kube-api-qps=5000", "--kube-api-burst=10000")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz") //nolint:noctx // a readiness probe
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not become ready; log:\n%s", tail(logf.Name()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
