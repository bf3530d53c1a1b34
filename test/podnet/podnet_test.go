// Package podnet installs the chart with its default values on a cluster with a pod network, as most users run
// it: hack/cluster/up.sh with POD_NETWORK=1 (a network namespace of the cluster's own holding the node's address,
// the pods' bridge of the bridge and host-local CNI plugins, and kube-proxy's iptables rules; docs/test-cluster.md).
// Its cluster cannot share a process with test/cluster's (one cluster per machine: they use the same host paths),
// so it is a package of its own, which make test-cluster runs after test/cluster. Without ACTIONLEDGER_CLUSTER=1
// every test skips.
package podnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/actionledger/actionledger/test/clusterenv"
)

func TestMain(m *testing.M) {
	clusterenv.MainWith(m, clusterenv.Options{Env: []string{"POD_NETWORK=1"}})
}

const (
	releaseNamespace = "actionledger-system"
	managerSelector  = "control-plane=controller-manager"
	gatewaySelector  = "app.kubernetes.io/component=gateway"
	metricsService   = "actionledger-controller-manager-metrics-service"
	gatewayService   = "actionledger-gateway-service"
	gatewayTLSSecret = "actionledger-gateway-tls"
	defaultImage     = "localhost/actionledger" // the chart's manager.image.repository; the tag is its appVersion
	destinationImage = "localhost/actionledger/destination:1.0"
)

