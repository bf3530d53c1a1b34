package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
)

// testSecretsReadAsTheTenant: the shipped install runs the manager with --require-service-account (chart value
// tenancy.requireServiceAccount, default true). A Destination that names a Secret but no ServiceAccount is
// refused, nothing sent; naming a ServiceAccount of its namespace that may get the Secret (the Role and
// RoleBinding of config/samples/sender_serviceaccount.yaml) lets the same action succeed, the manager reading
// the Secret by impersonation under the chart's RBAC.
func testSecretsReadAsTheTenant(t *testing.T, p *product) {
	srv, url := startDestination(t, destination.Options{Dedup: true})
	ns := createNamespace(t, p.c, "tenant")
	p.kubectlIn(t, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: payments-client}
stringData: {token: not-a-real-token}
---
apiVersion: actions.actionledger.dev/v1alpha1
kind: Destination
metadata: {name: payments}
spec:
  url: %s
  idempotency: {supported: true}
  auth:
    bearerToken: {name: payments-client, key: token}
`, url), "apply", "-n", ns, "-f", "-")
	p.kubectlIn(t, `apiVersion: actions.actionledger.dev/v1alpha1
kind: ExternalAction
metadata: {name: charge-1}
spec:
  destinationRef: {name: payments}
  request: {method: POST, path: /charges, body: {amount: 100}}
`, "apply", "-n", ns, "-f", "-")

	began := time.Now()
	var stalled string
	poll(t, time.Minute, "charge-1 Stalled SecretNotAllowed", func(context.Context) (bool, error) {
		xa := p.action(t, ns, "charge-1")
		c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionStalled)
		if c == nil || c.Reason != actionsv1alpha1.ReasonSecretNotAllowed {
			return false, nil
		}
		stalled = c.Message
		return true, nil
	})
	if n := srv.Requests(ns + "/charge-1"); n != 0 {
		t.Errorf("%d requests for charge-1 while its Destination names no ServiceAccount, want 0", n)
	}
	t.Logf("cluster: require-service-account: a Destination naming a Secret and no ServiceAccount refused in %.1fs, "+
		"nothing sent: %s", time.Since(began).Seconds(), stalled)

	p.applySample(t, ns, "sender_serviceaccount.yaml", url)
	p.kubectl(t, "patch", "-n", ns, "destination/payments", "--type=merge", "-p", `{"spec":{"serviceAccountName":"actionledger-sender"}}`)
	began = time.Now()
	p.kubectl(t, "wait", "-n", ns, "xa/charge-1", "--for=condition=Ready", "--timeout=2m")
	t.Logf("cluster: require-service-account: with spec.serviceAccountName the Secret is read as the tenant and "+
		"charge-1 Succeeded %.1fs after the patch, effects=%d", time.Since(began).Seconds(), srv.Effects(ns+"/charge-1"))
	if srv.Effects(ns+"/charge-1") != 1 {
		t.Errorf("charge-1: %d effects, want 1", srv.Effects(ns+"/charge-1"))
	}
}
