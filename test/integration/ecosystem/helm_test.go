package ecosystem_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	chartDir    = "dist/chart"
	releaseName = "actionledger"
	// servesMAP is what a Kubernetes 1.36+ cluster adds to helm's capabilities; the chart renders the finalizer
	// admission policy only with it (hack/helm-chart.sh).
	servesMAP = "--api-versions=admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary returns bin/helm, building it with 'make helm' (go install from the module proxy) when it is
// missing. The test skips only when the build itself is impossible (no make, no module proxy).
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		root := envtestutil.RepoRoot()
		helmPath = filepath.Join(root, "bin", "helm")
		if _, err := os.Stat(helmPath); err == nil {
			return
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(context.Background(), "make", "-C", root, "helm")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			helmErr = errors.Join(err, errors.New(out.String()))
			return
		}
		if _, err := os.Stat(helmPath); err != nil {
			helmErr = err
		}
	})
	if helmErr != nil {
		t.Skipf("bin/helm is missing and 'make helm' could not build it: %v", helmErr)
	}
	return helmPath
}

// helmTemplate renders dist/chart as 'helm template actionledger dist/chart --namespace actionledger-system'
// with extra flags, and decodes the objects.
func helmTemplate(t *testing.T, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	root := envtestutil.RepoRoot()
	args := append([]string{"template", releaseName, filepath.Join(root, chartDir), "--namespace", installNamespace}, extra...)
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return decodeAll(t, &out, "helm template")
}

func decodeAll(t *testing.T, r io.Reader, what string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding %s: %v", what, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

func key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// dryRunApply creates the install Namespace for real, then server-side applies every object with dry run
// against the envtest API server (which already has our CRDs installed).
func dryRunApply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNamespace}}
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating Namespace %s: %v", installNamespace, err)
	}
	for _, o := range objs {
		ac := client.ApplyConfigurationFromUnstructured(o.DeepCopy())
		if err := env.Client.Apply(ctx, ac, client.DryRunAll, client.ForceOwnership, client.FieldOwner("helm-test")); err != nil {
			t.Errorf("server-side dry-run apply of %s: %v", key(o), err)
		}
	}
}

