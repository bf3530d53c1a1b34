// Package envtestutil starts a real control plane (kube-apiserver + etcd via envtest, built from Go modules by
// hack/build-controlplane.sh) and the real actionledger manager for integration tests, with helpers to create
// tenants, destinations and actions and to wait on them.
package envtestutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/test/destination"
)

// Env is a running control plane.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
}

var nsCounter atomic.Int64

// RepoRoot returns the repository root (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir returns KUBEBUILDER_ASSETS, or the first control plane under bin/k8s.
func AssetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	base := filepath.Join(RepoRoot(), "bin", "k8s")
	entries, err := os.ReadDir(base)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if e.IsDir() {
			return filepath.Join(base, e.Name())
		}
	}
	return ""
}

// Start starts etcd and kube-apiserver with actionledger's CRDs installed. Call from TestMain.
func Start() (*Env, error) {
	level := zapcore.ErrorLevel
	if os.Getenv("TEST_VERBOSE") != "" {
		level = zapcore.Level(-2)
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level)))
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: AssetsDir(),
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest (run 'make test', which builds the control plane into bin/k8s): %w", err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Env{Env: env, Config: cfg, Client: c}, nil
}

// Main is a TestMain body: start the control plane, run the tests, stop it.
func Main(m *testing.M, out **Env) {
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*out = e
	code := m.Run()
	if err := e.Env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
	os.Exit(code)
}

// LoopbackEgress is the egress configuration of test managers: --destination-allow-cidrs=127.0.0.1/32,
// because the tests' destinations listen on 127.0.0.1, which the default policy denies (as it denies the
// envtest API server's own address, 127.0.0.1, which this lifts as well; see docs/security.md).
func LoopbackEgress() *egress.Config {
	return &egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
}

// LoopbackPolicy is LoopbackEgress as a policy, for executors built by tests (httpexec.WithEgressPolicy).
func LoopbackPolicy() *egress.Policy { return egress.New(*LoopbackEgress()) }

// StartManager runs the real manager (built as cmd/main.go builds it) in-process until the test ends;
// the returned stop stops it earlier (a clean shutdown, not a crash). A nil o.Egress becomes
// LoopbackEgress(); pass &egress.Config{} for the default policy.
func (e *Env) StartManager(t testing.TB, o app.Options) (stop func()) {
	t.Helper()
	if o.Egress == nil {
		o.Egress = LoopbackEgress()
	}
	if o.MaxConcurrentReconciles == 0 {
		o.MaxConcurrentReconciles = 8
	}
	if o.ClaimMargin == 0 {
		o.ClaimMargin = time.Second
	}
	o.SkipNameValidation = true
	mgr, err := app.New(e.Config, o)
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager stopped: %v", err)
		}
	}()
	var once atomic.Bool
	stop = func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// Namespace creates a fresh namespace (tenant) for one test.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), base)
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.TrimRight(name, "-")
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(context.Background(), nsObj); err != nil {
		t.Fatalf("namespace: %v", err)
	}
	return name
}

// DestinationServer starts the recording destination (test/destination) on loopback.
func DestinationServer(t testing.TB, o destination.Options) (*destination.Server, string) {
	t.Helper()
	s := destination.New(o)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// CreateDestination creates a Destination at url, after mutate.
func (e *Env) CreateDestination(t testing.TB, ns, name, url string, mutate func(*actionsv1alpha1.DestinationSpec)) {
	t.Helper()
	d := &actionsv1alpha1.Destination{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       actionsv1alpha1.DestinationSpec{URL: url},
	}
	if mutate != nil {
		mutate(&d.Spec)
	}
	if err := e.Client.Create(context.Background(), d); err != nil {
		t.Fatalf("creating Destination: %v", err)
	}
}

// Action returns an ExternalAction POSTing body (JSON, may be "") to path on dest.
func Action(ns, name, dest, path, body string) *actionsv1alpha1.ExternalAction {
	xa := &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: actionsv1alpha1.ExternalActionSpec{
			DestinationRef: actionsv1alpha1.DestinationReference{Name: dest},
			Request:        actionsv1alpha1.ActionRequest{Method: "POST", Path: path},
		},
	}
	if body != "" {
		xa.Spec.Request.Body = &apiextensionsv1.JSON{Raw: []byte(body)}
	}
	return xa
}

