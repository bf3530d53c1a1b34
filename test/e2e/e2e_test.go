/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package e2e tests actionledger as users run it: real OS processes (etcd, kube-apiserver, the
// actionledger binary, the demo destination) driven with the real kubectl. It needs the control
// plane in bin/k8s (make controlplane); TestMain builds the actionledger and demo-destination
// binaries from the current source into a temporary directory.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

var (
	// binDir holds actionledger and demo-destination, built from the current source by TestMain.
	binDir string
	// assets is the control plane directory (etcd, kube-apiserver, kubectl).
	assets string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets = envtestutil.AssetsDir()
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s missing in %q: run 'make controlplane' (make test does)\n", b, assets)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "actionledger-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	binDir = dir
	// Always build: a stale bin/actionledger would test old code. The build cache makes this a link.
	if err := envtestutil.Build(context.Background(), dir, map[string]string{
		"actionledger": "./cmd", "demo-destination": "./test/cmd/destination",
	}); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	return m.Run()
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// runLocal starts hack/run-local.sh with its state in dir and returns the command and its output.
func runLocal(t *testing.T, dir string, extraEnv ...string) (*exec.Cmd, *envtestutil.SyncBuffer) {
	t.Helper()
	script := filepath.Join(envtestutil.RepoRoot(), "hack", "run-local.sh")
	cmd := exec.CommandContext(context.Background(), script) //nolint:gosec // the repo's script
	cmd.Env = append(os.Environ(),
		"RUN_LOCAL_DIR="+dir,
		"RUN_LOCAL_BIN_DIR="+binDir,
		"KUBEBUILDER_ASSETS="+assets,
		"RUN_LOCAL_DEST_ADDR="+freeAddr(t),
		"RUN_LOCAL_METRICS_ADDR="+freeAddr(t),
		"RUN_LOCAL_PROBE_ADDR="+freeAddr(t),
		"RUN_LOCAL_GATEWAY_ADDR="+freeAddr(t),
		"RUN_LOCAL_GATEWAY_METRICS_ADDR="+freeAddr(t),
		"RUN_LOCAL_TIMEOUT=120",
	)
	cmd.Env = append(cmd.Env, extraEnv...)
	out := &envtestutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so that a failed test can stop the script and whatever it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting run-local.sh: %v", err)
	}
	return cmd, out
}

// waitExit waits for cmd, killing its process group after timeout.
func waitExit(t *testing.T, cmd *exec.Cmd, out *envtestutil.SyncBuffer, timeout time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err := <-done
		t.Fatalf("run-local.sh did not exit within %s (killed: %v); output:\n%s", timeout, err, out)
		return nil
	}
}

var processesLine = regexp.MustCompile(`Processes: (.*)`)

// reportedPIDs parses the "Processes: etcd=1 kube-apiserver=2 ..." line run-local.sh prints.
func reportedPIDs(t *testing.T, out string) map[string]int {
	t.Helper()
	m := processesLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("run-local.sh printed no Processes line; output:\n%s", out)
	}
	pids := map[string]int{}
	for f := range strings.FieldsSeq(m[1]) {
		name, v, _ := strings.Cut(f, "=")
		pid, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("bad Processes entry %q", f)
		}
		pids[name] = pid
	}
	for _, want := range []string{"etcd", "kube-apiserver", "demo-destination", "actionledger", "gateway"} {
		if pids[want] == 0 {
			t.Fatalf("Processes line %q has no %s", m[1], want)
		}
	}
	return pids
}

// leftovers lists running processes whose command line or environment mentions dir.
func leftovers(dir string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f)) //nolint:gosec // /proc entries
			if err == nil && bytes.Contains(b, []byte(dir)) {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				found = append(found, e.Name()+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte(" "))))
				break
			}
		}
	}
	return found
}

// assertStopped checks that none of the reported processes, nor any process mentioning dir, runs.
func assertStopped(t *testing.T, dir string, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("%s (pid %d) still runs after run-local.sh exited", name, pid)
		}
	}
	if l := leftovers(dir); len(l) > 0 {
		t.Errorf("processes left behind:\n%s", strings.Join(l, "\n"))
	}
}

