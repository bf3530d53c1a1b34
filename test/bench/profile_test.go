package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/actionledger/actionledger/test/envtestutil"
)

// profiler is the optional profiling of a throughput run (BENCH_PROFILE_DIR): CPU profiles of the
// kube-apiserver (its /debug/pprof/profile, served because kube-apiserver's --profiling defaults to true) and of
// the manager (its --pprof-bind-address, when the binary has the flag) over the same BENCH_PROFILE_SECONDS
// (default 10) from a delay of BENCH_PROFILE_DELAY seconds (default 0) after the first create, and the API
// server's apiserver_request_total for every verb, before and after the run.
type profiler struct {
	dir    string
	prefix string
	name   string
	before map[string]float64
	done   chan struct{}
}

// managerPprofArgs returns the flag that serves the manager's /debug/pprof on a free loopback port, and the
// endpoint's base URL, when BENCH_PROFILE_DIR is set and the manager binary has --pprof-bind-address; nothing
// otherwise.
func managerPprofArgs(t *testing.T, bin string) (args []string, url string) {
	t.Helper()
	if os.Getenv("BENCH_PROFILE_DIR") == "" || !managerHas(bin, "-pprof-bind-address") {
		return nil, ""
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	return []string{"--pprof-bind-address=" + addr}, "http://" + addr
}

// startProfile starts the profiles of a run of n actions; managerPprof is the manager's pprof base URL ("": no
// manager profile). The files are named <what>-<n>-<hhmmss>: apiserver-, manager- and requests-, with "raw-"
// before them for a bare client's run (startRawProfile).
func startProfile(t *testing.T, e *envtestutil.Env, n int, managerPprof string) *profiler {
	return startNamedProfile(t, e, "", n, managerPprof)
}

// startRawProfile starts the API server's profile of a bare client's run of n objects (kind "raw" or "raw2w").
func startRawProfile(t *testing.T, e *envtestutil.Env, kind string, n int) *profiler {
	return startNamedProfile(t, e, kind+"-", n, "")
}

// startNamedProfile is startProfile with prefix before the files' names ("", "raw-" or "raw2w-").
func startNamedProfile(t *testing.T, e *envtestutil.Env, prefix string, n int, managerPprof string) *profiler {
	t.Helper()
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil { //nolint:gosec // BENCH_PROFILE_DIR is the user's own choice
		t.Fatal(err)
	}
	p := &profiler{dir: dir, prefix: prefix, name: fmt.Sprintf("%d-%s", n, time.Now().UTC().Format("150405")), before: allRequests(t, e), done: make(chan struct{})}
	secs := intEnv("BENCH_PROFILE_SECONDS", 10)
	delay := time.Duration(intEnv("BENCH_PROFILE_DELAY", 0)) * time.Second
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(delay)
		body, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(secs)).
			DoRaw(context.Background())
		if err != nil {
			t.Logf("API server profile: %v", err)
			return
		}
		_ = os.WriteFile(filepath.Join(dir, prefix+"apiserver-"+p.name+".pprof"), body, 0o600) //nolint:gosec // BENCH_PROFILE_DIR is the user's own choice
	})
	if managerPprof != "" {
		wg.Go(func() {
			time.Sleep(delay)
			if err := fetchTo(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", managerPprof, secs),
				filepath.Join(dir, "manager-"+p.name+".pprof"), time.Duration(secs+60)*time.Second); err != nil {
				t.Logf("manager profile: %v", err)
			}
		})
	}
	go func() { wg.Wait(); close(p.done) }()
	return p
}

// fetchTo writes the body of a GET of url to path.
func fetchTo(url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("request %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	if err := os.WriteFile(path, body, 0o600); err != nil { //nolint:gosec // BENCH_PROFILE_DIR is the user's own choice
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// finish waits for the profile and writes the request counts of the run, by resource|verb|subresource|code.
func (p *profiler) finish(t *testing.T, e *envtestutil.Env) {
	t.Helper()
	if p == nil {
		return
	}
	<-p.done
	after := allRequests(t, e)
	var lines []string
	for k, v := range after {
		if d := v - p.before[k]; d > 0 {
			lines = append(lines, fmt.Sprintf("%s %.0f", k, d))
		}
	}
	slices.Sort(lines)
	_ = os.WriteFile(filepath.Join(p.dir, p.prefix+"requests-"+p.name+".txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

// allRequests is apiserver_request_total for every verb (LIST and WATCH included), keyed
// resource|verb|subresource|code.
func allRequests(t *testing.T, e *envtestutil.Env) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range apiServerMetrics(t, e) {
		if strings.HasPrefix(line, "apiserver_terminated_watchers_total{") || strings.HasPrefix(line, "apiserver_watch_events_total{") {
			out[line[:strings.LastIndex(line, " ")]] += sampleValue(line)
			continue
		}
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		out[requestKey(line)] += sampleValue(line)
	}
	return out
}