// The README's install with the chart's default values, on a node whose pods are on a pod network: the manager's
// pod Ready through its own probes (not on the node's network), a tenant's ExternalAction to a destination behind
// a ClusterIP Service (reached through kube-proxy) Succeeded with exactly one request at the destination, the
// metrics Service and the gateway's Service answering on their ClusterIPs. The only value set is
// gateway.enabled=true (off by default), and the image only when make test-cluster built it under another name
// than the chart's default.
func TestChartDefaultsOnAPodNetwork(t *testing.T) {
	c := clusterenv.Require(t)
	e := newEnv(t, c)
	ctx := context.Background()

	// The images: the manager's, as the README says (imported into the node's containerd), and the destination's.
	tarball, image := os.Getenv("ACTIONLEDGER_IMAGE_TAR"), os.Getenv("ACTIONLEDGER_IMAGE")
	if tarball == "" || !strings.Contains(image, ":") {
		t.Fatalf("ACTIONLEDGER_IMAGE_TAR=%q ACTIONLEDGER_IMAGE=%q: run with make test-cluster (it builds the image and helm)", tarball, image)
	}
	destTar := strings.TrimSpace(lastLine(e.run(t, filepath.Join(clusterenv.RepoRoot(), "hack", "cluster", "destination-image.sh"))))
	for _, tar := range []string{tarball, destTar} {
		if err := c.ImportImage(ctx, tar); err != nil {
			t.Fatal(err)
		}
	}

	// The destination: test/cmd/destination (deduplicating, counting) as a Deployment behind a ClusterIP Service.
	destNS := e.namespace(t, "payments")
	e.kubectlIn(t, fmt.Sprintf(destinationManifest, destNS, destinationImage), "apply", "-f", "-")
	e.kubectl(t, "wait", "-n", destNS, "--for=condition=Available", "deployment/payments", "--timeout=2m")
	destIP := e.kubectl(t, "get", "service", "payments", "-n", destNS, "-o", "jsonpath={.spec.clusterIP}")

	// The README's helm install (the line without a values file), as written, plus the gateway.
	args := readmeInstall(t)
	args = append(args, "--set", "gateway.enabled=true", "--timeout", "4m")
	if repo, tag, _ := strings.Cut(image, ":"); repo != defaultImage || tag != chartAppVersion(t) {
		args = append(args, "--set", "manager.image.repository="+repo, "--set-string", "manager.image.tag="+tag)
	}
	began := time.Now()
	out := e.run(t, filepath.Join(clusterenv.RepoRoot(), "bin", "helm"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	t.Logf("podnet: helm %s: %.1fs\n%s", strings.Join(args, " "), time.Since(began).Seconds(), out)

	t.Run("ManagerReadyThroughItsProbesOnThePodNetwork", func(t *testing.T) {
		for _, sel := range []string{managerSelector, gatewaySelector} {
			pods, err := c.Clientset.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil || len(pods.Items) == 0 {
				t.Fatalf("pods %s: %v (%d)", sel, err, len(pods.Items))
			}
			for _, p := range pods.Items {
				ready, since := podReady(&p)
				ctr := p.Spec.Containers[0]
				t.Logf("podnet: pod %s: IP %s, hostNetwork %v, Ready %v %s after its creation, restarts %d, probes startup %v readiness %v liveness %v",
					p.Name, p.Status.PodIP, p.Spec.HostNetwork, ready, since, restarts(&p),
					ctr.StartupProbe != nil, ctr.ReadinessProbe != nil, ctr.LivenessProbe != nil)
				if p.Spec.HostNetwork || !e.podCIDR.Contains(net.ParseIP(p.Status.PodIP)) {
					t.Errorf("pod %s: hostNetwork %v, IP %s; want an address of the pod network %s", p.Name, p.Spec.HostNetwork, p.Status.PodIP, e.podCIDR)
				}
				if !ready || ctr.ReadinessProbe == nil || ctr.LivenessProbe == nil {
					t.Errorf("pod %s: Ready %v, readiness probe %v, liveness probe %v; want Ready through the chart's probes",
						p.Name, ready, ctr.ReadinessProbe != nil, ctr.LivenessProbe != nil)
				}
			}
		}
		// What the kubelet asked: the manager's probe endpoints on its pod address, from the node.
		pods, _ := c.Clientset.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: managerSelector})
		// The chart's defaults leave the kubelet's KUBERNETES_SERVICE_HOST (the kubernetes Service's ClusterIP): the
		// manager reaches the API server through kube-proxy.
		for _, v := range pods.Items[0].Spec.Containers[0].Env {
			if v.Name == "KUBERNETES_SERVICE_HOST" || v.Name == "KUBERNETES_SERVICE_PORT" {
				t.Errorf("the manager's container sets %s=%q; the chart's defaults leave the kubelet's (the Service's ClusterIP)", v.Name, v.Value)
			}
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			code := e.curl(t, "-s", "-o", "/dev/null", "-w", "%{http_code}", fmt.Sprintf("http://%s:8081%s", pods.Items[0].Status.PodIP, path))
			if code != "200" {
				t.Errorf("GET %s on the manager pod's address: HTTP %s, want 200", path, code)
			}
		}
	})

	// The chart's CRDs are templates: wait as a user does (README) until an ExternalAction is admitted.
	e.kubectl(t, "wait", "--for=condition=Established", "--timeout=1m",
		"crd/externalactions.actions.actionledger.dev", "crd/destinations.actions.actionledger.dev")
	sample := filepath.Join(clusterenv.RepoRoot(), "config", "samples", "actions_v1alpha1_externalaction.yaml")
	poll(t, time.Minute, "the API server to admit ExternalActions", func(context.Context) (bool, error) {
		_, err := e.runErr(nil, e.kubectlPath(), "--kubeconfig", c.Kubeconfig, "apply", "--dry-run=server", "-n", "default", "-f", sample)
		return err == nil, err
	})

	// A tenant: a ServiceAccount bound to nothing but the built-in edit ClusterRole in its namespace.
	shop := e.namespace(t, "shop")
	e.kubectl(t, "create", "serviceaccount", "dev", "-n", shop)
	e.kubectl(t, "create", "rolebinding", "dev", "-n", shop, "--clusterrole=edit", "--serviceaccount="+shop+":dev")
	devToken := strings.TrimSpace(e.kubectl(t, "create", "token", "dev", "-n", shop, "--duration", "1h"))
	devKubeconfig := e.tokenKubeconfig(t, "dev", shop, devToken)

	t.Run("TenantActionThroughAServiceSucceedsOnce", func(t *testing.T) {
		began := time.Now()
		e.runIn(t, fmt.Sprintf(tenantManifest, destIP), e.kubectlPath(), "--kubeconfig", devKubeconfig, "apply", "-n", shop, "-f", "-")
		e.kubectl(t, "wait", "-n", shop, "--for=jsonpath={.status.phase}=Succeeded", "externalaction/invoice-1", "--timeout=2m")
		took := time.Since(began)
		sum := e.destinationSummary(t, destIP)
		effects := e.curl(t, "-s", fmt.Sprintf("http://%s/effects?key=%s", destIP, shop+"/invoice-1"))
		t.Logf("podnet: invoice-1 Succeeded %.1fs after its apply (as %s:dev, bound to edit); destination %s:80: %+v; effects of %s/invoice-1: %s",
			took.Seconds(), shop, destIP, sum, shop, strings.TrimSpace(effects))
		if sum.Requests != 1 || sum.Applied != 1 || sum.Duplicates != 0 {
			t.Errorf("destination counts %+v; want exactly one request, applied once", sum)
		}
	})

	t.Run("MetricsServiceAnswersOnItsClusterIP", func(t *testing.T) {
		ns := e.namespace(t, "metrics")
		e.kubectl(t, "create", "serviceaccount", "scraper", "-n", ns)
		e.kubectl(t, "create", "clusterrolebinding", "podnet-scraper", "--clusterrole=actionledger-metrics-reader", "--serviceaccount="+ns+":scraper")
		token := strings.TrimSpace(e.kubectl(t, "create", "token", "scraper", "-n", ns, "--duration", "1h"))
		ip := e.kubectl(t, "get", "service", metricsService, "-n", releaseNamespace, "-o", "jsonpath={.spec.clusterIP}")
		url := fmt.Sprintf("https://%s:8443/metrics", ip)
		var body string
		poll(t, time.Minute, "the metrics Service to answer with the actionledger metrics", func(context.Context) (bool, error) {
			out, err := e.curlErr("-s", "-k", "-H", "Authorization: Bearer "+token, url)
			body = out
			return err == nil && strings.Contains(out, "actionledger_attempts_total"), err
		})
		noToken := e.curl(t, "-s", "-k", "-o", "/dev/null", "-w", "%{http_code}", url)
		var success []string
		for line := range strings.SplitSeq(body, "\n") {
			if strings.HasPrefix(line, "actionledger_attempts_total{") && strings.Contains(line, `result="Success"`) {
				success = append(success, line)
			}
		}
		t.Logf("podnet: metrics Service %s:8443: with the metrics-reader token HTTP 200, %d bytes, %s; without a token HTTP %s",
			ip, len(body), strings.Join(success, " "), noToken)
		if noToken != "401" {
			t.Errorf("metrics without a token: HTTP %s, want 401", noToken)
		}
	})

	t.Run("GatewayServiceAnswersOnItsClusterIP", func(t *testing.T) {
		sec, err := c.Clientset.CoreV1().Secrets(releaseNamespace).Get(ctx, gatewayTLSSecret, metav1.GetOptions{})
		if err != nil || len(sec.Data["ca.crt"]) == 0 {
			t.Fatalf("the chart's gateway TLS Secret: %v", err)
		}
		caFile := filepath.Join(e.dir, "gateway-ca.crt")
		writeFile(t, caFile, string(sec.Data["ca.crt"]))
		ip := e.kubectl(t, "get", "service", gatewayService, "-n", releaseNamespace, "-o", "jsonpath={.spec.clusterIP}")
		// The name the chart's certificate holds, resolved to the ClusterIP (the cluster runs no DNS).
		host := gatewayService + "." + releaseNamespace + ".svc"
		url := fmt.Sprintf("https://%s/v1/namespaces/%s/destinations/payments/charges", host, shop)
		post := func() string {
			return e.curl(t, "-s", "-i", "--resolve", host+":443:"+ip, "--cacert", caFile, "-H", "Authorization: Bearer "+devToken,
				"-H", `Idempotency-Key: "order-1"`, "-H", "Content-Type: application/json", "-d", `{"amount":1}`, url)
		}
		first := post()
		again := post()
		sum := e.destinationSummary(t, destIP)
		t.Logf("podnet: gateway Service %s:443 (%s), as %s:dev:\n%s\nthe same again:\n%s\ndestination: %+v", ip, host, shop, first, again, sum)
		if !strings.HasPrefix(first, "HTTP/1.1 201") || !strings.Contains(first, "Actionledger-Phase: Succeeded") {
			t.Errorf("through the gateway's Service: want 201 and Actionledger-Phase: Succeeded, got\n%s", first)
		}
		if !strings.HasPrefix(again, "HTTP/1.1 201") || !strings.Contains(again, "Idempotent-Replayed: true") {
			t.Errorf("the repeat through the gateway's Service: want 201 with Idempotent-Replayed: true, got\n%s", again)
		}
		if sum.Requests != 2 || sum.Applied != 2 || sum.Duplicates != 0 {
			t.Errorf("destination counts %+v; want 2 requests (invoice-1 and order-1), each applied once", sum)
		}
	})
}