// The chart renders with its default values into the namespace of the release, holds the same CRDs as
// config/crd/bases, runs the manager as config/default does, and every object it renders is accepted by a
// real API server (server-side apply, dry run). A second render with every optional part the API server can
// check (admin/editor/viewer roles, NetworkPolicy, namespaced RBAC) is dry-run applied too.
func TestHelmChartRendersAndDryRunApplies(t *testing.T) {
	objs := helmTemplate(t, servesMAP)

	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		namespaced := !clusterScoped(o.GetKind())
		if namespaced && o.GetNamespace() != installNamespace {
			t.Errorf("%s is not in the release namespace %s", key(o), installNamespace)
		}
		if !namespaced && o.GetNamespace() != "" {
			t.Errorf("cluster-scoped %s has a namespace", key(o))
		}
	}
	// By default the manager only (a Deployment, a ServiceAccount, its metrics Service; the gateway is
	// gateway.enabled), and the uninstall hook's Job and ServiceAccount.
	if kinds["CustomResourceDefinition"] != 4 || kinds["Deployment"] != 1 || kinds["ServiceAccount"] != 2 || kinds["Service"] != 1 ||
		kinds["Job"] != 1 || kinds["Secret"] != 0 {
		t.Fatalf("rendered kinds %v: want 4 CRDs, 1 Deployment, 2 ServiceAccounts (the manager's, the uninstall hook's), 1 Service, 1 Job, no Secret", kinds)
	}
	checkDeployment(t, objs)
	checkCRDsMatchConfig(t, objs)
	dryRunApply(t, objs)

	t.Run("lint", func(t *testing.T) {
		out, err := exec.CommandContext(t.Context(), helmBinary(t), "lint", "--strict", filepath.Join(envtestutil.RepoRoot(), chartDir)).CombinedOutput()
		if err != nil {
			t.Fatalf("helm lint --strict %s: %v\n%s", chartDir, err, out)
		}
	})
	t.Run("all optional parts", func(t *testing.T) {
		full := helmTemplate(t, "--set", "rbac.helpers.enabled=true", "--set", "networkPolicy.enabled=true", "--set", "gateway.enabled=true",
			"--set", "manager.image.repository=registry.example/actionledger", "--set", "manager.image.tag=v9.9.9")
		if find(full, "NetworkPolicy", "actionledger-allow-metrics-traffic") == nil || find(full, "ClusterRole", "actionledger-externalaction-viewer-role") == nil {
			t.Fatalf("the render with helpers and networkPolicy enabled lacks them: %v", keys(full))
		}
		d := find(full, "Deployment", managerSA)
		if d == nil {
			t.Fatalf("no Deployment %s in the render: %v", managerSA, keys(full))
		}
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		if len(cs) != 1 || cs[0].(map[string]any)["image"] != "registry.example/actionledger:v9.9.9" {
			t.Errorf("manager.image.repository/tag do not set the manager image: containers %v", cs)
		}
		// The gateway runs the same binary ('/manager gateway'), so it takes the same image.
		var gw *unstructured.Unstructured
		for _, o := range full {
			if o.GetKind() == "Deployment" && o.GetLabels()["app.kubernetes.io/component"] == "gateway" {
				gw = o
			}
		}
		if gw == nil {
			t.Fatalf("no gateway Deployment in the render: %v", keys(full))
		}
		gcs, _, _ := unstructured.NestedSlice(gw.Object, "spec", "template", "spec", "containers")
		if len(gcs) != 1 || gcs[0].(map[string]any)["image"] != "registry.example/actionledger:v9.9.9" {
			t.Errorf("manager.image.repository/tag do not set the gateway's image: containers %v", gcs)
		}
		dryRunApply(t, full)
	})
	// gateway.enabled: its Deployment, ServiceAccount and Service, and the TLS Secret the chart makes
	// (gateway.tls.generate): a CA and a certificate for the Service's names and 127.0.0.1 that it signs.
	t.Run("gateway", func(t *testing.T) {
		gw := helmTemplate(t, "--set", "gateway.enabled=true")
		s := find(gw, "Secret", "actionledger-gateway-tls")
		if s == nil || find(gw, "Deployment", "actionledger-gateway") == nil || find(gw, "Service", "actionledger-gateway-service") == nil {
			t.Fatalf("gateway.enabled=true lacks the gateway's Deployment, Service or TLS Secret: %v", keys(gw))
		}
		checkGatewaySecret(t, s)
		dryRunApply(t, gw)
		if find(helmTemplate(t, "--set", "gateway.enabled=true", "--set", "gateway.tls.generate=false"), "Secret", "actionledger-gateway-tls") != nil {
			t.Error("gateway.tls.generate=false still renders the TLS Secret")
		}
	})
	t.Run("namespaced RBAC", func(t *testing.T) {
		nsd := helmTemplate(t, "--set", "rbac.namespaced=true")
		if r := find(nsd, "Role", "actionledger-manager-role"); r == nil || r.GetNamespace() != installNamespace {
			t.Fatalf("rbac.namespaced=true does not render the manager Role in %s: %v", installNamespace, keys(nsd))
		}
		dryRunApply(t, nsd)
	})
}

// checkGatewaySecret: the chart's self-signed gateway Secret holds a CA and a key pair whose certificate the CA
// signed, for the gateway Service's in-cluster name and 127.0.0.1.
func checkGatewaySecret(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	s := &corev1.Secret{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("gateway Secret type %q, want %q", s.Type, corev1.SecretTypeTLS)
	}
	if _, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
		t.Fatalf("gateway Secret: tls.crt and tls.key: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		t.Fatal("gateway Secret: no CA in ca.crt")
	}
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatal("gateway Secret: tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"actionledger-gateway-service." + installNamespace + ".svc", "localhost", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("gateway certificate for %s: %v", name, err)
		}
	}
}

func keys(objs []*unstructured.Unstructured) []string {
	ks := make([]string, 0, len(objs))
	for _, o := range objs {
		ks = append(ks, key(o))
	}
	slices.Sort(ks)
	return ks
}

// checkCRDsMatchConfig fails when a CRD in the chart differs from config/crd/bases (spec and the
// controller-gen annotations), or one is missing on either side: the chart cannot drift from the API types.
func checkCRDsMatchConfig(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	dir := filepath.Join(envtestutil.RepoRoot(), "config", "crd", "bases")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", dir, err)
	}
	want := map[string]*unstructured.Unstructured{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decodeAll(t, bytes.NewReader(b), f) {
			want[o.GetName()] = o
		}
	}
	got := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			got[o.GetName()] = o
		}
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("CRD %s is in config/crd/bases but not in the chart: run 'make helm-chart'", name)
			continue
		}
		if !equality.Semantic.DeepEqual(w.Object["spec"], g.Object["spec"]) {
			t.Errorf("CRD %s: the chart's spec differs from config/crd/bases: run 'make helm-chart'", name)
		}
		ga := g.GetAnnotations()
		if ga["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s: annotations %v lack helm.sh/resource-policy=keep (crd.keep defaults to true)", name, ga)
		}
		for k, v := range w.GetAnnotations() {
			if ga[k] != v {
				t.Errorf("CRD %s: annotation %s = %q in the chart, %q in config/crd/bases: run 'make helm-chart'", name, k, ga[k], v)
			}
		}
	}
	for name := range got {
		if want[name] == nil {
			t.Errorf("CRD %s is in the chart but not in config/crd/bases: run 'make helm-chart'", name)
		}
	}
}

