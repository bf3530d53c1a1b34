package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/actionledger/actionledger/internal/scheme"
	"github.com/actionledger/actionledger/test/clusterenv"
	"github.com/actionledger/actionledger/test/destination"
)

// The release as a user installs it: its name, namespace and the chart's object names that follow from them.
const (
	releaseName      = "actionledger"
	releaseNamespace = "actionledger-system"
	managerName      = releaseName + "-controller-manager" // Deployment and ServiceAccount
	gatewayName      = releaseName + "-gateway"
	gatewayTLSSecret = releaseName + "-gateway-tls"
	managerSelector  = "control-plane=controller-manager"
	gatewaySelector  = "app.kubernetes.io/component=gateway"
)

// product is the installed product: the cluster, the tools a user runs against it, the ports the values file
// gave the manager and the gateway on the node's network, and the gateway's CA.
type product struct {
	t      *testing.T // the whole test's: what it creates lives until the test ends
	c      *clusterenv.Cluster
	cl     client.Client
	dir    string // the user's working directory: values file, CA, kubeconfigs
	bin    string // the repository's bin/
	values string // the values file
	ports  ports
	caFile string // the gateway's CA (PEM)
	// installed is when helm install returned.
	installed time.Time

	// sampleNS and sampleDest are the sample's namespace and destination (set by testSample).
	sampleNS   string
	sampleDest *destination.Server
	// floodNS is the namespace of the flood's ServiceAccounts and ConfigMaps.
	floodNS string
	// secondMetrics is the second manager replica's metrics port (set by testSecondReplica; 0 before).
	secondMetrics int
}

type ports struct {
	managerHealth, managerMetrics, gateway, gatewayHealth, gatewayMetrics int
}

// binaries is what make test-cluster builds into bin/ before it runs the suite: helm, the kubectl plugin and the
// image (ACTIONLEDGER_IMAGE_TAR, ACTIONLEDGER_IMAGE: the tarball and name:tag of make image).
func binaries(t *testing.T) (bin, imageTar, image string) {
	t.Helper()
	bin = filepath.Join(clusterenv.RepoRoot(), "bin")
	imageTar, image = os.Getenv("ACTIONLEDGER_IMAGE_TAR"), os.Getenv("ACTIONLEDGER_IMAGE")
	for _, need := range []string{filepath.Join(bin, "helm"), filepath.Join(bin, "kubectl-actionledger"), imageTar} {
		if _, err := os.Stat(need); need == "" || err != nil { //nolint:gosec // paths make test-cluster gives
			t.Fatalf("%q is missing: run the suite with make test-cluster (it builds the image, helm and the kubectl plugin into bin/ "+
				"and sets ACTIONLEDGER_IMAGE_TAR and ACTIONLEDGER_IMAGE)", need)
		}
	}
	if !strings.Contains(image, ":") {
		t.Fatalf("ACTIONLEDGER_IMAGE=%q: want the image's name:tag (make test-cluster sets it)", image)
	}
	return bin, imageTar, image
}