// destinationManifest: test/cmd/destination behind the ClusterIP Service payments (port 80), deduplicating on the
// Idempotency-Key header. Args: namespace, image.
const destinationManifest = `apiVersion: apps/v1
kind: Deployment
metadata: {name: payments, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: payments}}
  template:
    metadata: {labels: {app: payments}}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: destination
        image: %[2]s
        imagePullPolicy: IfNotPresent
        args: [--listen, "0.0.0.0:8080", --dedup]
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /_summary, port: 8080}, periodSeconds: 1}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Service
metadata: {name: payments, namespace: %[1]s}
spec:
  selector: {app: payments}
  ports: [{port: 80, targetPort: 8080}]
`

// tenantManifest: the tenant's Destination (the destination's ClusterIP: the cluster runs no DNS) and
// ExternalAction. Arg: the ClusterIP.
const tenantManifest = `apiVersion: actions.actionledger.dev/v1alpha1
kind: Destination
metadata: {name: payments}
spec:
  url: http://%s
  timeout: 10s
  idempotency: {header: Idempotency-Key, supported: true}
  reconciliation:
    method: GET
    path: /effects?key={key}
    applied: response.statusCode == 200
    notApplied: response.statusCode == 404
---
apiVersion: actions.actionledger.dev/v1alpha1
kind: ExternalAction
metadata: {name: invoice-1}
spec:
  destinationRef: {name: payments}
  request:
    method: POST
    path: /invoices
    body: {customer: acme, amount: 4200}
`

