package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secondReplica is the name of the second manager replica's Deployment, and chartManagerSelector selects the
// pods of the chart's own manager Deployment only.
const (
	secondReplica        = managerName + "-b"
	chartManagerSelector = managerSelector + ",!actionledger.dev/replica"
)

// testSecondReplica starts a second manager replica beside the chart's, so that the rollout and the forced
// deletion below happen with a standby that takes the leader Lease over.
//
// Two pods of one Deployment cannot run on this single node: with hostNetwork every pod's ports are the node's,
// and both replicas would bind the same probe and metrics ports (the scheduler refuses the second pod's host
// ports). So the second replica is the chart's own manager Deployment copied as a user would (same image, args,
// ServiceAccount, security context, probes and limits, the same leader election ID), with ports of its own and
// one more pod label; on a cluster with a pod network, `manager.replicas: 2` is the same thing.
func testSecondReplica(t *testing.T, p *product) {
	ctx := context.Background()
	orig := &appsv1.Deployment{}
	if err := p.cl.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: managerName}, orig); err != nil {
		t.Fatalf("reading the manager's Deployment: %v", err)
	}
	health, metrics := freePort(t), freePort(t)
	b := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: secondReplica,
		Labels: orig.Labels}, Spec: *orig.Spec.DeepCopy()}
	b.Spec.Replicas = ptr.To[int32](1)
	b.Spec.Selector = orig.Spec.Selector.DeepCopy()
	b.Spec.Selector.MatchLabels["actionledger.dev/replica"] = "b"
	b.Spec.Template.Labels["actionledger.dev/replica"] = "b"
	mgr := &b.Spec.Template.Spec.Containers[0]
	for i, a := range mgr.Args {
		switch {
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			mgr.Args[i] = fmt.Sprintf("--health-probe-bind-address=:%d", health)
		case strings.HasPrefix(a, "--metrics-bind-address="):
			mgr.Args[i] = fmt.Sprintf("--metrics-bind-address=:%d", metrics)
		}
	}
	port := func(n int) int32 { return int32(n) } //nolint:gosec // ports from freePort, below 65536
	for i := range mgr.Ports {
		switch mgr.Ports[i].ContainerPort {
		case port(p.ports.managerHealth):
			mgr.Ports[i].ContainerPort = port(health)
		case port(p.ports.managerMetrics):
			mgr.Ports[i].ContainerPort = port(metrics)
		}
		mgr.Ports[i].HostPort = 0
	}
	for _, pr := range []*corev1.Probe{mgr.LivenessProbe, mgr.ReadinessProbe, mgr.StartupProbe} {
		if pr != nil && pr.HTTPGet != nil {
			pr.HTTPGet.Port = intstr.FromInt32(port(health))
		}
	}
	if err := p.cl.Create(ctx, b); err != nil {
		t.Fatalf("creating the second replica: %v", err)
	}
	p.secondMetrics = metrics
	began := time.Now()
	poll(t, 2*time.Minute, "the second replica Available", func(ctx context.Context) (bool, error) {
		d := &appsv1.Deployment{}
		err := p.cl.Get(ctx, client.ObjectKeyFromObject(b), d)
		return err == nil && deploymentAvailable(d), err
	})
	pods := p.pods(t, managerSelector)
	t.Logf("cluster: second manager replica Available in %.1fs (ports %d, %d); manager pods %v; leader %s",
		time.Since(began).Seconds(), health, metrics, podNames(pods), p.leaseHolder(t))
	if len(pods) != 2 {
		t.Fatalf("manager pods %v, want two replicas", podNames(pods))
	}
}