// Create creates obj or fails the test.
func (e *Env) Create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := e.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// Get reads the action.
func (e *Env) Get(t testing.TB, ns, name string) *actionsv1alpha1.ExternalAction {
	t.Helper()
	xa := &actionsv1alpha1.ExternalAction{}
	if err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, xa); err != nil {
		t.Fatalf("get %s/%s: %v", ns, name, err)
	}
	return xa
}

// WaitFor polls the action every 50ms until cond holds, or fails the test after timeout.
func (e *Env) WaitFor(
	t testing.TB, ns, name string, timeout time.Duration, what string, cond func(*actionsv1alpha1.ExternalAction) bool,
) *actionsv1alpha1.ExternalAction {
	t.Helper()
	var xa *actionsv1alpha1.ExternalAction
	var err error
	Eventually(t, timeout, func() string {
		b, _ := json.Marshal(xa.Status)
		return fmt.Sprintf("%s/%s: %s; last status %s (err %v)", ns, name, what, b, err)
	}, func() bool {
		xa = &actionsv1alpha1.ExternalAction{}
		err = e.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, xa)
		return err == nil && cond(xa)
	})
	return xa
}

// Eventually checks cond every 50ms until it holds, or fails the test after timeout with what() in the message.
func Eventually(t testing.TB, timeout time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Consistently checks cond every 50ms for d and fails the test, with what() in the message, the first time it
// does not hold: the way to show that something does not happen.
func Consistently(t testing.TB, d time.Duration, what func() string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if !cond() {
			t.Fatalf("expected %s to hold for %s, but it stopped holding", what(), d)
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Say turns a fixed description into Eventually's what.
func Say(s string) func() string { return func() string { return s } }

// HasEvent reports whether a core Event of type typ (Normal or Warning) and reason regards ns/name.
func (e *Env) HasEvent(t testing.TB, ns, name, typ, reason string) bool {
	t.Helper()
	list := &corev1.EventList{}
	if err := e.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing events: %v", err)
	}
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == name && ev.Type == typ && ev.Reason == reason {
			return true
		}
	}
	return false
}

// WaitEvent waits up to timeout for an Event of type typ and reason regarding ns/name.
func (e *Env) WaitEvent(t testing.TB, ns, name, typ, reason string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() string {
		return fmt.Sprintf("a %s event %s for %s/%s; events: %v", typ, reason, ns, name, e.Events(t, ns, name))
	}, func() bool { return e.HasEvent(t, ns, name, typ, reason) })
}

// WaitPhase waits for the action's phase.
func (e *Env) WaitPhase(
	t testing.TB, ns, name string, phase actionsv1alpha1.Phase, timeout time.Duration,
) *actionsv1alpha1.ExternalAction {
	t.Helper()
	return e.WaitFor(t, ns, name, timeout, "phase "+string(phase), func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.Phase == phase
	})
}

// Events lists "Reason: message" of the core Events regarding the named object.
func (e *Env) Events(t testing.TB, ns, name string) []string {
	t.Helper()
	var out []string
	list := &corev1.EventList{}
	if err := e.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing events: %v", err)
	}
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == name {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return out
}

// JSON renders v for messages.
func JSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Build compiles packages (binary name -> package path relative to the repository root, e.g.
// "actionledger": "./cmd") into dir. Tests that run real processes build fresh binaries this way, so a stale
// bin/ never stands in for the code under test; the build cache makes it a link step when warm.
func Build(ctx context.Context, dir string, pkgs map[string]string) error {
	for name, pkg := range pkgs {
		//nolint:gosec // the packages are chosen by the tests, not by input
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}

// Kubeconfig writes envtest's admin kubeconfig for this control plane into a temporary file and
// returns its path, for processes (the manager binary, kubectl) that talk to it.
func (e *Env) Kubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, e.Env.KubeConfig, 0o600); err != nil {
		t.Fatalf("writing kubeconfig: %v", err)
	}
	return path
}

