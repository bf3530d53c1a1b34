// Package cluster is the real-cluster suite (make test-cluster): a single-node Kubernetes cluster
// of real components on 127.0.0.1 (hack/cluster, test/clusterenv), where workloads run as pods.
// Without ACTIONLEDGER_CLUSTER=1 every test skips.
package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/actionledger/actionledger/test/clusterenv"
)

// TestMain starts the cluster with the API server's concurrency lowered from 400+200 to 60+30 seats, so that a
// flood from one test process saturates the priority levels of API Priority and Fairness
// (TestInstalledProduct/FlowSchemaKeepsTheManagerServed); nothing else of the suite comes near it.
func TestMain(m *testing.M) {
	clusterenv.MainWith(m, clusterenv.Options{Env: []string{"MAX_REQUESTS_INFLIGHT=60", "MAX_MUTATING_REQUESTS_INFLIGHT=30"}})
}

// The node registered under the name 127.0.0.1 with that address, and is Ready.
func TestNodeIsReadyOnLoopback(t *testing.T) {
	c := clusterenv.Require(t)
	node, err := c.Clientset.CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node %s: %v", c.NodeName, err)
	}
	if !nodeReady(node) {
		t.Errorf("node %s is not Ready: %+v", node.Name, node.Status.Conditions)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "127.0.0.1" {
			t.Errorf("node InternalIP is %s, want 127.0.0.1", a.Address)
		}
	}
}

// A hostNetwork Deployment of the pause image becomes Available, its pods run on 127.0.0.1 and
// their logs come back through the kubelet; deleting the Deployment lets the garbage collector of
// the controller manager remove its ReplicaSet and pods.
func TestDeploymentRunsAndIsGarbageCollected(t *testing.T) {
	c := clusterenv.Require(t)
	ctx := context.Background()
	ns := createNamespace(t, c, "smoke")
	deployments := c.Clientset.AppsV1().Deployments(ns)
	created, err := deployments.Create(ctx, pauseDeployment(c.PauseImage), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the Deployment: %v", err)
	}
	began := time.Now()
	poll(t, 2*time.Minute, "the Deployment to be Available", func(ctx context.Context) (bool, error) {
		d, err := deployments.Get(ctx, created.Name, metav1.GetOptions{})
		return err == nil && deploymentAvailable(d), err
	})
	t.Logf("Deployment Available %.1fs after create", time.Since(began).Seconds())

	pods, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=pause"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("listing the pods: %d pods, error %v; want 2", len(pods.Items), err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "127.0.0.1" || p.Spec.NodeName != c.NodeName {
			t.Errorf("pod %s: IP %q on node %q, want 127.0.0.1 on %s", p.Name, p.Status.PodIP, p.Spec.NodeName, c.NodeName)
		}
	}
	logs, err := c.Clientset.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "waiting for SIGTERM") {
		t.Errorf("pod logs through the kubelet: %q, error %v; want the pause program's start line", logs, err)
	}

	rsList, err := c.Clientset.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=pause"})
	if err != nil || len(rsList.Items) != 1 || !ownedBy(rsList.Items[0].OwnerReferences, created.UID) {
		t.Fatalf("want one ReplicaSet owned by the Deployment, got %+v (error %v)", rsList.Items, err)
	}
	background := metav1.DeletePropagationBackground
	if err := deployments.Delete(ctx, created.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatalf("deleting the Deployment: %v", err)
	}
	deleted := time.Now()
	poll(t, 2*time.Minute, "the garbage collector to remove the ReplicaSet and its pods", func(ctx context.Context) (bool, error) {
		_, rsErr := c.Clientset.AppsV1().ReplicaSets(ns).Get(ctx, rsList.Items[0].Name, metav1.GetOptions{})
		if rsErr != nil && !apierrors.IsNotFound(rsErr) {
			return false, rsErr
		}
		left, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=pause"})
		return apierrors.IsNotFound(rsErr) && err == nil && len(left.Items) == 0, err
	})
	t.Logf("ReplicaSet and pods garbage-collected %.1fs after the Deployment's deletion", time.Since(deleted).Seconds())
}

func pauseDeployment(image string) *appsv1.Deployment {
	labels := map[string]string{"app": "pause"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pause"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:                   true,
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []corev1.Container{{
						Name: "pause", Image: image, ImagePullPolicy: corev1.PullNever,
						SecurityContext: &corev1.SecurityContext{
							RunAsNonRoot: new(true), AllowPrivilegeEscalation: new(false),
							ReadOnlyRootFilesystem: new(true),
							Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
					}},
				},
			},
		},
	}
}

// createNamespace creates a namespace for the test and deletes it when the test ends.
func createNamespace(t *testing.T, c *clusterenv.Cluster, prefix string) string {
	t.Helper()
	ns, err := c.Clientset.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Clientset.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// poll calls cond every 100 ms until it returns true, failing the test after timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok, nil // keep polling through transient errors; report the last one
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
			return d.Status.AvailableReplicas == *d.Spec.Replicas
		}
	}
	return false
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}
