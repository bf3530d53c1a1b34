//go:build !unit

package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// Issue 40 row 6, against the real API server: a RoleBinding lets the group system:serviceaccounts:<ns> get a
// Secret, and a Destination names serviceAccountName: no-such-sa. The API server would give the impersonated
// system:serviceaccount:<ns>:no-such-sa that group (it does not check that the ServiceAccount exists), so the
// Secret would be read and sent. The manager impersonates only a ServiceAccount that exists: the action and
// the Destination say SecretNotAllowed ("which does not exist"), nothing is sent. Once the ServiceAccount is
// created (and so may get the Secret through its group), the action is sent.
func TestMissingServiceAccountIsNeverImpersonated(t *testing.T) {
	ns := env.Namespace(t)
	const token = "tenant-token-40r6-9d3e51" //nolint:gosec // G101: a test value
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tok"}, StringData: map[string]string{"token": token}})
	env.Create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-tok"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"tok"}, Verbs: []string{"get"},
	}}})
	env.Create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "namespace-sas-read-tok"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-tok"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + ns}}})
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.ServiceAccountName = "no-such-sa"
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "tok", Key: "token"}}
	})
	env.StartManager(t, app.Options{RequireServiceAccount: true})
	env.Create(t, envtestutil.Action(ns, "pay-1", "payments", "/charges", `{"amount":1}`))

	want := fmt.Sprintf("ServiceAccount %s/no-such-sa, which does not exist", ns)
	xa := env.WaitFor(t, ns, "pay-1", 30*time.Second, "SecretNotAllowed for a missing ServiceAccount", func(x *actionsv1alpha1.ExternalAction) bool {
		c := meta.FindStatusCondition(x.Status.Conditions, actionsv1alpha1.ConditionStalled)
		return c != nil && c.Reason == actionsv1alpha1.ReasonSecretNotAllowed && strings.Contains(c.Message, want)
	})
	destinationReady(t, ns, "payments", "SecretNotAllowed for a missing ServiceAccount", refusedWith(want))
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("a request sent as a missing ServiceAccount"), func() bool {
		return srv.Summary().Requests == 0
	})
	if xa = env.Get(t, ns, "pay-1"); xa.Status.Attempts != 0 || xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
		t.Fatalf("attempts %d, phase %s: want nothing sent", xa.Status.Attempts, xa.Status.Phase)
	}
	assertNoSecret(t, ns, "pay-1", token)

	// The tenant creates the ServiceAccount: it exists, its group may get the Secret, the action is sent.
	env.Create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-such-sa"}})
	env.WaitPhase(t, ns, "pay-1", actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	if n := srv.Requests(ns + "/pay-1"); n != 1 {
		t.Fatalf("requests = %d, want 1", n)
	}
	assertNoSecret(t, ns, "pay-1", token)
}