// RequestCount is the API server's apiserver_request_total summed over response codes for one resource, verb
// (GET, LIST, POST, PUT, PATCH, APPLY, DELETE) and subresource ("" for the object itself), read from /metrics.
// It counts every client of this control plane: take a difference around what is measured.
func (e *Env) RequestCount(t testing.TB, resource, verb, subresource string) float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	body, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading API server metrics: %v", err)
	}
	want := map[string]string{"resource": resource, "verb": verb, "subresource": subresource}
	var sum float64
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, _ := strings.Cut(line[len("apiserver_request_total{"):], "} ")
		match := true
		for k, v := range want {
			if !strings.Contains(","+labels, ","+k+`="`+v+`"`) {
				match = false
				break
			}
		}
		if match {
			f, _ := strconv.ParseFloat(strings.TrimSpace(value), 64)
			sum += f
		}
	}
	return sum
}

// FinalizerPolicyFile is the shipped MutatingAdmissionPolicy (and its binding) that adds the ledger finalizer
// on create.
const FinalizerPolicyFile = "config/admission/finalizer_policy.yaml"

// RequestedByPolicyFile is the shipped MutatingAdmissionPolicy (and its binding) that sets the requested-by
// annotation from the requester.
const RequestedByPolicyFile = "config/admission/requested_by_policy.yaml"

// InstallFinalizerPolicy creates the objects of FinalizerPolicyFile as shipped and waits until the API server
// applies the policy (a dry-run create of an ExternalAction in ns comes back with the finalizer); the returned
// remove deletes them again and waits until creates are no longer mutated. Both also run at the test's end.
func (e *Env) InstallFinalizerPolicy(t testing.TB, ns string) (remove func()) {
	t.Helper()
	return e.InstallAdmissionPolicy(t, FinalizerPolicyFile, ns, func(probe *actionsv1alpha1.ExternalAction) bool {
		return slices.Contains(probe.Finalizers, actionsv1alpha1.Finalizer)
	})
}

// CreateFile creates the objects of file (a YAML or JSON file of the repository, path from its root, several
// documents allowed) as they are and returns them; a failure ends the test. Nothing is deleted at its end.
func (e *Env) CreateFile(t testing.TB, file string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(filepath.Join(RepoRoot(), file)) //nolint:gosec // a file of the repository named by the test
	if err != nil {
		t.Fatalf("opening %s: %v", file, err)
	}
	defer func() { _ = f.Close() }()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding %s: %v", file, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := e.Client.Create(context.Background(), u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		objs = append(objs, u)
	}
}

// InstallAdmissionPolicy creates the objects of file (a path in the repository, such as FinalizerPolicyFile)
// as shipped and waits until the API server applies the policy: applied reports whether a dry-run create of an
// ExternalAction in ns came back mutated by it. The returned remove deletes the objects again and waits until
// creates are no longer mutated. Both also run at the test's end.
func (e *Env) InstallAdmissionPolicy(t testing.TB, file, ns string,
	applied func(*actionsv1alpha1.ExternalAction) bool) (remove func()) {
	t.Helper()
	ctx := context.Background()
	objs := e.CreateFile(t, file)
	var lastErr error
	mutated := func() bool {
		probe := Action(ns, "policy-probe", "none", "/", "")
		// Just after envtest installed the CRDs, a dry-run create can still be refused ("Resource kind ... not
		// found"): wait that out too.
		if lastErr = e.Client.Create(ctx, probe, client.DryRunAll); lastErr != nil {
			return false
		}
		return applied(probe)
	}
	Eventually(t, 30*time.Second, func() string {
		return fmt.Sprintf("the policy of %s to apply to creates (last error %v)", file, lastErr)
	}, mutated)
	var once atomic.Bool
	remove = func() {
		if !once.CompareAndSwap(false, true) {
			return
		}
		for _, u := range objs {
			if err := e.Client.Delete(ctx, u); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
		Eventually(t, 30*time.Second, Say("creates to be no longer mutated by the policy of "+file),
			func() bool { return !mutated() })
	}
	t.Cleanup(remove)
	return remove
}
