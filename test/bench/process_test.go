package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/actionledger/actionledger/test/noisy"

	"github.com/actionledger/actionledger/test/envtestutil"
)

// managerBinary builds ./cmd once per test binary and returns its path. The binary lives in a directory of
// the test binary's own (removed by TestMain), not in the calling test's TempDir: TestBenchmark and
// TestBenchmarkGateway share it, and a test's TempDir goes when that test ends.
var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

func managerBinary(t *testing.T, _ string) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("BENCH_MANAGER_BIN"); bin != "" {
			// A manager built elsewhere (an earlier commit's ./cmd), measured by this harness: before and after.
			buildPath, buildErr = filepath.Abs(bin)
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "actionledger-bench-bin-"); buildErr != nil {
			return
		}
		buildPath = filepath.Join(buildDir, "actionledger")
		buildErr = envtestutil.Build(context.Background(), buildDir, map[string]string{"actionledger": "./cmd"})
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// proc is the manager running as its own OS process against envtest's API server, so that its memory is
// its own: RSS from /proc/<pid>/status, Go heap from its Prometheus metrics and from GODEBUG=gctrace=1.
type proc struct {
	cmd     *exec.Cmd
	metrics string
	logPath string
	exited  chan struct{}

	mu   sync.Mutex
	live []gcSample // live heap after each GC, from gctrace
}

type gcSample struct {
	at   time.Time
	live float64 // bytes
}

var gcLine = regexp.MustCompile(`^gc \d+ .* (\d+)->(\d+)->(\d+) MB`)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// startManager starts the manager binary with the given concurrency and extra flags; it is stopped at test
// end at the latest.
func startManager(t *testing.T, e *envtestutil.Env, bin, dir string, reconciles int, extra ...string) *proc {
	t.Helper()
	kc := e.Kubeconfig(t)
	port := freePort(t)
	// A plain Background context: the process is stopped with SIGTERM by stop, not killed by a context.
	args := append([]string{
		"--kubeconfig=" + kc,
		"--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
		"--metrics-secure=false",
		"--health-probe-bind-address=0",
		"--kube-api-qps=5000", "--kube-api-burst=10000",
		fmt.Sprintf("--max-concurrent-reconciles=%d", reconciles),
		"--controller-namespace=default",
		"--destination-allow-cidrs=127.0.0.1/32", // the destination listens on loopback, denied by default
	}, extra...)
	cmd := exec.CommandContext(context.Background(), bin, args...) //nolint:gosec // G702: the flags come from the bench itself and its user's BENCH_* environment
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.CreateTemp(dir, "manager-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the manager: %v", err)
	}
	p := &proc{cmd: cmd, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), logPath: logf.Name(), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := gcLine.FindStringSubmatch(line); m != nil {
				v, _ := strconv.ParseFloat(m[3], 64)
				p.mu.Lock()
				p.live = append(p.live, gcSample{at: time.Now(), live: v * (1 << 20)})
				p.mu.Unlock()
				continue
			}
			_, _ = io.WriteString(logf, line+"\n")
		}
		_ = cmd.Wait()
		_ = logf.Close()
		close(p.exited)
	}()
	t.Cleanup(p.stop)
	// Ready when the metrics endpoint answers (the controllers start right after).
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := p.scrape(); err == nil {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("the manager exited at start; log %s:\n%s", p.logPath, tail(p.logPath))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manager's metrics endpoint did not answer; log %s:\n%s", p.logPath, tail(p.logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop sends SIGTERM (a clean shutdown) and kills the process if it does not exit in 20 s.
func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// scrape returns the manager's metrics as "name{labels}" -> value.
func (p *proc) scrape() (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics, nil) //nolint:gosec // the bench's own manager, on loopback
	// Uncompressed: the samplers scrape up to 4 times a second, and gzip made the scrapes about 5 % of the
	// manager's CPU in a 0 ms throughput run (a Prometheus server scrapes every 15-60 s). The bare client is
	// never scraped, so a compressed scrape counted against the manager alone.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req) //nolint:gosec // the same URL
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", p.metrics, err)
	}
	defer func() { _ = resp.Body.Close() }()
	return noisy.ParseMetrics(resp.Body)
}

// sum adds every series of metric whose labels contain all of want.
func sum(m map[string]float64, metric string, want ...string) float64 {
	var s float64
	for k, v := range m {
		name, labels, _ := strings.Cut(k, "{")
		if name != metric {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(labels, w) {
				ok = false
			}
		}
		if ok {
			s += v
		}
	}
	return s
}

// rss reads VmRSS from /proc/<pid>/status, in bytes.
func (p *proc) rss() float64 { return rssOf(p.cmd.Process.Pid) }

// Memory is the manager's memory at one moment, in bytes.
type Memory struct {
	RSS       float64 `json:"rssBytes"`
	HeapInuse float64 `json:"heapInuseBytes"`
	HeapAlloc float64 `json:"heapAllocBytes"`
	// LiveHeap is the smallest live heap the runtime reported after a GC in the window (gctrace's third
	// number, MiB resolution): the closest to "what the cache holds".
	LiveHeap float64 `json:"gcLiveHeapBytes"`
	GCs      int     `json:"gcsInWindow"`
}

// memory samples the process every second for window and returns the minimum of each measure (garbage
// comes and goes; the cache stays), and RSS at the end. With waitGC it goes on until the runtime has
// collected at least once in the window: an idle manager allocates so little that it may not collect for
// minutes, but the Go runtime forces a GC after 2 minutes without one, so this ends within ~2 minutes.
func (p *proc) memory(t *testing.T, window time.Duration, waitGC bool) Memory {
	t.Helper()
	from := time.Now()
	gcs := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, g := range p.live {
			if !g.at.Before(from) {
				n++
			}
		}
		return n
	}
	var m Memory
	for first := true; first || time.Since(from) < window || (waitGC && gcs() == 0 && time.Since(from) < 150*time.Second); first = false {
		s, err := p.scrape()
		if err != nil {
			t.Fatal(err)
		}
		inuse, alloc := s["go_memstats_heap_inuse_bytes"], s["go_memstats_heap_alloc_bytes"]
		if first || inuse < m.HeapInuse {
			m.HeapInuse = inuse
		}
		if first || alloc < m.HeapAlloc {
			m.HeapAlloc = alloc
		}
		time.Sleep(time.Second)
	}
	// One more sample after the GC that ended the loop.
	if s, err := p.scrape(); err == nil {
		m.HeapInuse = min(m.HeapInuse, s["go_memstats_heap_inuse_bytes"])
		m.HeapAlloc = min(m.HeapAlloc, s["go_memstats_heap_alloc_bytes"])
	}
	m.RSS = p.rss()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.live {
		if g.at.Before(from) {
			continue
		}
		if m.GCs == 0 || g.live < m.LiveHeap {
			m.LiveHeap = g.live
		}
		m.GCs++
	}
	if m.GCs == 0 && len(p.live) > 0 {
		// No GC in the window: the last one before it is the best we have.
		m.LiveHeap = p.live[len(p.live)-1].live
	}
	return m
}

// TestMain removes the shared manager binary after every test of the package ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}
