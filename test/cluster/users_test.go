package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
)

// testLeaderAndStartLog: the leader Lease's holder names the manager's pod (not the node, whose name every pod on
// the node's network shares), and the manager's log from its start has no error-level line: this cluster's API
// server keeps no EndpointSlice default/kubernetes (--endpoint-reconciler-type=none), which is healthy.
func testLeaderAndStartLog(t *testing.T, p *product) {
	holder := p.leaseHolder(t)
	pods := p.pods(t, managerSelector)
	named := false
	for _, pod := range pods {
		named = named || strings.HasPrefix(holder, pod.Name+"_")
	}
	t.Logf("cluster: leader Lease holder %s (manager pods %v)", holder, podNames(pods))
	if !named {
		t.Errorf("the leader Lease's holder %q names none of the manager pods %v", holder, podNames(pods))
	}
	for _, pod := range pods {
		logs, err := p.c.Clientset.CoreV1().Pods(releaseNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			t.Fatalf("logs of %s: %v", pod.Name, err)
		}
		for line := range strings.SplitSeq(string(logs), "\n") {
			if strings.Contains(line, `"level":"error"`) {
				t.Errorf("pod %s logged an error in a healthy start: %s", pod.Name, line)
			}
		}
	}
}

// testTenantWithTheBuiltInEditRole: a ServiceAccount bound to nothing but the built-in edit ClusterRole in its
// namespace (the chart's roles aggregate into it, rbac.aggregate) creates a Destination and an ExternalAction that
// Succeeds, and reads tombstones; one bound to view reads actions and may not create one.
func testTenantWithTheBuiltInEditRole(t *testing.T, p *product) {
	srv, url := startDestination(t, destination.Options{Dedup: true})
	ns := createNamespace(t, p.c, "team")
	p.kubectl(t, "create", "serviceaccount", "dev", "-n", ns)
	p.kubectl(t, "create", "rolebinding", "dev-edit", "-n", ns, "--clusterrole=edit", "--serviceaccount="+ns+":dev")
	p.kubectl(t, "create", "serviceaccount", "auditor", "-n", ns)
	p.kubectl(t, "create", "rolebinding", "auditor-view", "-n", ns, "--clusterrole=view", "--serviceaccount="+ns+":auditor")
	for _, c := range []struct{ sa, verb, resource, want string }{
		{"dev", "create", "externalactions.actions.actionledger.dev", "yes"},
		{"dev", "create", "destinations.actions.actionledger.dev", "yes"},
		{"dev", "get", "externalactions.actions.actionledger.dev", "yes"},
		{"dev", "list", "actiontombstones.actions.actionledger.dev", "yes"},
		{"dev", "delete", "actiontombstones.actions.actionledger.dev", "no"},
		{"auditor", "get", "externalactions.actions.actionledger.dev", "yes"},
		{"auditor", "list", "destinations.actions.actionledger.dev", "yes"},
		{"auditor", "list", "actiontombstones.actions.actionledger.dev", "yes"},
		{"auditor", "create", "externalactions.actions.actionledger.dev", "no"},
	} {
		out, _ := p.kubectlErr("auth", "can-i", c.verb, c.resource, "-n", ns, "--as", "system:serviceaccount:"+ns+":"+c.sa)
		got, _, _ := strings.Cut(out, "\n") // a warning may follow
		if got = strings.TrimSpace(got); got != c.want {
			t.Errorf("kubectl auth can-i %s %s as %s (bound to %s): %q, want %q", c.verb, c.resource, c.sa,
				map[string]string{"dev": "edit", "auditor": "view"}[c.sa], got, c.want)
		}
	}
	kubeconfig := p.tokenKubeconfig(t, "dev", ns, p.serviceAccountToken(t, ns, "dev"))
	manifest := fmt.Sprintf(`apiVersion: actions.actionledger.dev/v1alpha1
kind: Destination
metadata: {name: billing}
spec:
  url: %s
---
apiVersion: actions.actionledger.dev/v1alpha1
kind: ExternalAction
metadata: {name: invoice-41}
spec:
  destinationRef: {name: billing}
  request: {method: POST, path: /invoices, body: {customer: acme, amount: 41}}
`, url)
	began := time.Now()
	out, err := p.runErr(strings.NewReader(manifest), []string{"KUBECONFIG=" + kubeconfig}, p.kubectlPath(), "apply", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl apply as %s:dev (edit): %v: %s", ns, err, out)
	}
	out, err = p.runErr(nil, []string{"KUBECONFIG=" + kubeconfig}, p.kubectlPath(), "wait", "xa/invoice-41",
		"--for=condition=Ready", "--timeout=2m")
	if err != nil {
		t.Fatalf("kubectl wait as %s:dev: %v: %s", ns, err, out)
	}
	xa := p.action(t, ns, "invoice-41")
	t.Logf("cluster: tenant with edit only: invoice-41 %s %.1fs after its apply, effects=%d, requested-by=%s", xa.Status.Phase,
		time.Since(began).Seconds(), srv.Effects(ns+"/invoice-41"), xa.Annotations["actions.actionledger.dev/requested-by"])
	if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || srv.Effects(ns+"/invoice-41") != 1 {
		t.Errorf("invoice-41: %s, %d effects; want Succeeded, 1", xa.Status.Phase, srv.Effects(ns+"/invoice-41"))
	}
}

