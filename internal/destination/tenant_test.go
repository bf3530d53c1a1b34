package destination

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Whose rights read a destination's Secrets: a ClusterDestination's and a Destination's without a ServiceAccount
// the manager's (unless Required); a Destination's with spec.serviceAccountName or a default an impersonating
// client, one per ServiceAccount; without a TenantSecrets everything the manager's.
func TestTenantSecretsChoosesTheReader(t *testing.T) {
	manager := fake.NewClientBuilder().Build()
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	named := &actionsv1alpha1.DestinationSpec{ServiceAccountName: "sender"}
	none := &actionsv1alpha1.DestinationSpec{}
	token := &actionsv1alpha1.DestinationSpec{Auth: &actionsv1alpha1.AuthConfig{
		BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "token", Key: "t"}}}
	for _, tc := range []struct {
		name     string
		t        *TenantSecrets
		cluster  bool
		spec     *actionsv1alpha1.DestinationSpec
		wantSA   string
		manager  bool
		required bool
	}{
		{"no tenants", nil, false, named, "", true, false},
		{"cluster destination", &TenantSecrets{Config: cfg, Required: true}, true, none, "", true, false},
		{"named", &TenantSecrets{Config: cfg}, false, named, "sender", false, false},
		{"named wins over the default", &TenantSecrets{Config: cfg, DefaultServiceAccount: "dflt"}, false, named, "sender", false, false},
		{"default", &TenantSecrets{Config: cfg, DefaultServiceAccount: "dflt"}, false, none, "dflt", false, false},
		{"none, not required", &TenantSecrets{Config: cfg}, false, none, "", true, false},
		{"a Secret, required", &TenantSecrets{Config: cfg, Required: true}, false, token, "", false, true},
		// Required guards the Secrets a Destination names: one that names none needs no ServiceAccount (the
		// shipped install sets Required; its sample Destination names no Secret), and reads nothing.
		{"no Secret, required", &TenantSecrets{Config: cfg, Required: true}, false, none, "", false, false},
		{"named without a config", &TenantSecrets{}, false, named, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, sa, err := tc.t.secretsOf(manager, tc.cluster, "team-a", tc.spec, "Destination/team-a/d")
			if tc.required {
				if !errors.Is(err, errServiceAccountRequired) || Reason(err, "") != actionsv1alpha1.ReasonSecretNotAllowed {
					t.Fatalf("err = %v, want errServiceAccountRequired (SecretNotAllowed)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sa != tc.wantSA || (r == client.Reader(manager)) != tc.manager {
				t.Errorf("ServiceAccount %q, manager's reader %v; want %q, %v", sa, r == client.Reader(manager), tc.wantSA, tc.manager)
			}
			if !tc.manager && sa == "" {
				if err := r.Get(t.Context(), client.ObjectKey{Namespace: "team-a", Name: "x"}, &corev1.Secret{}); !errors.Is(err, errServiceAccountRequired) {
					t.Errorf("a read through the reader of a Destination that names no Secret: %v, want errServiceAccountRequired", err)
				}
			}
			if sa != "" {
				again, _, _ := tc.t.secretsOf(manager, tc.cluster, "team-a", tc.spec, "Destination/team-a/d")
				if again != r {
					t.Error("a second read as the same ServiceAccount made a new client")
				}
			}
		})
	}
}
