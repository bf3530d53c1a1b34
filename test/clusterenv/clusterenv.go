// Package clusterenv runs the real single-node Kubernetes cluster of hack/cluster for a test suite:
// etcd, kube-apiserver (Node,RBAC), kube-controller-manager (every controller), kube-scheduler,
// containerd and the kubelet, all on 127.0.0.1 (hack/cluster/up.sh says how, and what it needs).
// One cluster serves a whole package: TestMain calls Main, each test calls Require.
//
// The suite runs only when ACTIONLEDGER_CLUSTER=1 (make test-cluster sets it); otherwise Require
// skips the test and nothing starts, so plain `go test ./...` does not pay for a cluster. When it
// is set, a missing prerequisite fails the suite at once: the message of a missing containerd,
// runc or CNI plugin names `apt-get install -y containerd runc containernetworking-plugins`, and
// a non-root run says it must run as root.
//
// Pods on this cluster must use hostNetwork (there is no pod network) and a locally imported image
// (ImportImage); nothing is ever pulled. With Options.Env holding POD_NETWORK=1 (test/podnet) the cluster has a pod
// network and kube-proxy in a network namespace of its own instead; Env["NETNS"] is that namespace, for
// `nsenter --net=` (ClusterIPs and pod addresses are routed there only).
package clusterenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// EnvVar turns the cluster suite on when set to 1.
const EnvVar = "ACTIONLEDGER_CLUSTER"

// Cluster is a running cluster. Its fields come from up.sh's cluster.env.
type Cluster struct {
	// StateDir holds everything of the cluster (PKI, data, logs under logs/); down.sh removes it.
	StateDir string
	// Kubeconfig is the path of the admin kubeconfig (system:masters, client certificate).
	Kubeconfig string
	// Config is the admin REST config, read from Kubeconfig.
	Config *rest.Config
	// Clientset is a typed client built from Config.
	Clientset kubernetes.Interface
	// APIServerHost and APIServerPort are where the API server listens (127.0.0.1 and a free port).
	// Pods that talk to the API server set KUBERNETES_SERVICE_HOST/PORT to them: the kubernetes
	// Service has no endpoints here.
	APIServerHost string
	APIServerPort int
	// NodeName is the only node's name, 127.0.0.1 (its InternalIP too).
	NodeName string
	// PauseImage is the sandbox image (test/cmd/pause), usable as a do-nothing workload.
	PauseImage string
	// ContainerdAddress is containerd's socket, for `ctr --address`.
	ContainerdAddress string
	// StartTime is how long up.sh took, from an empty state dir to the node Ready and the default
	// ServiceAccount present.
	StartTime time.Duration
	// Env holds every KEY=value of cluster.env (component PIDs, ports, CGROUP_ROOT ...).
	Env map[string]string

	stopOnce sync.Once
	stopErr  error
	watcher  *os.Process
}

// Enabled reports whether ACTIONLEDGER_CLUSTER=1.
func Enabled() bool { return os.Getenv(EnvVar) == "1" }

// RepoRoot returns the repository root (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Options tune Start; the zero value is the default.
type Options struct {
	// StateDir is an empty or missing directory for the cluster; default: a new one under the
	// system temp dir (its path must stay short: unix socket paths live in it).
	StateDir string
	// Env is added to up.sh's environment (its knobs: READY_TIMEOUT, LOG_V, KUBE_ASSETS ...).
	Env []string
	// Output receives up.sh's and down.sh's stderr as they run (progress, log tails on failure);
	// default os.Stderr.
	Output io.Writer
}

