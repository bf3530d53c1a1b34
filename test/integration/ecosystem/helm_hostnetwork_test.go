package ecosystem_test

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// hostNetworkValues are the values for a single node without a pod network or kube-proxy (the API server on
// 127.0.0.1:6443): pods on the host's network, the gateway on ports other than the manager's, one gateway.
var hostNetworkValues = []string{"--set", "hostNetwork=true", "--set", "gateway.enabled=true",
	"--set", "kubernetesService.host=127.0.0.1", "--set", "kubernetesService.port=6443",
	"--set", "gateway.port=9444", "--set", "gateway.healthProbe.port=8082", "--set", "gateway.metrics.port=8444",
	"--set", "gateway.replicas=1", "--set", "gateway.strategy.type=Recreate"}

// deployments returns the manager's and the gateway's Deployments of a render.
func deployments(t *testing.T, objs []*unstructured.Unstructured) (mgr, gw *appsv1.Deployment) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
			t.Fatal(err)
		}
		if o.GetLabels()["app.kubernetes.io/component"] == "gateway" {
			gw = d
		} else {
			mgr = d
		}
	}
	if mgr == nil {
		t.Fatalf("the render lacks the manager's Deployment: %v", keys(objs))
	}
	return mgr, gw
}

// listenPorts are the ports a container's flags bind (--*-address=:N), by flag name.
func listenPorts(t *testing.T, c corev1.Container) map[string]int32 {
	t.Helper()
	ports := map[string]int32{}
	for _, a := range c.Args {
		flag, port, ok := strings.Cut(a, "-address=:")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(port, 10, 32)
		if err != nil {
			t.Fatalf("%s: arg %q: %v", c.Name, a, err)
		}
		ports[flag] = int32(n)
	}
	return ports
}

// checkPorts fails unless the container declares exactly the ports its flags bind and probes one of them.
func checkPorts(t *testing.T, c corev1.Container) {
	t.Helper()
	bound := slices.Sorted(maps.Values(listenPorts(t, c)))
	declared := []int32{}
	for _, p := range c.Ports {
		declared = append(declared, p.ContainerPort)
	}
	slices.Sort(declared)
	if !slices.Equal(bound, declared) {
		t.Errorf("%s binds %v (args %v) but declares the container ports %v", c.Name, bound, c.Args, declared)
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || !slices.Contains(bound, p.HTTPGet.Port.IntVal) {
			t.Errorf("%s: a probe %+v is not on a port it binds %v", c.Name, p, bound)
		}
	}
}

func envOf(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

// With hostNetwork the manager and the gateway run on the node's network with the DNS policy for it, reach
// the API server at kubernetesService, bind only ports they declare and probe, and no port of one is a port
// of the other, so both fit on one node; the gateway's Service targets its ports. The render dry-run applies.
func TestHelmChartHostNetwork(t *testing.T) {
	objs := helmTemplate(t, hostNetworkValues...)
	mgr, gw := deployments(t, objs)
	if gw == nil {
		t.Fatalf("gateway.enabled=true renders no gateway: %v", keys(objs))
	}
	seen := map[int32]string{}
	for _, d := range []*appsv1.Deployment{mgr, gw} {
		spec := d.Spec.Template.Spec
		c := spec.Containers[0]
		if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			t.Errorf("%s: hostNetwork %v, dnsPolicy %q; want true and ClusterFirstWithHostNet", d.Name, spec.HostNetwork, spec.DNSPolicy)
		}
		if e := envOf(c); e["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || e["KUBERNETES_SERVICE_PORT"] != "6443" {
			t.Errorf("%s: env %v, want KUBERNETES_SERVICE_HOST=127.0.0.1 and KUBERNETES_SERVICE_PORT=6443", d.Name, c.Env)
		}
		checkPorts(t, c)
		for _, p := range c.Ports {
			if other, dup := seen[p.ContainerPort]; dup {
				t.Errorf("port %d is bound by %s and by %s: on one node's network one of them fails", p.ContainerPort, other, d.Name)
			}
			seen[p.ContainerPort] = d.Name
		}
	}
	if _, ok := envOf(mgr.Spec.Template.Spec.Containers[0])["POD_NAMESPACE"]; !ok {
		t.Errorf("the manager lost POD_NAMESPACE: %v", mgr.Spec.Template.Spec.Containers[0].Env)
	}
	if gp := listenPorts(t, gw.Spec.Template.Spec.Containers[0]); gp["--bind"] != 9444 || gp["--health-probe-bind"] != 8082 || gp["--metrics-bind"] != 8444 {
		t.Errorf("gateway ports %v, want gateway.port 9444, gateway.healthProbe.port 8082, gateway.metrics.port 8444", gp)
	}
	if gw.Spec.Replicas == nil || *gw.Spec.Replicas != 1 || gw.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("gateway replicas %v strategy %+v, want 1 and Recreate", gw.Spec.Replicas, gw.Spec.Strategy)
	}
	checkGatewayService(t, objs, 9444, 8444)
	dryRunApply(t, objs)

	t.Run("no env but the API server's", func(t *testing.T) {
		bare := helmTemplate(t, append(slices.Clone(hostNetworkValues), "--set", "manager.env=null",
			"--set", "kubernetesService.port=null")...)
		m, _ := deployments(t, bare)
		want := []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"}, {Name: "KUBERNETES_SERVICE_PORT", Value: "443"}}
		if got := m.Spec.Template.Spec.Containers[0].Env; !slices.Equal(got, want) {
			t.Errorf("manager env %v, want %v (the port defaults to the kubernetes Service's 443)", got, want)
		}
	})
}

