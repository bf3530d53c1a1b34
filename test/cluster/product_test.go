package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/clusterenv"
	"github.com/actionledger/actionledger/test/destination"
)

// TestInstalledProduct installs actionledger as its users do (the image imported into containerd, helm install
// of dist/chart with a user's values file, the chart's admission policies, RBAC and ServiceAccounts: nothing of
// the product runs as system:masters) and shows on it, in order: the samples, `kubectl actionledger why` and
// the gateway with a ServiceAccount token, the probes and the read-only root filesystem, garbage collection of
// an output Secret, a rollout restart and a forced deletion of the leader under 200 unsafe actions in flight,
// the chart's FlowSchema under a flood of creates, a noisy neighbour beside another tenant (issue 40), and the
// manager's peak memory. Every figure is logged on one
// line starting with "cluster: ".
func TestInstalledProduct(t *testing.T) {
	c := clusterenv.Require(t)
	p := install(t, c)
	mem := p.watchMemory(t)

	steps := []struct {
		name string
		fn   func(*testing.T, *product)
	}{
		{"ManagerRunsUnderTheChartsServiceAccount", testManagerIdentity},
		{"LeaderLeaseNamesThePodAndNoErrorAtStart", testLeaderAndStartLog},
		{"SampleSucceeds", testSample},
		{"TenantWithTheBuiltInEditRole", testTenantWithTheBuiltInEditRole},
		{"WhyAndGatewayWithAServiceAccountToken", testWhyAndGateway},
		{"SecretsReadAsTheTenant", testSecretsReadAsTheTenant},
		{"MetricsWithAServiceAccountToken", testMetrics},
		{"ProbesAndReadOnlyRoot", testProbesAndReadOnlyRoot},
		{"OutputSecretCollected", testOutputCollected},
		{"SecondReplicaStandsBy", testSecondReplica},
		{"RolloutRestartUnder200UnsafeActions", testRolloutRestart},
		{"ForceDeleteLeaderUnder200UnsafeActions", testForceDeleteLeader},
		{"FlowSchemaKeepsTheManagerServed", testPriorityAndFairness},
		{"OutputSecretCollectedLater", testOutputCollectedLater},
		{"NoWriteRefusedAndNoRequestForbidden", func(t *testing.T, p *product) { p.checkLogs(t) }},
		{"NoisyNeighbourUnderTheMemoryLimit", testNoisyNeighbour},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.fn(t, p) }) && strings.HasPrefix(s.name, "Sample") {
			t.Fatal("the sample did not succeed: the rest would fail for the same reason")
		}
	}
	mem.report(t)
	// Last: the product is gone after it.
	if t.Run("UninstallLeavesNoNamespaceStuck", func(t *testing.T) { testUninstall(t, p) }) {
		t.Run("ReleaseFromARegistry", func(t *testing.T) { testReleaseFromARegistry(t, p) })
	}
}

// testManagerIdentity: the manager's pod runs under the chart's ServiceAccount, which is bound only to the
// chart's roles (no cluster-admin, no system:masters).
func testManagerIdentity(t *testing.T, p *product) {
	pods := p.pods(t, managerSelector)
	for _, pod := range pods {
		if pod.Spec.ServiceAccountName != managerName {
			t.Errorf("manager pod %s runs as ServiceAccount %q, want the chart's %q", pod.Name, pod.Spec.ServiceAccountName, managerName)
		}
	}
	out := p.kubectl(t, "get", "clusterrolebindings,rolebindings", "-A", "-o",
		`jsonpath={range .items[*]}{.roleRef.name}{" "}{range .subjects[*]}{.kind}/{.namespace}/{.name}{","}{end}{"\n"}{end}`)
	for line := range strings.SplitSeq(out, "\n") {
		role, subjects, _ := strings.Cut(line, " ")
		if strings.Contains(subjects, "ServiceAccount/"+releaseNamespace+"/") && (role == "cluster-admin" || role == "admin" || role == "edit") {
			t.Errorf("a ServiceAccount of the release is bound to %s: %s", role, line)
		}
	}
	// The API server's own answer: what the manager's ServiceAccount may do is the chart's grant only.
	sa := "system:serviceaccount:" + releaseNamespace + ":" + managerName
	for _, check := range []struct {
		verb, resource string
		want           string
	}{
		{"update", "externalactions.actions.actionledger.dev/status", "yes"},
		{"create", "actiontombstones.actions.actionledger.dev", "yes"},
		{"update", "leases.coordination.k8s.io", "yes"},
		{"delete", "namespaces", "no"},
		{"create", "clusterrolebindings.rbac.authorization.k8s.io", "no"},
		{"impersonate", "users", "no"},
	} {
		out, _ := p.kubectlErr("auth", "can-i", check.verb, check.resource, "--as", sa, "-n", releaseNamespace)
		got, _, _ := strings.Cut(out, "\n") // a warning about a cluster-scoped resource may follow
		if strings.TrimSpace(got) != check.want {
			t.Errorf("kubectl auth can-i %s %s --as %s: %q, want %q", check.verb, check.resource, sa, strings.TrimSpace(got), check.want)
		}
	}
}