// TestRunLocal runs `hack/run-local.sh` twice on the same state directory: once with
// RUN_LOCAL_EXIT_AFTER_READY=1, once in the foreground stopped with SIGINT (Ctrl-C). Each run must
// bring the sample to Ready, print the kubectl hint and leave no process behind.
func TestRunLocal(t *testing.T) {
	dir := t.TempDir()

	cmd, out := runLocal(t, dir, "RUN_LOCAL_EXIT_AFTER_READY=1")
	if err := waitExit(t, cmd, out, 4*time.Minute); err != nil {
		t.Fatalf("run-local.sh failed: %v; output:\n%s", err, out)
	}
	text := out.String()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	for _, want := range []string{
		"export KUBECONFIG=" + kubeconfig,
		"kubectl get xa",
		"externalaction.actions.actionledger.dev/invoice-7 condition met",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q; output:\n%s", want, text)
		}
	}
	assertStopped(t, dir, reportedPIDs(t, text))
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Errorf("kubeconfig not written: %v", err)
	}
	// The demo destination logs its counts on exit: the sample was applied once, and only once.
	destLog, err := os.ReadFile(filepath.Join(dir, "logs", "demo-destination.log")) //nolint:gosec // test's temp dir
	if err != nil {
		t.Fatalf("reading the destination log: %v", err)
	}
	if !strings.Contains(string(destLog), "summary keys=1 requests=1 applied=1 duplicates=0") {
		t.Errorf("demo destination summary is not one request for one key:\n%s", destLog)
	}

	t.Run("second run in the foreground, stopped by SIGINT", func(t *testing.T) {
		cmd, out := runLocal(t, dir)
		deadline := time.Now().Add(4 * time.Minute)
		for !strings.Contains(out.String(), "Press Ctrl-C to stop everything.") {
			if cmd.ProcessState != nil || time.Now().After(deadline) {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Wait()
				t.Fatalf("run-local.sh did not reach the foreground wait; output:\n%s", out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		pids := reportedPIDs(t, out.String())
		gatewayThroughTLS(t, dir, out.String())
		// Ctrl-C in a terminal signals the script's foreground process group; the children run in
		// their own sessions, so only the script gets it and stops them in order.
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatalf("SIGINT: %v", err)
		}
		err := waitExit(t, cmd, out, time.Minute)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
			t.Errorf("exit after SIGINT = %v, want status 130; output:\n%s", err, out)
		}
		assertStopped(t, dir, pids)
	})
}

// manager is a running bin/actionledger process.
type manager struct {
	cmd *exec.Cmd
	log *envtestutil.SyncBuffer
}

// managerExtraArgs are flags startManager adds (set by startManagerArgs).
var managerExtraArgs []string

// startManager starts the actionledger binary against kubeconfig; it is SIGKILLed at test end.
func startManager(t *testing.T, kubeconfig string) *manager {
	t.Helper()
	bin := filepath.Join(binDir, "actionledger")
	args := append([]string{
		"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--controller-namespace=default", "--claim-margin=1s",
		"--destination-allow-cidrs=127.0.0.1/32"}, // the demo destination listens on loopback, denied by default
		managerExtraArgs...)
	cmd := exec.CommandContext(context.Background(), bin, args...) //nolint:gosec // the binary TestMain built
	log := &envtestutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting actionledger: %v", err)
	}
	m := &manager{cmd: cmd, log: log}
	t.Cleanup(func() {
		m.kill()
		if t.Failed() {
			t.Logf("actionledger pid %d log:\n%s", cmd.Process.Pid, log)
		}
	})
	return m
}

// kill SIGKILLs the manager (a crash: no shutdown code runs) and reaps it.
func (m *manager) kill() {
	if m.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
	_ = m.cmd.Wait()
}

// kubectl runs the kubectl binary against kubeconfig with stdin, failing the test on error.
func kubectl(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectlErr(kubeconfig, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kubectlErr(kubeconfig, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"--kubeconfig=" + kubeconfig}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), args...) //nolint:gosec // the built kubectl
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// header returns the first line's column names.
func header(out string) []string {
	line, _, _ := strings.Cut(out, "\n")
	return strings.Fields(line)
}