// The default values keep what a cluster with a pod network and kube-proxy runs: the pod network, the kubelet's
// API server address, the gateway on 9443 with probes on 8081 and metrics on 8443, two gateways.
func TestHelmChartDefaultsKeepThePodNetwork(t *testing.T) {
	if _, gw := deployments(t, helmTemplate(t)); gw != nil {
		t.Errorf("the default values render the gateway %s; want it only with gateway.enabled=true", gw.Name)
	}
	objs := helmTemplate(t, "--set", "gateway.enabled=true")
	mgr, gw := deployments(t, objs)
	if gw == nil {
		t.Fatalf("gateway.enabled=true renders no gateway: %v", keys(objs))
	}
	for _, d := range []*appsv1.Deployment{mgr, gw} {
		spec := d.Spec.Template.Spec
		if spec.HostNetwork || spec.DNSPolicy != "" {
			t.Errorf("%s: hostNetwork %v dnsPolicy %q by default", d.Name, spec.HostNetwork, spec.DNSPolicy)
		}
		for name := range envOf(spec.Containers[0]) {
			if strings.HasPrefix(name, "KUBERNETES_SERVICE") {
				t.Errorf("%s sets %s by default", d.Name, name)
			}
		}
		checkPorts(t, spec.Containers[0])
	}
	if gp := listenPorts(t, gw.Spec.Template.Spec.Containers[0]); gp["--bind"] != 9443 || gp["--health-probe-bind"] != 8081 || gp["--metrics-bind"] != 8443 {
		t.Errorf("gateway ports %v, want 9443, 8081 and 8443", gp)
	}
	if gw.Spec.Replicas == nil || *gw.Spec.Replicas != 2 || gw.Spec.Strategy.Type != "" {
		t.Errorf("gateway replicas %v strategy %+v, want 2 and the Deployment's default", gw.Spec.Replicas, gw.Spec.Strategy)
	}
	checkGatewayService(t, objs, 9443, 8443)
}

// checkGatewayService fails unless the gateway's Service sends port 443 to the gateway's HTTPS port and its
// metrics port to the gateway's metrics port.
func checkGatewayService(t *testing.T, objs []*unstructured.Unstructured, https, metrics int) {
	t.Helper()
	u := find(objs, "Service", "actionledger-gateway-service")
	if u == nil {
		t.Fatalf("no gateway Service: %v", keys(objs))
	}
	svc := &corev1.Service{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, svc); err != nil {
		t.Fatal(err)
	}
	targets := map[string]int{}
	for _, p := range svc.Spec.Ports {
		targets[p.Name] = p.TargetPort.IntValue()
	}
	if targets["https"] != https || targets["metrics"] != metrics {
		t.Errorf("gateway Service targets %v, want https %d and metrics %d", targets, https, metrics)
	}
}