// testSample applies config/samples' Destination (its url pointed at this test's destination, which
// deduplicates like the demo destination it names) and ExternalAction, as the getting-started guide does.
func testSample(t *testing.T, p *product) {
	srv, url := startDestination(p.t, destination.Options{Dedup: true}) // used by the next steps too
	ns := createNamespace(p.t, p.c, "shop")
	p.applySample(t, ns, "actions_v1alpha1_destination.yaml", url)
	began := time.Now()
	p.applySample(t, ns, "actions_v1alpha1_externalaction.yaml", url)
	p.kubectl(t, "wait", "-n", ns, "xa/invoice-7", "--for=condition=Ready", "--timeout=2m")
	xa := p.action(t, ns, "invoice-7")
	t.Logf("cluster: sample: invoice-7 %s in %.1fs, attempts=%d, effects at the destination=%d",
		xa.Status.Phase, time.Since(began).Seconds(), xa.Status.Attempts, srv.Effects(ns+"/invoice-7"))
	if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || srv.Effects(ns+"/invoice-7") != 1 {
		t.Errorf("invoice-7: phase %s, effects %d; want Succeeded, 1", xa.Status.Phase, srv.Effects(ns+"/invoice-7"))
	}
	// The requested-by policy of the chart set the annotation from the creator (the admin here).
	if got := xa.Annotations["actions.actionledger.dev/requested-by"]; got == "" {
		t.Errorf("invoice-7 has no requested-by annotation: the chart's MutatingAdmissionPolicy did not run")
	}
	if !slices.Contains(xa.Finalizers, "actions.actionledger.dev/ledger") {
		t.Errorf("invoice-7 finalizers %v: want the ledger finalizer", xa.Finalizers)
	}
	p.sampleNS, p.sampleDest = ns, srv
}

