package ecosystem_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/destination"
)

// Issue 40 row 6 under the rendered RBAC: the manager checks that a Destination's ServiceAccount exists before it
// impersonates it, with its own rights (get on serviceaccounts, granted by its ClusterRole). As the rendered
// manager ServiceAccount, a Destination naming an existing ServiceAccount that may get its Secret passes, and one
// naming a ServiceAccount that does not exist is refused as missing (SecretNotAllowed), not as a ServiceAccount
// the manager may not get: the grant is there.
func TestRenderedRBACChecksTheServiceAccount(t *testing.T) {
	objs := render(t, "config/default")
	ctx := context.Background()
	if ns := find(objs, "Namespace", installNamespace); ns != nil {
		_ = env.Client.Create(ctx, ns.DeepCopy())
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
	env.Create(t, &corev1.Secret{ObjectMeta: metaNS(tenant, "tok"), StringData: map[string]string{"token": "rbac-sa-test-token-1"}})
	env.Create(t, &corev1.ServiceAccount{ObjectMeta: metaNS(tenant, "sender")})
	env.Create(t, &rbacv1.Role{ObjectMeta: metaNS(tenant, "read-tok"), Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"tok"}, Verbs: []string{"get"},
	}}})
	env.Create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "sas-read-tok"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-tok"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + tenant}}})

	tenants := &destination.TenantSecrets{Config: cfg, Scheme: app.Scheme, Required: true}
	spec := func(sa string) *actionsv1alpha1.DestinationSpec {
		return &actionsv1alpha1.DestinationSpec{ServiceAccountName: sa, Auth: &actionsv1alpha1.AuthConfig{
			BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "tok", Key: "token"}}}
	}
	if err := destination.CheckSecrets(ctx, tenants, asManager, false, spec("sender"), tenant, "Destination/"+tenant+"/d"); err != nil {
		t.Errorf("an existing ServiceAccount that may get the Secret: %v", err)
	}
	err = destination.CheckSecrets(ctx, tenants, asManager, false, spec("no-such-sa"), tenant, "Destination/"+tenant+"/d")
	if err == nil || destination.Reason(err, "") != actionsv1alpha1.ReasonSecretNotAllowed ||
		!strings.Contains(err.Error(), "which does not exist") {
		t.Errorf("a missing ServiceAccount whose group may get the Secret: %v, want SecretNotAllowed (does not exist)", err)
	}
}
