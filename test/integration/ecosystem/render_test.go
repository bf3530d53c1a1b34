package ecosystem_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	installNamespace = "actionledger-system"
	managerSA        = "actionledger-controller-manager"
)

// clusterScoped reports whether the rendered kind is cluster-scoped (Namespace, CRDs, ClusterRoles and their
// bindings, the admission policies and their bindings, the manager's FlowSchema and priority level).
func clusterScoped(kind string) bool {
	return kind == "Namespace" || kind == "CustomResourceDefinition" || strings.HasPrefix(kind, "Cluster") ||
		strings.HasPrefix(kind, "MutatingAdmissionPolicy") || kind == "FlowSchema" || kind == "PriorityLevelConfiguration"
}

// render runs bin/kustomize (make kustomize installs it) on dir and decodes the objects.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	root := envtestutil.RepoRoot()
	bin := filepath.Join(root, "bin", "kustomize")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("bin/kustomize is not installed (run 'make kustomize'); skipping the render of %s", dir)
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, "build", filepath.Join(root, dir))
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding the render of %s: %v", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// config/default renders, and every object it holds is accepted by a real API server (server-side apply,
// dry run): the Namespace first, the CRDs already installed by envtest.
func TestDefaultRendersAndDryRunApplies(t *testing.T) {
	objs := render(t, "config/default")
	ctx := context.Background()

	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if !clusterScoped(o.GetKind()) && o.GetNamespace() != installNamespace {
			t.Errorf("%s %s is in namespace %q, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), installNamespace)
		}
	}
	// The manager and the gateway (config/gateway): a Deployment and a ServiceAccount each.
	if kinds["CustomResourceDefinition"] != 4 || kinds["Deployment"] != 2 || kinds["Namespace"] != 1 || kinds["ServiceAccount"] != 2 {
		t.Fatalf("rendered kinds %v: want 4 CRDs, 2 Deployments, 1 Namespace, 2 ServiceAccounts", kinds)
	}

	checkDeployment(t, objs)

	// Namespaces first, for real (a dry-run Namespace would not exist for the objects in it).
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		rank := func(u *unstructured.Unstructured) int {
			switch u.GetKind() {
			case "Namespace":
				return 0
			case "CustomResourceDefinition":
				return 1
			}
			return 2
		}
		return rank(a) - rank(b)
	})
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			break
		}
		if err := env.Client.Create(ctx, o.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating Namespace %s: %v", o.GetName(), err)
		}
	}
	for _, o := range objs {
		ac := client.ApplyConfigurationFromUnstructured(o.DeepCopy())
		if err := env.Client.Apply(ctx, ac, client.DryRunAll, client.ForceOwnership, client.FieldOwner("ecosystem-test")); err != nil {
			t.Errorf("server-side dry-run apply of %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

func checkDeployment(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	u := find(objs, "Deployment", managerSA)
	if u == nil {
		t.Fatalf("no Deployment %s in the render", managerSA)
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("containers = %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	for _, arg := range []string{"--leader-elect=true", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8443"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("manager args %v lack %s", c.Args, arg)
		}
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Port.IntValue() != 8081 || c.LivenessProbe.HTTPGet.Path != "/healthz" ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Port.IntValue() != 8081 || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes: liveness %+v readiness %+v, want /healthz and /readyz on 8081", c.LivenessProbe, c.ReadinessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}
	var podNS bool
	for _, e := range c.Env {
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			podNS = true
		}
	}
	if !podNS {
		t.Errorf("POD_NAMESPACE is not set from the downward API: %+v", c.Env)
	}
	// The "restricted" Pod Security Standard.
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v is not restricted", psc)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container securityContext %+v is not restricted", sc)
	}
	if spec.ServiceAccountName != managerSA {
		t.Errorf("serviceAccountName %q, want %s", spec.ServiceAccountName, managerSA)
	}
	var metricsPort bool
	for _, p := range c.Ports {
		metricsPort = metricsPort || (p.Name == "https" && p.ContainerPort == 8443)
	}
	svc := find(objs, "Service", "actionledger-controller-manager-metrics-service")
	if !metricsPort || svc == nil {
		t.Errorf("metrics: container port https/8443 %v, Service present %v", metricsPort, svc != nil)
	}
}

// The rendered RBAC is enough to run the manager: the real manager, impersonating the rendered ServiceAccount
// with leader election on in the install namespace, sends an action with a bearer token from a Secret, and
// nothing more than that is granted (creating an ExternalAction is forbidden to it).
func TestRenderedRBACRunsTheManager(t *testing.T) {
	objs := render(t, "config/default")
	ctx := context.Background()
	ns := find(objs, "Namespace", installNamespace)
	if ns == nil {
		t.Fatalf("no Namespace %s in the render", installNamespace)
	}
	if err := env.Client.Create(ctx, ns.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			ac := client.ApplyConfigurationFromUnstructured(o.DeepCopy())
			if err := env.Client.Apply(ctx, ac, client.ForceOwnership, client.FieldOwner("ecosystem-test")); err != nil {
				t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + installNamespace + ":" + managerSA,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + installNamespace, "system:authenticated"},
	}
	asManager, err := client.New(cfg, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	tenant := env.Namespace(t)
	if err := asManager.Create(ctx, envtestutil.Action(tenant, "not-mine", "payments", "/", "")); !apierrors.IsForbidden(err) {
		t.Fatalf("the manager's ServiceAccount creating an ExternalAction: err %v, want Forbidden (is RBAC enforced?)", err)
	}

	const token = "rbac-test-token" //nolint:gosec // G101: a fake token for a test Secret
	env.Create(t, &corev1.Secret{ObjectMeta: metaNS(tenant, "tok"), StringData: map[string]string{"token": token}})
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, tenant, "payments", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "tok", Key: "token"}}
	})
	env.Create(t, envtestutil.Action(tenant, "pay-rbac", "payments", "/charges", `{"amount":1}`))

	mgrCfg := rest.CopyConfig(cfg)
	mgr, err := app.New(mgrCfg, app.Options{
		LeaderElection: true, LeaderElectionNamespace: installNamespace, ControllerNamespace: installNamespace,
		MaxConcurrentReconciles: 2, ClaimMargin: time.Second, SkipNameValidation: true, Egress: envtestutil.LoopbackEgress(),
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager under the rendered RBAC stopped with: %v", err)
		}
	})

	xa := env.WaitPhase(t, tenant, "pay-rbac", actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	if n := srv.Requests(tenant + "/pay-rbac"); n != 1 {
		t.Errorf("destination received %d requests, want 1", n)
	}
	if got := srv.RequestLog(tenant + "/pay-rbac")[0].Header.Get("Authorization"); got != "Bearer "+token {
		t.Errorf("Authorization = %q: the manager could not read the Secret", got)
	}
	if !slices.Contains(xa.Finalizers, actionsv1alpha1.Finalizer) {
		t.Errorf("finalizers %v: the manager could not add its finalizer", xa.Finalizers)
	}
}