// applySample applies a file of config/samples into ns, with the demo destination's url replaced by url.
// More old, new pairs rename what they name.
func (p *product) applySample(t *testing.T, ns, file, url string, oldNew ...string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(clusterenv.RepoRoot(), "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer(append([]string{"http://127.0.0.1:8089", url}, oldNew...)...).Replace(string(data))
	p.kubectlIn(t, manifest, "apply", "-n", ns, "-f", "-")
}

// testWhyAndGateway: a tenant's ServiceAccount with the Role of docs/gateway.md (create, get externalactions)
// and the chart's viewer roles uses `kubectl actionledger why` and the gateway's documented curl with a token
// from the TokenRequest API.
func testWhyAndGateway(t *testing.T, p *product) {
	if p.sampleNS == "" {
		t.Fatal("needs the SampleSucceeds step before it (its namespace and destination): run -run 'TestInstalledProduct/(SampleSucceeds|<this step>)'")
	}
	ns := p.sampleNS
	p.kubectl(t, "create", "serviceaccount", "checkout", "-n", ns)
	p.kubectl(t, "create", "role", "checkout", "-n", ns, "--verb=create,get", "--resource=externalactions.actions.actionledger.dev")
	p.kubectl(t, "create", "rolebinding", "checkout", "-n", ns, "--role=checkout", "--serviceaccount="+ns+":checkout")
	for _, role := range []string{"externalaction-viewer-role", "destination-viewer-role", "actiontombstone-viewer-role"} {
		p.kubectl(t, "create", "rolebinding", "checkout-"+role, "-n", ns, "--clusterrole="+releaseName+"-"+role,
			"--serviceaccount="+ns+":checkout")
	}
	token := p.serviceAccountToken(t, ns, "checkout")
	kubeconfig := p.tokenKubeconfig(t, "checkout", ns, token)

	// kubectl passes no flag written before a plugin's name: the identity comes from $KUBECONFIG.
	why, err := p.runErr(nil, []string{"KUBECONFIG=" + kubeconfig}, p.kubectlPath(), "actionledger", "why", "invoice-7", "-n", ns)
	t.Logf("kubectl actionledger why invoice-7 (as %s:checkout):\n%s", ns, why)
	if err != nil || !strings.Contains(why, "is Succeeded") {
		t.Errorf("kubectl actionledger why: %v: %q, want it to say the action is Succeeded", err, why)
	}

	gw := fmt.Sprintf("https://127.0.0.1:%d/v1/namespaces/%s", p.ports.gateway, ns)
	curl := func(body string) string {
		out, err := p.runErr(nil, nil, "curl", "-s", "-i", "--cacert", p.caFile, "-H", "Authorization: Bearer "+token,
			"-H", `Idempotency-Key: "order-1"`, "-H", "Content-Type: application/json", "-d", body, gw+"/destinations/demo/charges")
		if err != nil {
			t.Fatalf("curl the gateway: %v: %s", err, out)
		}
		return out
	}
	first := curl(`{"amount":1}`)
	again := curl(`{"amount":1}`)
	other := curl(`{"amount":2}`)
	t.Logf("gateway, first request:\n%s\ngateway, the same again:\n%s", first, again)
	if !strings.HasPrefix(first, "HTTP/1.1 201") || !strings.Contains(first, "Actionledger-Phase: Succeeded") {
		t.Errorf("first request through the gateway: want 201 and Actionledger-Phase: Succeeded, got\n%s", first)
	}
	if !strings.HasPrefix(again, "HTTP/1.1 201") || !strings.Contains(again, "Idempotent-Replayed: true") {
		t.Errorf("repeat through the gateway: want 201 with Idempotent-Replayed: true, got\n%s", again)
	}
	if !strings.HasPrefix(other, "HTTP/1.1 422") {
		t.Errorf("the same key with another body: want 422, got\n%s", other)
	}
	effects := p.sampleDest.Effects(ns + "/order-1")
	xa := p.action(t, ns, "order-1")
	t.Logf("cluster: gateway: order-1 %s, effects=%d, requested-by=%s", xa.Status.Phase, effects,
		xa.Annotations["actions.actionledger.dev/requested-by"])
	if effects != 1 || xa.Annotations["actions.actionledger.dev/requested-by"] != "system:serviceaccount:"+ns+":checkout" {
		t.Errorf("order-1: effects %d, requested-by %q; want 1 and the caller's ServiceAccount", effects,
			xa.Annotations["actions.actionledger.dev/requested-by"])
	}
}

// testMetrics does what kubebuilder's e2e suite does: a ServiceAccount bound to the chart's metrics-reader
// ClusterRole reads the manager's metrics endpoint (HTTPS, authenticated and authorized by the manager).
func testMetrics(t *testing.T, p *product) {
	token, url := p.metricsReader(t, "metrics")
	var out string
	poll(t, time.Minute, "the metrics endpoint to answer with the actionledger metrics", func(context.Context) (bool, error) {
		var err error
		out, err = p.runErr(nil, nil, "curl", "-s", "-k", "-H", "Authorization: Bearer "+token, url)
		return err == nil && strings.Contains(out, "actionledger_attempts_total"), err
	})
	noToken, _ := p.runErr(nil, nil, "curl", "-s", "-k", "-o", "/dev/null", "-w", "%{http_code}", url)
	var attempts []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "actionledger_attempts_total{") {
			attempts = append(attempts, line)
		}
	}
	t.Logf("cluster: metrics: with the metrics-reader token %d actionledger_attempts_total series; without a token HTTP %s",
		len(attempts), noToken)
	if noToken != "401" {
		t.Errorf("metrics without a token: HTTP %s, want 401", noToken)
	}
}