// install imports the image and runs the README's helm install for a cluster without a pod network (its values
// file, and one of this suite's: readmeInstall, suiteValuesTemplate); it returns when the manager and the gateway
// are Available and the API server admits ExternalActions.
func install(t *testing.T, c *clusterenv.Cluster) *product {
	t.Helper()
	ctx := context.Background()
	bin, tarball, image := binaries(t)
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 500, 1000 // the test's own creates: not throttled on the client side
	cl, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatalf("building a client: %v", err)
	}
	p := &product{t: t, c: c, cl: cl, dir: t.TempDir(), bin: bin}
	began := time.Now()
	if err := c.ImportImage(ctx, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster: image %s imported in %.1fs", filepath.Base(tarball), time.Since(began).Seconds())

	p.ports = ports{managerHealth: freePort(t), managerMetrics: freePort(t), gateway: freePort(t),
		gatewayHealth: freePort(t), gatewayMetrics: freePort(t)}
	// The README's install for a cluster without a pod network, verbatim (its values file, read from README.md, and
	// its helm command), with a second values file for what this cluster needs besides (suiteValuesTemplate).
	readmeValues, readmeCommand := readmeInstall(t)
	p.values = filepath.Join(p.dir, "values-hostnetwork.yaml")
	writeFile(t, p.values, readmeValues)
	repo, tag, _ := strings.Cut(image, ":")
	suite := filepath.Join(p.dir, "suite-values.yaml")
	writeFile(t, suite, fmt.Sprintf(suiteValuesTemplate, repo, tag, p.ports.managerHealth, p.ports.managerMetrics,
		p.ports.gateway, p.ports.gatewayHealth, p.ports.gatewayMetrics, c.APIServerPort))
	args := strings.Fields(strings.TrimPrefix(readmeCommand, "bin/helm "))
	for i, a := range args {
		switch a {
		case "dist/chart":
			args[i] = filepath.Join(clusterenv.RepoRoot(), "dist", "chart")
		case "values-hostnetwork.yaml":
			args[i] = p.values
		}
	}
	args = append(args, "-f", suite, "--timeout", "4m")

	began = time.Now()
	out := p.helm(t, args...)
	t.Logf("cluster: helm %s: %.1fs\n%s", strings.Join(args, " "), time.Since(began).Seconds(), out)
	// The gateway's certificate: the self-signed one the chart made (gateway.tls.generate, the default); its CA is
	// ca.crt in the Secret.
	sec, err := c.Clientset.CoreV1().Secrets(releaseNamespace).Get(ctx, gatewayTLSSecret, metav1.GetOptions{})
	if err != nil || len(sec.Data["ca.crt"]) == 0 {
		t.Fatalf("the chart's gateway TLS Secret %s: %v (ca.crt %d bytes)", gatewayTLSSecret, err, len(sec.Data["ca.crt"]))
	}
	p.caFile = filepath.Join(p.dir, "gateway-ca.crt")
	writeFile(t, p.caFile, string(sec.Data["ca.crt"]))
	// The chart's CRDs are templates (kubebuilder's layout, not Helm's crds/): helm --wait can return before the
	// API server serves them. What a user does before applying a custom resource:
	p.kubectl(t, "wait", "--for=condition=Established", "--timeout=1m",
		"crd/externalactions.actions.actionledger.dev", "crd/destinations.actions.actionledger.dev",
		"crd/clusterdestinations.actions.actionledger.dev", "crd/actiontombstones.actions.actionledger.dev")
	// Established is not enough: the chart's MutatingAdmissionPolicies (the finalizer) need the CRD's published
	// OpenAPI schema, which the API server's policy plugin reads every 5 s; until then a create is refused with 503
	// "Resource kind ... not found" (a clean-clone CI run's sample apply met it right after the wait above, as
	// hack/run-local.sh had). A server-side dry run passes admission: wait until one does (docs/gitops.md).
	sample := filepath.Join(clusterenv.RepoRoot(), "config", "samples", "actions_v1alpha1_externalaction.yaml")
	began = time.Now()
	poll(t, time.Minute, "the API server to admit ExternalActions (a server-side dry run)", func(context.Context) (bool, error) {
		out, err := p.kubectlErr("apply", "--dry-run=server", "-n", "default", "-f", sample)
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
		}
		return true, nil
	})
	t.Logf("cluster: ExternalActions admitted %.1fs after the CRDs were Established", time.Since(began).Seconds())
	p.installed = time.Now()
	return p
}

// suiteValuesTemplate is what this suite adds to the README's values file: the image make test-cluster built (the
// chart's default names the same, localhost/actionledger:<appVersion>, unless IMAGE_NAME was changed), the API
// server's port (random here, 6443 in the README), ports picked free for the manager (the README's are the chart's
// 8081 and 8443, which another process on a shared machine may hold) and the gateway, on as the README says to run
// it on such a node (its own ports, one replica, Recreate), with the certificate the chart makes.
const suiteValuesTemplate = `manager:
  image:
    repository: %s
    tag: %q
  healthProbe:
    port: %d
metrics:
  port: %d
gateway:
  enabled: true
  replicas: 1
  strategy:
    type: Recreate
  port: %d
  healthProbe:
    port: %d
  metrics:
    port: %d
kubernetesService:
  port: %d
`