// summary is test/cmd/destination's GET /_summary.
type summary struct {
	Keys       int `json:"keys"`
	Requests   int `json:"requests"`
	Applied    int `json:"applied"`
	Duplicates int `json:"duplicates"`
	Replayed   int `json:"replayed"`
}

// env is the test's tools on the cluster: kubectl and helm on the host (through up.sh's forwarder to the API
// server), curl in the cluster's network namespace (where ClusterIPs and pod addresses are routed).
type env struct {
	c       *clusterenv.Cluster
	dir     string
	netns   string
	podCIDR *net.IPNet
}

func newEnv(t *testing.T, c *clusterenv.Cluster) *env {
	t.Helper()
	if c.Env["POD_NETWORK"] != "1" || c.Env["NETNS"] == "" {
		t.Fatalf("the cluster has no pod network (cluster.env: POD_NETWORK=%q NETNS=%q)", c.Env["POD_NETWORK"], c.Env["NETNS"])
	}
	_, cidr, err := net.ParseCIDR(c.Env["POD_CIDR"])
	if err != nil {
		t.Fatalf("POD_CIDR of cluster.env: %v", err)
	}
	return &env{c: c, dir: t.TempDir(), netns: c.Env["NETNS"], podCIDR: cidr}
}

func (e *env) kubectlPath() string { return filepath.Join(e.c.Env["KUBE_ASSETS"], "kubectl") }

func (e *env) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return e.run(t, e.kubectlPath(), append([]string{"--kubeconfig", e.c.Kubeconfig}, args...)...)
}

func (e *env) kubectlIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return e.runIn(t, stdin, e.kubectlPath(), append([]string{"--kubeconfig", e.c.Kubeconfig}, args...)...)
}

// curl runs curl in the cluster's network namespace.
func (e *env) curl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.curlErr(args...)
	if err != nil {
		t.Fatalf("curl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

func (e *env) curlErr(args ...string) (string, error) {
	return e.runErr(nil, "nsenter", append([]string{"--net=" + e.netns, "--", "curl", "-m", "10"}, args...)...)
}

func (e *env) destinationSummary(t *testing.T, ip string) summary {
	t.Helper()
	var s summary
	out := e.curl(t, "-s", "http://"+ip+"/_summary")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("the destination's /_summary %q: %v", out, err)
	}
	return s
}

func (e *env) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := e.runErr(nil, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

func (e *env) runIn(t *testing.T, stdin, name string, args ...string) string {
	t.Helper()
	out, err := e.runErr(strings.NewReader(stdin), name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

// runErr runs a command and returns its standard output, or its standard output and error with the error.
func (e *env) runErr(stdin *strings.Reader, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // the test's own tools
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(e.dir, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(e.dir, "helm-config"), "HELM_DATA_HOME="+filepath.Join(e.dir, "helm-data"))
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

// namespace creates a namespace named prefix-<random> and deletes it when the test ends.
func (e *env) namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := e.c.Clientset.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = e.c.Clientset.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// tokenKubeconfig writes a kubeconfig that authenticates with token, for tools run as that identity.
func (e *env) tokenKubeconfig(t *testing.T, name, ns, token string) string {
	t.Helper()
	return e.c.TokenKubeconfig(t, e.dir, name, ns, token)
}

// readmeInstall returns the arguments of the README's helm install with the chart's defaults (the line
// `bin/helm install actionledger dist/chart ...` that names no values file), dist/chart made absolute.
func readmeInstall(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(clusterenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "bin/helm install actionledger dist/chart ") && !strings.Contains(line, " -f ") {
			args := strings.Fields(strings.TrimPrefix(line, "bin/helm "))
			for i, a := range args {
				if a == "dist/chart" {
					args[i] = filepath.Join(clusterenv.RepoRoot(), "dist", "chart")
				}
			}
			return args
		}
	}
	t.Fatal("README.md has no 'bin/helm install actionledger dist/chart ...' line without a values file")
	return nil
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(clusterenv.RepoRoot(), "dist", "chart", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatal("dist/chart/Chart.yaml has no appVersion")
	return ""
}

func podReady(p *corev1.Pod) (bool, time.Duration) {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue, cond.LastTransitionTime.Sub(p.CreationTimestamp.Time)
		}
	}
	return false, 0
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// poll calls cond every 200 ms until it returns true, failing the test after timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil { //nolint:gosec // the test's own temp dir
		t.Fatalf("writing %s: %v", path, err)
	}
}
