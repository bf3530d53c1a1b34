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

// Row 1 of issue 23: a Destination's Secrets are read with the rights of its ServiceAccount
// (spec.serviceAccountName), by impersonation, against the real API server's RBAC. A ServiceAccount that may
// not get the Secret gets nothing sent: the action and the Destination say SecretNotAllowed, naming the Secret
// and the ServiceAccount, never the value. Once a Role lets it get that Secret, the action is sent. Before,
// the manager read the Secret with its own cluster-wide rights and sent it, whatever the writer of the
// Destination could read.
func TestSecretsReadAsTheDestinationsServiceAccount(t *testing.T) {
	ns := env.Namespace(t)
	const token = "tenant-token-6b1f9e27" //nolint:gosec // G101: a test value
	env.Create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sender"}})
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tok"}, StringData: map[string]string{"token": token}})
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.ServiceAccountName = "sender"
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "tok", Key: "token"}}
	})
	env.StartManager(t, app.Options{})
	env.Create(t, envtestutil.Action(ns, "pay-1", "payments", "/charges", `{"amount":1}`))

	want := fmt.Sprintf("ServiceAccount %s/sender may not get Secret %s/tok", ns, ns)
	xa := env.WaitFor(t, ns, "pay-1", 30*time.Second, "SecretNotAllowed naming the ServiceAccount", func(x *actionsv1alpha1.ExternalAction) bool {
		c := meta.FindStatusCondition(x.Status.Conditions, actionsv1alpha1.ConditionStalled)
		return c != nil && c.Reason == actionsv1alpha1.ReasonSecretNotAllowed && strings.Contains(c.Message, want)
	})
	if n := srv.Summary().Requests; n != 0 || xa.Status.Attempts != 0 {
		t.Fatalf("the destination received %d requests, attempts %d: want nothing sent", n, xa.Status.Attempts)
	}
	destinationReady(t, ns, "payments", "SecretNotAllowed naming the ServiceAccount", refusedWith(want))
	assertNoSecret(t, ns, "pay-1", token)

	// The tenant's admin lets the ServiceAccount get that one Secret.
	env.Create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-tok"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"tok"}, Verbs: []string{"get"},
	}}})
	env.Create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sender-reads-tok"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-tok"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "sender"}}})
	env.WaitPhase(t, ns, "pay-1", actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	if n := srv.Requests(ns + "/pay-1"); n != 1 {
		t.Fatalf("requests = %d, want 1", n)
	}
	assertNoSecret(t, ns, "pay-1", token)
}

// With --require-service-account a Destination that names no ServiceAccount (and no --default-service-account
// is set) is refused before any send: its Secrets are never read with the manager's rights. With
// --default-service-account its Secrets are read as that ServiceAccount of its namespace.
func TestRequireServiceAccount(t *testing.T) {
	ns := env.Namespace(t)
	const token = "tenant-token-0c4d2a95" //nolint:gosec // G101: a test value
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tok"}, StringData: map[string]string{"token": token}})
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "tok", Key: "token"}}
	})
	stop := env.StartManager(t, app.Options{RequireServiceAccount: true})
	env.Create(t, envtestutil.Action(ns, "pay-req", "payments", "/charges", `{"amount":1}`))
	env.WaitFor(t, ns, "pay-req", 30*time.Second, "SecretNotAllowed for a Destination without a ServiceAccount", func(x *actionsv1alpha1.ExternalAction) bool {
		c := meta.FindStatusCondition(x.Status.Conditions, actionsv1alpha1.ConditionStalled)
		return c != nil && c.Reason == actionsv1alpha1.ReasonSecretNotAllowed && strings.Contains(c.Message, "--require-service-account")
	})
	destinationReady(t, ns, "payments", "SecretNotAllowed for no ServiceAccount", refusedWith("--require-service-account"))
	stop()

	// The default ServiceAccount exists (one that does not is refused before any read: issue 40 row 6,
	// TestMissingServiceAccountIsNeverImpersonated) but may not get the Secret.
	env.Create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "actionledger-sender"}})
	env.StartManager(t, app.Options{RequireServiceAccount: true, DefaultServiceAccount: "actionledger-sender"})
	env.WaitFor(t, ns, "pay-req", 30*time.Second, "SecretNotAllowed naming the default ServiceAccount", func(x *actionsv1alpha1.ExternalAction) bool {
		c := meta.FindStatusCondition(x.Status.Conditions, actionsv1alpha1.ConditionStalled)
		return c != nil && c.Reason == actionsv1alpha1.ReasonSecretNotAllowed &&
			strings.Contains(c.Message, "ServiceAccount "+ns+"/actionledger-sender may not get Secret "+ns+"/tok")
	})
	if n := srv.Summary().Requests; n != 0 {
		t.Fatalf("the destination received %d requests: want nothing sent", n)
	}
	assertNoSecret(t, ns, "pay-req", token)
}

// refusedWith is destinationReady's test for Ready=False with reason SecretNotAllowed and a message containing msg.
func refusedWith(msg string) func(*metav1.Condition) bool {
	return func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse && c.Reason == actionsv1alpha1.ReasonSecretNotAllowed && strings.Contains(c.Message, msg)
	}
}