func metaNS(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

// config/network-policy/egress-example.yaml, with its placeholders filled in, is a NetworkPolicy a real API
// server accepts (dry run), and it stays an example: no kustomization (so neither config/default nor the
// Helm chart) includes it.
func TestEgressNetworkPolicyExampleApplies(t *testing.T) {
	root := envtestutil.RepoRoot()
	raw, err := os.ReadFile(filepath.Join(root, "config", "network-policy", "egress-example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	filled := strings.NewReplacer("<API_SERVER_ENDPOINT_IP>", "192.0.2.10", "<POD_CIDR>", "10.244.0.0/16",
		"<SERVICE_CIDR>", "10.96.0.0/12", "<NODE_CIDR>", "192.0.2.0/24", "<POD_CIDR_V6>", "fd00:10:244::/56",
		"<SERVICE_CIDR_V6>", "fd00:10:96::/112").Replace(string(raw))
	if strings.Contains(filled, "<") {
		t.Fatalf("a placeholder is left unfilled:\n%s", filled)
	}
	u := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(filled), 4096).Decode(&u.Object); err != nil {
		t.Fatal(err)
	}
	if u.GetKind() != "NetworkPolicy" {
		t.Fatalf("kind %q, want NetworkPolicy", u.GetKind())
	}
	u.SetNamespace(env.Namespace(t))
	if err := env.Client.Create(t.Context(), u, client.DryRunAll); err != nil {
		t.Fatalf("the API server refuses the example NetworkPolicy: %v", err)
	}
	ks, err := os.ReadFile(filepath.Join(root, "config", "network-policy", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ks), "egress-example") {
		t.Error("config/network-policy/kustomization.yaml lists the egress example; it is an example only")
	}
}