// The chart holds what config/default holds: with the release named actionledger, every object of the
// kustomize render but the Namespace (helm install --create-namespace makes it) is in the chart under the
// same kind, name and namespace, every Role and ClusterRole grants exactly the same rules, and the chart
// adds nothing else by default (the optional parts are off).
func TestHelmChartMatchesKustomize(t *testing.T) {
	kust := render(t, "config/default")
	// config/default has the gateway (with a Secret the user makes) and no uninstall hook (docs/uninstall.md).
	chart := helmTemplate(t, "--set", "rbac.helpers.enabled=true", servesMAP, "--no-hooks",
		"--set", "gateway.enabled=true", "--set", "gateway.tls.generate=false")
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range chart {
		byKey[key(o)] = o
	}
	seen := map[string]bool{}
	for _, k := range kust {
		if k.GetKind() == "Namespace" {
			continue
		}
		c := byKey[key(k)]
		if c == nil {
			t.Errorf("%s is rendered by config/default but not by the chart: run 'make helm-chart'", key(k))
			continue
		}
		seen[key(k)] = true
		switch k.GetKind() {
		case "Role", "ClusterRole":
			if !equality.Semantic.DeepEqual(k.Object["rules"], c.Object["rules"]) {
				t.Errorf("%s: the chart's rules differ from config/default's: run 'make helm-chart'\nchart: %v\nconfig: %v",
					key(k), c.Object["rules"], k.Object["rules"])
			}
		case "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "FlowSchema", "PriorityLevelConfiguration":
			ks, cs := k.Object["spec"], c.Object["spec"]
			if !equality.Semantic.DeepEqual(ks, cs) {
				t.Errorf("%s: the chart's spec differs from config/default's: run 'make helm-chart'\nchart: %v\nconfig: %v", key(k), cs, ks)
			}
		case "RoleBinding", "ClusterRoleBinding":
			if !equality.Semantic.DeepEqual(k.Object["roleRef"], c.Object["roleRef"]) || !equality.Semantic.DeepEqual(k.Object["subjects"], c.Object["subjects"]) {
				t.Errorf("%s: the chart binds %v to %v, config/default binds %v to %v", key(k),
					c.Object["roleRef"], c.Object["subjects"], k.Object["roleRef"], k.Object["subjects"])
			}
		}
	}
	for _, c := range chart {
		if !seen[key(c)] {
			t.Errorf("%s is rendered by the chart but not by config/default", key(c))
		}
	}
}