// TestManagerProcess runs the actionledger binary as an OS process against envtest, drives it with
// kubectl, and SIGKILLs it: once after an action succeeded and once while a send is in flight. The
// destination does not deduplicate, so every extra request would be a duplicate effect.
func TestManagerProcess(t *testing.T) {
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Env.Stop() })
	kubeconfig := env.Kubeconfig(t)

	dest, url := envtestutil.DestinationServer(t, destination.Options{})
	ns := env.Namespace(t)
	mgr := startManager(t, kubeconfig)

	// No deduplication downstream and POST is Unsafe: an uncertain attempt may only be settled by
	// the post-check, never by sending again.
	kubectl(t, kubeconfig, fmt.Sprintf(`
apiVersion: actions.actionledger.dev/v1alpha1
kind: Destination
metadata: {name: shop, namespace: %[1]s}
spec:
  url: %[2]s
  timeout: 2s
  reconciliation:
    path: /effects?key={key}
    applied: response.statusCode == 200
    notApplied: response.statusCode == 404
  retryPolicy: {initialBackoff: 100ms, maxBackoff: 1s}
---
apiVersion: actions.actionledger.dev/v1alpha1
kind: ExternalAction
metadata: {name: invoice-7, namespace: %[1]s}
spec:
  destinationRef: {name: shop}
  request:
    method: POST
    path: /invoices
    body: {customer: acme, amount: 4200, currency: EUR}
`, ns, url), "apply", "-f", "-")

	key := ns + "/invoice-7"
	kubectl(t, kubeconfig, "", "wait", "--for=condition=Ready", "externalaction/invoice-7", "-n", ns, "--timeout=60s")

	out := kubectl(t, kubeconfig, "", "get", "xa", "-n", ns)
	if got, want := strings.Join(header(out), " "), "NAME PHASE CODE ATTEMPTS NEXT AGE"; got != want {
		t.Errorf("kubectl get xa columns = %q, want %q:\n%s", got, want, out)
	}
	if !regexp.MustCompile(`(?m)^invoice-7\s+Succeeded\s+201\s+1\s`).MatchString(out) {
		t.Errorf("kubectl get xa row is not 'invoice-7 Succeeded 201 1':\n%s", out)
	}
	out = kubectl(t, kubeconfig, "", "get", "xa", "-n", ns, "-o", "wide")
	if got, want := strings.Join(header(out), " "), "NAME PHASE CODE ATTEMPTS NEXT AGE DESTINATION ERROR SUBJECT REASON MESSAGE"; got != want {
		t.Errorf("kubectl get xa -o wide columns = %q, want %q:\n%s", got, want, out)
	}
	// No subject and no error: those columns are empty; REASON and MESSAGE are the Ready condition's.
	if !regexp.MustCompile(`(?m)^invoice-7\s+Succeeded\s+201\s+1\s+\S+\s+shop\s+Succeeded\s+attempt 1 succeeded`).MatchString(out) {
		t.Errorf("kubectl get xa -o wide row lacks the destination or the Ready reason and message:\n%s", out)
	}
	out = kubectl(t, kubeconfig, "", "explain", "externalaction.spec.request.body")
	if !strings.Contains(out, "FIELD: body") || !strings.Contains(out, "JSON") {
		t.Errorf("kubectl explain externalaction.spec.request.body prints no documentation:\n%s", out)
	}
	if n := dest.Requests(key); n != 1 {
		t.Fatalf("destination got %d requests for %s, want 1", n, key)
	}

	// A waiting retry: NEXT is in the future and must print as a time (a date column prints <invalid>).
	kubectl(t, kubeconfig, fmt.Sprintf(`
apiVersion: actions.actionledger.dev/v1alpha1
kind: Destination
metadata: {name: down, namespace: %[1]s}
spec:
  url: http://%[2]s
  retryPolicy: {maxAttempts: 3, initialBackoff: 10m, maxBackoff: 10m, jitter: None}
---
apiVersion: actions.actionledger.dev/v1alpha1
kind: ExternalAction
metadata: {name: ticket-1, namespace: %[1]s}
spec:
  destinationRef: {name: down}
  request: {method: POST, path: /tickets, body: {title: disk full}}
`, ns, freeAddr(t)), "apply", "-f", "-")
	kubectl(t, kubeconfig, "", "wait", "--for=jsonpath={.status.attempts}=1", "externalaction/ticket-1", "-n", ns, "--timeout=60s")
	env.WaitFor(t, ns, "ticket-1", time.Minute, "nextAttemptAt set", func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.NextAttemptAt != nil
	})
	out = kubectl(t, kubeconfig, "", "get", "xa", "ticket-1", "-n", ns)
	if !regexp.MustCompile(`(?m)^ticket-1\s+InProgress\s+1\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s`).MatchString(out) {
		t.Errorf("kubectl get xa does not show the next attempt's time for a waiting retry:\n%s", out)
	}

	// Crash after success: the new process must not send again.
	mgr.kill()

	// Crash during a send: the destination holds the request for 1.5s and then applies it
	// (it commits whatever the client does). The manager is killed while waiting for the answer.
	key2 := ns + "/invoice-8"
	dest.Script(key2, destination.Step{Delay: 1500 * time.Millisecond, Apply: true, Status: 201})
	mgr = startManager(t, kubeconfig)
	kubectl(t, kubeconfig, fmt.Sprintf(`
apiVersion: actions.actionledger.dev/v1alpha1
kind: ExternalAction
metadata: {name: invoice-8, namespace: %s}
spec:
  destinationRef: {name: shop}
  request: {method: POST, path: /invoices, body: {customer: acme, amount: 99, currency: EUR}}
`, ns), "apply", "-f", "-")
	deadline := time.Now().Add(60 * time.Second)
	for dest.Requests(key2) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the manager never sent invoice-8")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mgr.kill()

	// A new process finds the claim of the dead one, waits for it to expire (timeout 2s + margin
	// 1s), asks the post-check, and learns the effect was applied: Succeeded without a resend.
	startManager(t, kubeconfig)
	kubectl(t, kubeconfig, "", "wait", "--for=condition=Ready", "externalaction/invoice-8", "-n", ns, "--timeout=60s")
	xa8 := env.Get(t, ns, "invoice-8")
	// The crash really hit the send: attempt 1 has no answer of its own; the post-check settled it.
	h := xa8.Status.AttemptHistory
	if xa8.Status.Attempts != 1 || len(h) != 1 || h[0].ErrorClass != "ClaimExpired" || h[0].Result != "Applied" {
		t.Errorf("invoice-8 was not settled by the post-check of the dead process's attempt: %s",
			envtestutil.JSON(xa8.Status))
	}
	if n := dest.Requests(key2); n != 1 {
		t.Errorf("destination got %d requests for %s, want 1 (history %s)", n, key2, envtestutil.JSON(h))
	}
	if n := dest.Effects(key2); n != 1 {
		t.Errorf("destination applied %s %d times, want 1", key2, n)
	}
	// invoice-8 is Ready, so the new process has listed every action: invoice-7 still has its
	// single request and its single attempt.
	if n := dest.Requests(key); n != 1 {
		t.Errorf("after the restarts the destination has %d requests for %s, want 1", n, key)
	}
	if xa7 := env.Get(t, ns, "invoice-7"); xa7.Status.Attempts != 1 {
		t.Errorf("invoice-7 attempts = %d after the restarts, want 1", xa7.Status.Attempts)
	}
}

var gatewayLine = regexp.MustCompile(`gateway: +(https://\S+)`)

// gatewayThroughTLS sends the request run-local.sh suggests through the gateway it started: over TLS with
// the script's CA, as the ServiceAccount checkout (a token from the TokenRequest API via kubectl create
// token), and expects the demo destination's 201, then the replay.
func gatewayThroughTLS(t *testing.T, dir, out string) {
	t.Helper()
	m := gatewayLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("run-local.sh printed no gateway address; output:\n%s", out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	token := strings.TrimSpace(kubectl(t, kubeconfig, "", "create", "token", "checkout"))
	ca, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt")) //nolint:gosec // the test's temp dir
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	send := func() (int, http.Header) {
		r, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, m[1]+"/v1/namespaces/default/destinations/demo/charges",
			strings.NewReader(`{"amount":1}`))
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set("Idempotency-Key", `"order-1"`)
		r.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(r)
		if err != nil {
			t.Fatalf("gateway request: %v", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	if code, h := send(); code != http.StatusCreated || h.Get("Idempotent-Replayed") != "" {
		t.Errorf("first gateway request: %d %v, want 201", code, h)
	}
	if code, h := send(); code != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("repeated gateway request: %d %v, want the 201 replayed", code, h)
	}
}