// metricsReader creates a ServiceAccount in a new namespace named from prefix, bound (until the test ends) to the
// chart's metrics-reader ClusterRole, and returns its token and the manager's metrics URL (the values file's port).
func (p *product) metricsReader(t *testing.T, prefix string) (token, url string) {
	t.Helper()
	ns := createNamespace(t, p.c, prefix)
	p.kubectl(t, "create", "serviceaccount", "scraper", "-n", ns)
	binding := "actionledger-test-" + prefix
	p.kubectl(t, "create", "clusterrolebinding", binding, "--clusterrole="+releaseName+"-metrics-reader",
		"--serviceaccount="+ns+":scraper")
	t.Cleanup(func() { _, _ = p.kubectlErr("delete", "clusterrolebinding", binding) })
	return p.serviceAccountToken(t, ns, "scraper"), fmt.Sprintf("https://127.0.0.1:%d/metrics", p.ports.managerMetrics)
}

// testProbesAndReadOnlyRoot: the manager's and the gateway's /healthz and /readyz answer on the ports of the
// values file, the kubelet has their containers Ready with no restart, the root filesystem of each container is
// mounted read-only, and no log line of theirs reports a write refused by it.
func testProbesAndReadOnlyRoot(t *testing.T, p *product) {
	ctx := context.Background()
	for _, probe := range []struct {
		who  string
		port int
	}{{"manager", p.ports.managerHealth}, {"gateway", p.ports.gatewayHealth}} {
		for _, path := range []string{"/healthz", "/readyz"} {
			code, body, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d%s", probe.port, path))
			t.Logf("cluster: probes: %s %s -> %d %q", probe.who, path, code, strings.TrimSpace(body))
			if err != nil || code != 200 {
				t.Errorf("%s %s: %d, %v; want 200", probe.who, path, code, err)
			}
		}
	}
	for _, sel := range []string{managerSelector, gatewaySelector} {
		for _, pod := range p.pods(t, sel) {
			for _, cs := range pod.Status.ContainerStatuses {
				if !cs.Ready || cs.RestartCount != 0 {
					t.Errorf("pod %s container %s: ready %t, restarts %d", pod.Name, cs.Name, cs.Ready, cs.RestartCount)
				}
				root, err := p.rootMountOptions(pod, cs)
				t.Logf("cluster: read-only root: pod %s container %s: / mounted %q", pod.Name, cs.Name, root)
				if err != nil || !slices.Contains(strings.Split(root, ","), "ro") {
					t.Errorf("pod %s container %s: root mount options %q (%v), want ro", pod.Name, cs.Name, root, err)
				}
			}
		}
	}
	p.checkLogs(t)
}

