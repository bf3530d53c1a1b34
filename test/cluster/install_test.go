package cluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// install imports the image, writes the values a user of this cluster writes, creates the gateway's TLS Secret
// and runs helm install --wait; it returns when the manager and the gateway are Available.
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
	repo, tag, _ := strings.Cut(image, ":")
	p.values = filepath.Join(p.dir, "values.yaml")
	writeFile(t, p.values, fmt.Sprintf(valuesTemplate, repo, tag, p.ports.managerHealth, p.ports.managerMetrics,
		p.ports.gateway, p.ports.gatewayHealth, p.ports.gatewayMetrics, c.APIServerPort))

	// The gateway serves HTTPS with a certificate the user provides (cert-manager or by hand) in this Secret.
	p.kubectl(t, "create", "namespace", releaseNamespace)
	p.caFile = p.gatewayCertificate(t)

	began = time.Now()
	out := p.helm(t, "install", releaseName, filepath.Join(clusterenv.RepoRoot(), "dist", "chart"),
		"--namespace", releaseNamespace, "--values", p.values, "--wait", "--timeout", "4m")
	t.Logf("cluster: helm install --wait: %.1fs\n%s", time.Since(began).Seconds(), out)
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

// valuesTemplate is the values file of a user of this cluster: the imported image, the node's network (no pod
// network), the API server's address (no kube-proxy), ports of their own for the manager and the gateway
// (they share the node's network), egress to the destination on 127.0.0.1 (denied by default), the
// viewer/editor roles for the tenants, and one gateway on the single node.
const valuesTemplate = `manager:
  replicas: 1
  image:
    repository: %s
    tag: %q
    pullPolicy: IfNotPresent
  args:
    - --leader-elect=true
    - --destination-allow-cidrs=127.0.0.1/32
  healthProbe:
    port: %d
metrics:
  port: %d
gateway:
  replicas: 1
  strategy:
    type: Recreate
  port: %d
  healthProbe:
    port: %d
  metrics:
    port: %d
hostNetwork: true
kubernetesService:
  host: 127.0.0.1
  port: %d
rbac:
  helpers:
    enabled: true
`

// gatewayCertificate makes a CA and a serving certificate for 127.0.0.1 and localhost, stores them as the
// gateway's TLS Secret and returns the CA's file.
func (p *product) gatewayCertificate(t *testing.T) string {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "actionledger-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("making the CA: %v", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "actionledger-gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", gatewayName + "-service." + releaseNamespace + ".svc"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("making the gateway's certificate: %v", err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: gatewayTLSSecret, Namespace: releaseNamespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
	}
	if err := p.cl.Create(context.Background(), secret); err != nil {
		t.Fatalf("creating the gateway's TLS Secret: %v", err)
	}
	caFile := filepath.Join(p.dir, "ca.crt")
	writeFile(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})))
	return caFile
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
	ca := p.c.Config.CAData
	if len(ca) == 0 {
		data, err := os.ReadFile(p.c.Config.CAFile)
		if err != nil {
			t.Fatalf("reading the cluster CA: %v", err)
		}
		ca = data
	}
	caFile := filepath.Join(p.dir, "cluster-ca.crt")
	writeFile(t, caFile, string(ca))
	path := filepath.Join(p.dir, name+".kubeconfig")
	writeFile(t, path, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: %q}}]
current-context: c
`, p.c.Config.Host, caFile, token, ns))
	return path
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
