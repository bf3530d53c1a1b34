package ecosystem_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// A finished action edited outside its fingerprint (spec.ttlSecondsAfterFinished on a Succeeded action,
// spec.retryPolicy on a Failed one) is observed: every observedGeneration follows metadata.generation, the new
// TTL recomputes expiresAt from completedAt, the Reconciling message says the retry policy no longer applies,
// and kstatus, the Argo CD script and `kubectl wait` settle instead of reading Progressing forever.
func TestFinishedActionObservesNewGenerations(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, nil)
	srv.Script(ns+"/invoice-8", destination.Step{Status: 400, Body: `{"code":"card_declined"}`})
	env.StartManager(t, app.Options{Holder: "finished"})
	env.Create(t, envtestutil.Action(ns, "invoice-7", "payments", "/charges", `{"amount":7}`))
	env.Create(t, envtestutil.Action(ns, "invoice-8", "payments", "/charges", `{"amount":8}`))
	env.WaitPhase(t, ns, "invoice-7", actionsv1alpha1.PhaseSucceeded, 20*time.Second)
	env.WaitPhase(t, ns, "invoice-8", actionsv1alpha1.PhaseFailed, 20*time.Second)

	patch := func(name, p string) {
		xa := &actionsv1alpha1.ExternalAction{}
		xa.Namespace, xa.Name = ns, name
		if err := env.Client.Patch(ctx, xa, client.RawPatch(types.MergePatchType, []byte(p))); err != nil {
			t.Fatalf("patching %s: %v", name, err)
		}
		if xa.Generation != 2 {
			t.Fatalf("%s: generation %d after the patch, want 2", name, xa.Generation)
		}
	}
	patch("invoice-7", `{"spec":{"ttlSecondsAfterFinished":600}}`)
	patch("invoice-8", `{"spec":{"retryPolicy":{"maxAttempts":1}}}`)

	observed := func(xa *actionsv1alpha1.ExternalAction) bool {
		if xa.Status.ObservedGeneration != xa.Generation {
			return false
		}
		for _, c := range xa.Status.Conditions {
			if c.ObservedGeneration != xa.Generation {
				return false
			}
		}
		return true
	}
	succeeded := env.WaitFor(t, ns, "invoice-7", 10*time.Second, "generation 2 observed", observed)
	failed := env.WaitFor(t, ns, "invoice-8", 10*time.Second, "generation 2 observed", observed)

	if want := succeeded.Status.CompletedAt.Add(600 * time.Second); succeeded.Status.ExpiresAt == nil || !succeeded.Status.ExpiresAt.Time.Equal(want) {
		t.Errorf("expiresAt %v, want completedAt + 600s = %v", succeeded.Status.ExpiresAt, want)
	}
	if succeeded.Status.Phase != actionsv1alpha1.PhaseSucceeded || failed.Status.Phase != actionsv1alpha1.PhaseFailed {
		t.Errorf("phases changed: %s, %s", succeeded.Status.Phase, failed.Status.Phase)
	}
	if c := meta.FindStatusCondition(failed.Status.Conditions, actionsv1alpha1.ConditionReconciling); c == nil ||
		!strings.Contains(c.Message, "spec.retryPolicy no longer applies") {
		t.Errorf("Reconciling condition %+v does not say the retry policy no longer applies", c)
	}
	if n := srv.Requests(ns + "/invoice-8"); n != 1 {
		t.Errorf("the Failed action was sent %d times, want 1", n)
	}

	script := healthScript(t)
	for name, want := range map[string]struct {
		kstatus status.Status
		argo    string
	}{"invoice-7": {status.CurrentStatus, "Healthy"}, "invoice-8": {status.FailedStatus, "Degraded"}} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(xaGVK)
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			t.Fatal(err)
		}
		if res, err := status.Compute(u); err != nil || res.Status != want.kstatus {
			t.Errorf("%s: kstatus %v (err %v), want %s", name, res, err, want.kstatus)
		}
		if got, msg := argoHealth(t, script, u.Object); got != want.argo {
			t.Errorf("%s: Argo CD health %s (%q), want %s", name, got, msg, want.argo)
		}
	}

	// kubectl wait compares each condition's observedGeneration with metadata.generation.
	kubectl := filepath.Join(envtestutil.AssetsDir(), "kubectl")
	for _, args := range [][]string{
		{"wait", "--for=condition=Ready", "xa/invoice-7"},
		{"wait", "--for=condition=Stalled", "xa/invoice-8"},
	} {
		cmd := exec.CommandContext(ctx, kubectl, append(args, "-n", ns, "--timeout=10s", "--kubeconfig", env.Kubeconfig(t))...) //nolint:gosec // envtest's kubectl
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// readXA reads the action as the GitOps tools see it.
func readXA(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(xaGVK)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// An action whose destinationRef names no Destination is Stalled: kstatus Failed, Argo CD Degraded with the
// reason, `kubectl wait --for=condition=Stalled` returns; creating the Destination makes it Current/Healthy.
func TestStalledDestinationReadsFailedThenSettles(t *testing.T) {
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.StartManager(t, app.Options{Holder: "stalled"})
	env.Create(t, envtestutil.Action(ns, "invoice-9", "paymnts", "/charges", `{"amount":9}`))
	env.WaitFor(t, ns, "invoice-9", 20*time.Second, "Stalled", func(xa *actionsv1alpha1.ExternalAction) bool {
		return meta.IsStatusConditionTrue(xa.Status.Conditions, actionsv1alpha1.ConditionStalled)
	})
	u := readXA(t, ns, "invoice-9")
	if res, err := status.Compute(u); err != nil || res.Status != status.FailedStatus {
		t.Errorf("stalled: kstatus %v (err %v), want Failed", res, err)
	}
	if got, msg := argoHealth(t, healthScript(t), u.Object); got != "Degraded" || !strings.Contains(msg, actionsv1alpha1.ReasonDestinationNotReady) ||
		!strings.Contains(msg, "paymnts") {
		t.Errorf("stalled: Argo CD health %s (%q), want Degraded naming the reason and the destination", got, msg)
	}
	kubectl := filepath.Join(envtestutil.AssetsDir(), "kubectl")
	cmd := exec.CommandContext(t.Context(), kubectl, "wait", "--for=condition=Stalled", "xa/invoice-9", "-n", ns, "--timeout=10s", //nolint:gosec // envtest's kubectl
		"--kubeconfig", env.Kubeconfig(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("kubectl wait --for=condition=Stalled: %v: %s", err, out)
	}

	env.CreateDestination(t, ns, "paymnts", url, nil)
	env.WaitPhase(t, ns, "invoice-9", actionsv1alpha1.PhaseSucceeded, 10*time.Second)
	u = readXA(t, ns, "invoice-9")
	if res, err := status.Compute(u); err != nil || res.Status != status.CurrentStatus {
		t.Errorf("fixed: kstatus %v (err %v), want Current", res, err)
	}
	if got, msg := argoHealth(t, healthScript(t), u.Object); got != "Healthy" {
		t.Errorf("fixed: Argo CD health %s (%q), want Healthy", got, msg)
	}
}