// checkLogs fails the test for a log line of a live manager or gateway pod that reports a write refused by the
// read-only root filesystem or a request the chart's RBAC refused.
func (p *product) checkLogs(t *testing.T) {
	t.Helper()
	for _, sel := range []string{managerSelector, gatewaySelector} {
		for _, pod := range p.pods(t, sel) {
			logs, err := p.c.Clientset.CoreV1().Pods(releaseNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
			if err != nil {
				t.Errorf("logs of %s: %v", pod.Name, err)
			}
			for line := range strings.SplitSeq(string(logs), "\n") {
				if strings.Contains(line, "read-only file system") || strings.Contains(line, "is forbidden") {
					t.Errorf("pod %s: %s", pod.Name, line)
				}
			}
		}
	}
}

// testOutputCollected: an action with spec.outputs.secretName Succeeds, its Secret is written with the action
// as its controller owner, and deleting the action lets the cluster's garbage collector remove the Secret
// (docs/outputs.md).
//
// The garbage collector of the kube-controller-manager learns of a new CRD at its next discovery resync (every
// 30 s): until then it cannot resolve an ExternalAction owner and retries the dependent with its workqueue's
// back-off, so the collection right after the install takes longer than the later one (Later, run at the end).
func testOutputCollected(t *testing.T, p *product) { outputCollected(t, p, "create-order-20") }

func testOutputCollectedLater(t *testing.T, p *product) { outputCollected(t, p, "create-order-21") }

func outputCollected(t *testing.T, p *product, name string) {
	if p.sampleNS == "" {
		t.Fatal("needs the SampleSucceeds step before it (its namespace and destination): run -run 'TestInstalledProduct/(SampleSucceeds|<this step>)'")
	}
	ctx := context.Background()
	ns := p.sampleNS
	p.applySample(t, ns, "actions_v1alpha1_externalaction_outputs.yaml", "", "create-order-20", name)
	p.kubectl(t, "wait", "-n", ns, "xa/"+name, "--for=condition=Ready", "--timeout=2m")
	xa := p.action(t, ns, name)
	secret, err := p.c.Clientset.CoreV1().Secrets(ns).Get(ctx, name+"-result", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the output Secret: %v", err)
	}
	if owner := metav1.GetControllerOf(secret); owner == nil || owner.UID != xa.UID {
		t.Fatalf("the output Secret's controller owner is %+v, want the action %s", owner, xa.UID)
	}
	if string(secret.Data["orderID"]) != destination.EffectID(ns+"/"+name) {
		t.Errorf("output orderID %q, want %q", secret.Data["orderID"], destination.EffectID(ns+"/"+name))
	}
	deleted := time.Now()
	p.kubectl(t, "delete", "-n", ns, "xa/"+name, "--wait=false")
	poll(t, 2*time.Minute, "the action to be gone (the manager writes its tombstone, then lifts its finalizer)", func(ctx context.Context) (bool, error) {
		err := p.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &actionsv1alpha1.ExternalAction{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	gone := time.Since(deleted)
	poll(t, 2*time.Minute, "the garbage collector to remove the output Secret", func(ctx context.Context) (bool, error) {
		_, err := p.c.Clientset.CoreV1().Secrets(ns).Get(ctx, name+"-result", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	t.Logf("cluster: outputs: %s gone %.1fs after its deletion, its Secret %s-result removed by the garbage collector %.1fs after the deletion (%.0fs after the install)",
		name, gone.Seconds(), name, time.Since(deleted).Seconds(), time.Since(p.installed).Seconds())
}

// unsafeActions is the number of actions of each disruption run.
const unsafeActions = 200

// unsafeRun creates unsafeActions actions on a slow destination that neither deduplicates nor has a post-check
// (POST: effect Unsafe), calls disrupt once sends are in flight, waits for every action to reach a terminal
// phase and checks the outcome against what the destination applied.
//
// Definitions (those of test/chaos): a duplicate is a key the destination applied more than once; a lost action
// is one that did not reach a terminal phase (Succeeded, Failed, Exhausted, OutcomeUnknown) by the end of the
// wait, or whose phase contradicts the destination (Succeeded without exactly one effect, Failed or Exhausted
// with one: nothing may be resent without a proof, so an applied effect is either Succeeded or OutcomeUnknown).
func unsafeRun(t *testing.T, p *product, what string, disrupt func(t *testing.T, ns string)) {
	srv, url := startDestination(t, destination.Options{CommitDelay: 3 * time.Second})
	ns := createNamespace(t, p.c, "unsafe")
	p.kubectlIn(t, fmt.Sprintf(`apiVersion: actions.actionledger.dev/v1alpha1
kind: Destination
metadata: {name: slow}
spec:
  url: %s
  timeout: 15s
  idempotency: {supported: false}
  concurrency: {maxInFlight: 20}
  retryPolicy: {maxAttempts: 3, initialBackoff: 1s, deadline: 10m}
`, url), "apply", "-n", ns, "-f", "-")
	p.waitDestinationReady(t, ns, "slow")

	createdCh := make(chan int, 1)
	go func() { createdCh <- p.createActions(t, ns, "slow", unsafeActions) }()
	poll(t, time.Minute, "sends in flight at the destination", func(context.Context) (bool, error) {
		return srv.Summary().Requests >= 30, nil
	})
	atDisruption := srv.Summary()
	t.Logf("%s with %d requests received and %d applied at the destination", what, atDisruption.Requests, atDisruption.Applied)
	disrupt(t, ns)
	created := <-createdCh

	began := time.Now()
	var items []actionsv1alpha1.ExternalAction
	poll(t, 5*time.Minute, "every action to reach a terminal phase", func(ctx context.Context) (bool, error) {
		list := &actionsv1alpha1.ExternalActionList{}
		if err := p.cl.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		items = list.Items
		for _, xa := range items {
			if !finished(xa.Status.Phase) {
				return false, nil
			}
		}
		return len(items) == created, nil
	})
	settled := time.Since(began)
	phases, lost, bad := map[actionsv1alpha1.Phase]int{}, 0, 0
	for _, xa := range items {
		phases[xa.Status.Phase]++
		n := srv.Effects(ns + "/" + xa.Name)
		why := ""
		switch xa.Status.Phase {
		case actionsv1alpha1.PhaseSucceeded:
			if n != 1 {
				why = fmt.Sprintf("Succeeded with %d effects", n)
			}
		case actionsv1alpha1.PhaseFailed, actionsv1alpha1.PhaseExhausted:
			if n != 0 {
				why = fmt.Sprintf("%s with %d effects", xa.Status.Phase, n)
			}
		case actionsv1alpha1.PhaseOutcomeUnknown:
		default:
			why = "not finished"
		}
		if why != "" {
			lost++
			if bad++; bad <= 10 {
				t.Errorf("%s/%s: %s; status %+v", ns, xa.Name, why, xa.Status)
			}
		}
	}
	lost += created - len(items)
	sum := srv.Summary()
	t.Logf("cluster: %s: actions=%d duplicates=%d lost=%d outcomeUnknown=%d succeeded=%d failed=%d exhausted=%d "+
		"applied=%d requests=%d settled=%.1fs after the disruption",
		what, created, sum.Duplicates, lost, phases[actionsv1alpha1.PhaseOutcomeUnknown], phases[actionsv1alpha1.PhaseSucceeded],
		phases[actionsv1alpha1.PhaseFailed], phases[actionsv1alpha1.PhaseExhausted], sum.Applied, sum.Requests, settled.Seconds())
	if sum.Duplicates != 0 || lost != 0 || created != unsafeActions {
		t.Errorf("%s: created %d of %d, duplicates %d (%v), lost %d", what, created, unsafeActions, sum.Duplicates, sum.DuplicateKeys, lost)
	}
}

// testRolloutRestart: kubectl rollout restart of the manager while the actions are in flight; the rollout waits
// for the new pod's readiness.
func testRolloutRestart(t *testing.T, p *product) {
	unsafeRun(t, p, "rollout restart", func(t *testing.T, ns string) {
		holder := p.claimHolderPod(t, ns)
		before := podNames(p.pods(t, chartManagerSelector))
		began := time.Now()
		p.kubectl(t, "rollout", "restart", "deployment/"+managerName, "-n", releaseNamespace)
		p.kubectl(t, "rollout", "status", "deployment/"+managerName, "-n", releaseNamespace, "--timeout=3m")
		after := p.pods(t, chartManagerSelector)
		t.Logf("cluster: rollout restart: complete in %.1fs, pods %v -> %v (the open claims were %s's)", time.Since(began).Seconds(),
			before, podNames(after), holder)
		for _, pod := range after {
			if slices.Contains(before, pod.Name) {
				t.Errorf("pod %s survived the rollout", pod.Name)
			}
			if !podReady(&pod) {
				t.Errorf("rollout status returned with pod %s not Ready", pod.Name)
			}
		}
	})
}

// testForceDeleteLeader: kubectl delete pod --grace-period=0 --force of the Lease's holder while the actions
// are in flight.
func testForceDeleteLeader(t *testing.T, p *product) {
	unsafeRun(t, p, "force delete leader", func(t *testing.T, ns string) {
		leader := p.claimHolderPod(t, ns)
		lease := p.leaseHolder(t)
		p.kubectl(t, "delete", "pod", leader, "-n", releaseNamespace, "--grace-period=0", "--force")
		began := time.Now()
		poll(t, 3*time.Minute, "a new leader", func(ctx context.Context) (bool, error) {
			l, err := p.lease(ctx)
			return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != lease, err
		})
		restarts := int32(0)
		for _, pod := range p.pods(t, managerSelector) {
			for _, cs := range pod.Status.ContainerStatuses {
				restarts += cs.RestartCount
			}
		}
		t.Logf("cluster: force delete leader: %s (holding the open claims) deleted, a new leader %.1fs later; restarts of its replacement: %d",
			leader, time.Since(began).Seconds(), restarts)
	})
}

// createActions creates n actions POSTing to dest, 8 at a time, and returns how many were created.
func (p *product) createActions(t *testing.T, ns, dest string, n int) int {
	t.Helper()
	var created atomic.Int64
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				xa := newAction(ns, fmt.Sprintf("a-%03d", i), dest, fmt.Sprintf(`{"amount":%d}`, 100+i))
				if err := p.cl.Create(context.Background(), xa); err != nil {
					t.Errorf("creating %s/%s: %v", ns, xa.Name, err)
					continue
				}
				created.Add(1)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return int(created.Load())
}

func (p *product) waitDestinationReady(t *testing.T, ns, name string) {
	t.Helper()
	p.kubectl(t, "wait", "-n", ns, "destination/"+name, "--for=condition=Ready", "--timeout=1m")
}

func (p *product) action(t *testing.T, ns, name string) *actionsv1alpha1.ExternalAction {
	t.Helper()
	xa := &actionsv1alpha1.ExternalAction{}
	if err := p.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, xa); err != nil {
		t.Fatalf("reading %s/%s: %v", ns, name, err)
	}
	return xa
}

func (p *product) pods(t *testing.T, selector string) []corev1.Pod {
	t.Helper()
	list, err := p.c.Clientset.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("listing pods %s: %v", selector, err)
	}
	var live []corev1.Pod
	for _, pod := range list.Items {
		if pod.DeletionTimestamp == nil {
			live = append(live, pod)
		}
	}
	return live
}

func (p *product) lease(ctx context.Context) (*coordinationv1.Lease, error) {
	return p.c.Clientset.CoordinationV1().Leases(releaseNamespace).Get(ctx, app.DefaultLeaderElectionID, metav1.GetOptions{})
}

// leaseHolder returns the holder identity of the manager's leader Lease.
func (p *product) leaseHolder(t *testing.T) string {
	t.Helper()
	var holder string
	poll(t, time.Minute, "the manager's leader Lease", func(ctx context.Context) (bool, error) {
		l, err := p.lease(ctx)
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, err
		}
		holder = *l.Spec.HolderIdentity
		return holder != "", nil
	})
	return holder
}

// claimHolderPod returns the pod that holds the open claims of ns's actions: a claim's holder is
// "<pod name>_<nonce>" (the manager's POD_NAME). It fails the test unless every open claim names one live
// manager pod: on the node's network the host name is the node's, so a holder taken from it names no pod.
func (p *product) claimHolderPod(t *testing.T, ns string) string {
	t.Helper()
	list := &actionsv1alpha1.ExternalActionList{}
	if err := p.cl.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing the actions: %v", err)
	}
	holders := map[string]int{}
	for _, xa := range list.Items {
		if xa.Status.Claim != nil {
			pod, _, _ := strings.Cut(xa.Status.Claim.Holder, "_")
			holders[pod]++
		}
	}
	live := podNames(p.pods(t, managerSelector))
	if len(holders) != 1 {
		t.Fatalf("open claims by holder: %v; want one holder, the leader (manager pods %v)", holders, live)
	}
	for pod := range holders {
		if !slices.Contains(live, pod) {
			t.Fatalf("the open claims name %q, which is no manager pod (%v): the claim holder must name the pod", pod, live)
		}
		return pod
	}
	return ""
}

func newAction(ns, name, dest, body string) *actionsv1alpha1.ExternalAction {
	xa := &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: actionsv1alpha1.ExternalActionSpec{
			DestinationRef: actionsv1alpha1.DestinationReference{Name: dest},
			Request:        actionsv1alpha1.ActionRequest{Method: "POST", Path: "/charges"},
		},
	}
	xa.Spec.Request.Body = jsonBody(body)
	return xa
}

// finished: the phases an action may end in here (Conflict would mean a broken key).
func finished(p actionsv1alpha1.Phase) bool {
	switch p {
	case actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.PhaseFailed, actionsv1alpha1.PhaseExhausted, actionsv1alpha1.PhaseOutcomeUnknown:
		return true
	}
	return false
}

func podNames(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