// Start runs hack/cluster/up.sh and returns the running cluster. It also starts a watcher
// process that runs down.sh when this process exits without calling Stop (a test binary killed by
// -timeout or a signal), so the cluster never outlives its test binary. The error carries up.sh's
// messages (a missing prerequisite names the apt-get command); the tail of every log went to
// o.Output.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	out := o.Output
	if out == nil {
		out = os.Stderr
	}
	dir := o.StateDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "alc-"); err != nil {
			return nil, fmt.Errorf("creating the cluster state dir: %w", err)
		}
	}
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, script("up.sh"), dir) //nolint:gosec // the repository's own script
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(out, &stderr)
	if err := cmd.Run(); err != nil {
		_ = os.Remove(dir) // only when up.sh left it empty (it failed before creating anything)
		return nil, fmt.Errorf("starting the cluster (hack/cluster/up.sh %s): %w: %s", dir, err, upMessages(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	c, err := load(lines[len(lines)-1])
	if err != nil {
		return nil, errors.Join(err, stopDir(dir, out))
	}
	c.watcher, err = startWatcher(c.StateDir)
	if err != nil {
		return nil, errors.Join(err, c.Stop(out))
	}
	return c, nil
}

// script returns the path of a script of hack/cluster.
func script(name string) string { return filepath.Join(RepoRoot(), "hack", "cluster", name) }

// load reads cluster.env and builds the clients.
func load(envFile string) (*Cluster, error) {
	data, err := os.ReadFile(envFile) //nolint:gosec // the file up.sh named
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's env file: %w", err)
	}
	env := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	c := &Cluster{
		StateDir: env["STATE_DIR"], Kubeconfig: env["KUBECONFIG"], APIServerHost: env["APISERVER_HOST"],
		NodeName: env["NODE_NAME"], PauseImage: env["PAUSE_IMAGE"], ContainerdAddress: env["CONTAINERD_ADDRESS"],
		Env: env,
	}
	if c.APIServerPort, err = strconv.Atoi(env["APISERVER_PORT"]); err != nil {
		return nil, fmt.Errorf("reading APISERVER_PORT of %s: %w", envFile, err)
	}
	if secs, err := strconv.ParseFloat(env["START_SECONDS"], 64); err == nil {
		c.StartTime = time.Duration(secs * float64(time.Second))
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	if c.Clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, fmt.Errorf("building a clientset: %w", err)
	}
	return c, nil
}

// startWatcher starts a detached shell that waits for this process to exit and then runs
// down.sh on dir, unless Stop killed it first.
func startWatcher(dir string) (*os.Process, error) {
	const watch = `while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" "$3"`
	// Not bound to a context: it must outlive this process.
	args := []string{"-c", watch, "watch", strconv.Itoa(os.Getpid()), script("down.sh"), dir}
	cmd := exec.CommandContext(context.Background(), "bash", args...) //nolint:gosec // our own script
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the cluster's watcher: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reap it when Stop kills it
	return cmd.Process, nil
}

// Stop stops the cluster with hack/cluster/down.sh (every process by PID, then the cgroups, the
// host paths up.sh created and the state dir); it returns down.sh's failure, for instance a
// process, mount or changed host sysctl left behind. Later calls return the first call's result.
func (c *Cluster) Stop(out io.Writer) error {
	c.stopOnce.Do(func() {
		if c.watcher != nil {
			_ = c.watcher.Kill()
		}
		c.stopErr = stopDir(c.StateDir, out)
	})
	return c.stopErr
}

func stopDir(dir string, out io.Writer) error {
	if out == nil {
		out = os.Stderr
	}
	cmd := exec.CommandContext(context.Background(), script("down.sh"), dir) //nolint:gosec // the repository's own script
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("stopping the cluster (hack/cluster/down.sh %s): %w", dir, err)
	}
	return nil
}

// LogTails returns the last n lines of every component's log (logs/*.log of the state dir).
func (c *Cluster) LogTails(n int) string {
	files, _ := filepath.Glob(filepath.Join(c.StateDir, "logs", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // the cluster's own logs
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "==> %s (last %d lines) <==\n%s\n", f, n, lastLines(string(data), n))
	}
	return b.String()
}

// KeepLogs copies the state dir's logs/ to a new directory under the system temp dir (down.sh
// removes the state dir) and returns its path.
func (c *Cluster) KeepLogs() (string, error) {
	dst, err := os.MkdirTemp("", "actionledger-cluster-logs-")
	if err != nil {
		return "", fmt.Errorf("creating the logs copy: %w", err)
	}
	if err := os.CopyFS(dst, os.DirFS(filepath.Join(c.StateDir, "logs"))); err != nil {
		return dst, fmt.Errorf("copying the cluster logs: %w", err)
	}
	return dst, nil
}