// readmeInstall returns the README's values file for a cluster without a pod network (the yaml block that starts
// with "# values-hostnetwork.yaml") and the helm install command that uses it.
func readmeInstall(t *testing.T) (values, command string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(clusterenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "```yaml\n# values-hostnetwork.yaml\n")
	if !ok {
		t.Fatal("README.md has no yaml block starting with '# values-hostnetwork.yaml'")
	}
	values, after, _ = strings.Cut(after, "```")
	for line := range strings.SplitSeq(after, "\n") {
		if strings.HasPrefix(line, "bin/helm install ") && strings.Contains(line, "values-hostnetwork.yaml") {
			return values, line
		}
	}
	t.Fatal("README.md has no 'bin/helm install ... values-hostnetwork.yaml' command after its values file")
	return "", ""
}

// kubectl runs the cluster's kubectl as its admin and returns its standard output; it fails the test on an error.
func (p *product) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return p.run(t, nil, p.kubectlPath(), append([]string{"--kubeconfig", p.c.Kubeconfig}, args...)...)
}

// kubectlErr is kubectl as the cluster's admin that returns its error (with the standard error as output)
// rather than ending the test.
func (p *product) kubectlErr(args ...string) (string, error) {
	return p.runErr(nil, nil, p.kubectlPath(), append([]string{"--kubeconfig", p.c.Kubeconfig}, args...)...)
}

// kubectlPath is the cluster's kubectl, built with its control plane.
func (p *product) kubectlPath() string { return filepath.Join(p.c.Env["KUBE_ASSETS"], "kubectl") }

// kubectlIn is kubectl with stdin.
func (p *product) kubectlIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return p.run(t, strings.NewReader(stdin), p.kubectlPath(), append([]string{"--kubeconfig", p.c.Kubeconfig}, args...)...)
}

// helm runs bin/helm as the cluster's admin.
func (p *product) helm(t *testing.T, args ...string) string {
	t.Helper()
	return p.run(t, nil, filepath.Join(p.bin, "helm"), append([]string{"--kubeconfig", p.c.Kubeconfig}, args...)...)
}

func (p *product) run(t *testing.T, stdin *strings.Reader, name string, args ...string) string {
	t.Helper()
	out, err := p.runErr(stdin, nil, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

// runErr runs a command (with PATH holding bin/ and the cluster's kubectl first, and extra environment) and
// returns its standard output, or its standard error with the error.
func (p *product) runErr(stdin *strings.Reader, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // the test's own tools
	cmd.Env = append(os.Environ(), "PATH="+p.bin+":"+p.c.Env["KUBE_ASSETS"]+":"+os.Getenv("PATH"),
		"HELM_CACHE_HOME="+filepath.Join(p.dir, "helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(p.dir, "helm-config"),
		"HELM_DATA_HOME="+filepath.Join(p.dir, "helm-data"))
	cmd.Env = append(cmd.Env, env...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// serviceAccountToken returns a token of a ServiceAccount from the TokenRequest API (kubectl create token).
func (p *product) serviceAccountToken(t *testing.T, ns, sa string) string {
	t.Helper()
	return strings.TrimSpace(p.kubectl(t, "create", "token", sa, "-n", ns, "--duration", "1h"))
}

// tokenKubeconfig writes a kubeconfig that authenticates with token, for tools run as that identity.
func (p *product) tokenKubeconfig(t *testing.T, name, ns, token string) string {
	t.Helper()
	return p.c.TokenKubeconfig(t, p.dir, name, ns, token)
}

// startDestination runs a recording destination (test/destination) on a free port of 127.0.0.1, the address
// the pods on the node's network reach it at.
func startDestination(t *testing.T, o destination.Options) (*destination.Server, string) {
	t.Helper()
	srv := destination.New(o)
	ts := httptest.NewUnstartedServer(srv)
	ts.Config.ReadHeaderTimeout = 10 * time.Second
	ts.Start()
	t.Cleanup(ts.Close)
	return srv, ts.URL
}

// httpGet answers the status and body of a GET on the node's network.
func httpGet(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil { //nolint:gosec // the test's own temp dir
		t.Fatalf("writing %s: %v", path, err)
	}
}