// testUninstall: helm uninstall runs the chart's pre-delete hook, which stops the manager, writes the tombstones of
// the finished actions and releases their finalizers; then a namespace holding finished actions finishes deleting
// although no manager runs. The CRDs stay (docs/uninstall.md). The product is gone after it: only
// ReleaseFromARegistry, which installs it again, follows.
func testUninstall(t *testing.T, p *product) {
	srv, url := startDestination(t, destination.Options{Dedup: true})
	ns := createNamespace(t, p.c, "leaving")
	p.kubectlIn(t, fmt.Sprintf(`apiVersion: actions.actionledger.dev/v1alpha1
kind: Destination
metadata: {name: shop}
spec:
  url: %s
  retention: {ttlAfterFinished: 24h}
`, url), "apply", "-n", ns, "-f", "-")
	p.waitDestinationReady(t, ns, "shop")
	const n = 20
	p.createActions(t, ns, "shop", n)
	poll(t, 2*time.Minute, "the actions to succeed", func(ctx context.Context) (bool, error) {
		list := &actionsv1alpha1.ExternalActionList{}
		if err := p.cl.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		done := 0
		for _, xa := range list.Items {
			if xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
				done++
			}
		}
		return done == n, nil
	})
	// The second manager replica (SecondReplicaStandsBy) is a Deployment the test made by hand, outside the release:
	// removed first, as its user would, or it would put the finalizers back.
	p.kubectl(t, "delete", "deployment", secondReplica, "-n", releaseNamespace, "--ignore-not-found", "--wait")
	poll(t, 2*time.Minute, "the second replica's pods to go", func(context.Context) (bool, error) {
		return len(p.pods(t, managerSelector+",actionledger.dev/replica=b")) == 0, nil
	})
	began := time.Now()
	// helm prints the hook Job's log (helm.sh/hook-output-log-policy) on its standard error.
	out, err := p.runErr(nil, nil, "sh", "-c", `exec "$0" "$@" 2>&1`, filepath.Join(p.bin, "helm"), "uninstall", releaseName,
		"--namespace", releaseNamespace, "--wait", "--timeout", "4m", "--kubeconfig", p.c.Kubeconfig)
	t.Logf("cluster: helm uninstall: %.1fs\n%s", time.Since(began).Seconds(), out)
	if err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	if !strings.Contains(out, "action(s) released") || !strings.Contains(out, " 0 held") {
		t.Errorf("helm uninstall did not print the hook's report (released, held):\n%s", out)
	}
	if pods := p.pods(t, managerSelector); len(pods) != 0 {
		t.Errorf("manager pods %v after the uninstall", podNames(pods))
	}
	tombstones := &actionsv1alpha1.ActionTombstoneList{}
	if err := p.cl.List(context.Background(), tombstones, client.InNamespace(ns)); err != nil || len(tombstones.Items) != n {
		t.Errorf("%d tombstones in %s after the uninstall (%v), want %d: one per finished action, written before its finalizer went",
			len(tombstones.Items), ns, err, n)
	}
	began = time.Now()
	if err := p.c.Clientset.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 2*time.Minute, "namespace "+ns+" to finish deleting without a manager", func(ctx context.Context) (bool, error) {
		_, err := p.c.Clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	t.Logf("cluster: uninstall: namespace %s with %d finished actions deleted %.1fs after its delete, no manager running, effects=%d",
		ns, n, time.Since(began).Seconds(), srv.Summary().Applied)
	if _, err := p.c.Clientset.Discovery().ServerResourcesForGroupVersion("actions.actionledger.dev/v1alpha1"); err != nil {
		t.Errorf("the CRDs went with the uninstall (crd.keep defaults to true): %v", err)
	}
}