// upMessages returns up.sh's own lines ("cluster: ...") of its stderr, without the log tails.
func upMessages(stderr string) string {
	var msgs []string
	for line := range strings.SplitSeq(stderr, "\n") {
		if msg, ok := strings.CutPrefix(line, "cluster: "); ok {
			msgs = append(msgs, msg)
		}
	}
	return strings.Join(msgs, "; ")
}

// ImportImage imports an image tarball (docker save or OCI layout, e.g. written by hack/image)
// into the node's containerd, where the kubelet finds it (pods use imagePullPolicy Never or
// IfNotPresent with a tag that is not latest).
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	args := []string{"--address", c.ContainerdAddress, "-n", "k8s.io", "images", "import", tarball}
	cmd := exec.CommandContext(ctx, "ctr", args...) //nolint:gosec // a test's own tarball
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing %s into the cluster's containerd: %w: %s", tarball, err, out)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var (
	suiteMu sync.Mutex
	suite   *Cluster
)

// Main is TestMain for a cluster suite: with ACTIONLEDGER_CLUSTER=1 it starts the cluster
// (failing the run at once when it cannot), runs the tests, keeps a copy of the logs when a test
// failed, stops the cluster and exits (non-zero when down.sh found something left behind).
// Without it the tests run and skip themselves in Require.
func Main(m *testing.M) { MainWith(m, Options{}) }

// MainWith is Main with Options for Start (up.sh's knobs in o.Env).
func MainWith(m *testing.M, o Options) {
	if !Enabled() {
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	c, err := Start(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "clusterenv: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "clusterenv: cluster up in %s: API server https://%s:%d, kubeconfig %s\n",
		c.StartTime, c.APIServerHost, c.APIServerPort, c.Kubeconfig)
	suiteMu.Lock()
	suite = c
	suiteMu.Unlock()
	code := m.Run()
	if code != 0 {
		if dir, err := c.KeepLogs(); err == nil {
			fmt.Fprintf(os.Stderr, "clusterenv: a test failed; the cluster's logs are kept in %s\n", dir)
		}
	}
	began := time.Now()
	if err := c.Stop(os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "clusterenv: %v\n", err)
		code = max(code, 1)
	}
	fmt.Fprintf(os.Stderr, "clusterenv: cluster stopped in %s\n", time.Since(began).Round(100*time.Millisecond))
	os.Exit(code)
}

// Require returns the suite's cluster. It skips the test unless ACTIONLEDGER_CLUSTER=1, and fails
// it when TestMain did not call Main. When the test fails, it logs the tail of every component's log.
func Require(t testing.TB) *Cluster {
	t.Helper()
	if !Enabled() {
		t.Skipf("the real-cluster suite runs with %s=1 (make test-cluster)", EnvVar)
	}
	suiteMu.Lock()
	c := suite
	suiteMu.Unlock()
	if c == nil {
		t.Fatal("no cluster: the package's TestMain must call clusterenv.Main")
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs (state dir %s):\n%s", c.StateDir, c.LogTails(40))
		}
	})
	return c
}

// TokenKubeconfig writes dir/<name>.kubeconfig, which reaches c's API server as the bearer token token in
// namespace ns (for kubectl or helm run as that identity), with the cluster's CA beside it; it returns its path.
func (c *Cluster) TokenKubeconfig(t testing.TB, dir, name, ns, token string) string {
	t.Helper()
	ca := c.Config.CAData
	if len(ca) == 0 {
		data, err := os.ReadFile(c.Config.CAFile)
		if err != nil {
			t.Fatalf("reading the cluster CA: %v", err)
		}
		ca = data
	}
	caFile := filepath.Join(dir, "cluster-ca.crt")
	path := filepath.Join(dir, name+".kubeconfig")
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: %q}}]
current-context: c
`, c.Config.Host, caFile, token, ns)
	for f, data := range map[string][]byte{caFile: ca, path: []byte(kubeconfig)} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatalf("writing %s: %v", f, err)
		}
	}
	return path
}