// The chart leaves the admission policies out on a cluster that does not serve them (before Kubernetes 1.36:
// the install would fail on the unknown kind), and each one when its value is false: finalizerPolicy.enabled
// (the manager then adds the finalizer itself), requestedByPolicy.enabled (requested-by is then what the
// creator wrote), hmacPayloadPolicy.enabled (a new signing.hmac must then set its payload) and
// responseExposePolicy.enabled (a new ClusterDestination must then set response.expose).
func TestHelmChartFinalizerPolicyIsOptional(t *testing.T) {
	count := func(objs []*unstructured.Unstructured, policy string) int {
		n := 0
		for _, o := range objs {
			if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") && strings.Contains(o.GetName(), policy) {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		policy, value string
	}{{"externalaction-finalizer", "finalizerPolicy.enabled"}, {"externalaction-requested-by", "requestedByPolicy.enabled"},
		{"destination-hmac-payload", "hmacPayloadPolicy.enabled"},
		{"clusterdestination-response-expose", "responseExposePolicy.enabled"}} {
		if n := count(helmTemplate(t, servesMAP), c.policy); n != 2 {
			t.Errorf("a cluster serving MutatingAdmissionPolicy gets %d %s objects, want the policy and its binding", n, c.policy)
		}
		if n := count(helmTemplate(t), c.policy); n != 0 {
			t.Errorf("a cluster without MutatingAdmissionPolicy gets %d %s objects, want 0", n, c.policy)
		}
		if n := count(helmTemplate(t, servesMAP, "--set", c.value+"=false"), c.policy); n != 0 {
			t.Errorf("%s=false renders %d %s objects, want 0", c.value, n, c.policy)
		}
	}
}

// dist/chart is exactly what 'make helm-chart' produces from config/ now: kubebuilder's helm/v2-alpha
// plugin regenerates the chart in a scratch directory and no file may differ.
func TestHelmChartIsRegenerated(t *testing.T) {
	root := envtestutil.RepoRoot()
	kb, kust := filepath.Join(root, "bin", "kubebuilder"), filepath.Join(root, "bin", "kustomize")
	for _, b := range []string{kb, kust} {
		if _, err := os.Stat(b); err != nil {
			t.Skipf("%s is not installed (make kubebuilder kustomize); the CRD and RBAC comparisons still run", b)
		}
	}
	// hack/helm-chart.sh is what 'make helm-chart' runs: only the hand-kept files seed the plugin, so a
	// template that config/ no longer produces shows up as drift.
	tmp := t.TempDir()
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "helm-chart.sh"), filepath.Join(tmp, "dist"))
	cmd.Env = append(os.Environ(), "KUSTOMIZE="+kust, "KUBEBUILDER="+kb)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/helm-chart.sh: %v\n%s", err, out)
	}

	want, got := readTree(t, filepath.Join(root, chartDir)), readTree(t, filepath.Join(tmp, "dist", "chart"))
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("%s/%s is not produced by the plugin", chartDir, name)
		} else if !bytes.Equal(w, g) {
			t.Errorf("%s/%s differs from what the plugin generates from config/: run 'make helm-chart'", chartDir, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("the plugin generates %s/%s, which is missing: run 'make helm-chart'", chartDir, name)
		}
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	fsys := os.DirFS(dir)
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		files[p] = b
		return err
	})
	must(t, err)
	return files
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// With prometheus.enabled the chart renders the alerts of config/prometheus as a PrometheusRule whose groups
// are exactly config/prometheus's, with the rules' own {{ $value }} templates passed through Helm unchanged;
// prometheus.rules.enabled=false leaves it out, and so does the default (prometheus.enabled=false).
func TestHelmChartRendersAlerts(t *testing.T) {
	rules := func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
		var out []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "PrometheusRule" {
				out = append(out, o)
			}
		}
		return out
	}
	var want *unstructured.Unstructured
	for _, o := range rules(render(t, "config/prometheus")) {
		want = o
	}
	if want == nil {
		t.Fatal("config/prometheus renders no PrometheusRule")
	}
	got := rules(helmTemplate(t, "--set", "prometheus.enabled=true"))
	if len(got) != 1 {
		t.Fatalf("prometheus.enabled=true renders %d PrometheusRules, want 1: run 'make helm-chart'", len(got))
	}
	if got[0].GetNamespace() != installNamespace {
		t.Errorf("the PrometheusRule is in namespace %q, want the release's %q", got[0].GetNamespace(), installNamespace)
	}
	if !equality.Semantic.DeepEqual(want.Object["spec"], got[0].Object["spec"]) {
		t.Errorf("the chart's alerts differ from config/prometheus/rules.yaml: run 'make helm-chart'\nchart: %v\nconfig: %v",
			got[0].Object["spec"], want.Object["spec"])
	}
	if n := len(rules(helmTemplate(t, "--set", "prometheus.enabled=true", "--set", "prometheus.rules.enabled=false"))); n != 0 {
		t.Errorf("prometheus.rules.enabled=false renders %d PrometheusRules, want 0", n)
	}
	if n := len(rules(helmTemplate(t))); n != 0 {
		t.Errorf("the default values render %d PrometheusRules, want 0", n)
	}
}

// config/samples/tombstone-postgres/helm-values.yaml turns the chart's manager to the PostgreSQL tombstone
// store as the kustomize component does: both flags, with the DSN file on the read-only mount of Secret
// actionledger-tombstone-store, and leader election kept; the render dry-run applies.
func TestHelmValuesForPostgresTombstones(t *testing.T) {
	objs := helmTemplate(t, "-f", filepath.Join(envtestutil.RepoRoot(), "config", "samples", "tombstone-postgres", "helm-values.yaml"))
	d := find(objs, "Deployment", managerSA)
	if d == nil {
		t.Fatalf("no Deployment %s in the render: %v", managerSA, keys(objs))
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &dep); err != nil {
		t.Fatal(err)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--leader-elect=true", "--tombstone-store=postgres", "--tombstone-store-dsn-file=/etc/actionledger/tombstone-store/dsn"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("manager args %v lack %s", c.Args, want)
		}
	}
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "tombstone-store" && m.ReadOnly && m.MountPath == "/etc/actionledger/tombstone-store"
	})
	secret := slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "tombstone-store" && v.Secret != nil && v.Secret.SecretName == "actionledger-tombstone-store"
	})
	if !mounted || !secret {
		t.Errorf("the DSN Secret is not mounted read-only: mounts %v, volumes %v", c.VolumeMounts, dep.Spec.Template.Spec.Volumes)
	}
	dryRunApply(t, objs)
}
