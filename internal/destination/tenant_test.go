package destination

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Whose rights read a destination's Secrets: a ClusterDestination's and a Destination's without a ServiceAccount
// the manager's (unless Required); a Destination's with spec.serviceAccountName or a default an impersonating
// client, one per ServiceAccount; without a TenantSecrets everything the manager's.
func TestTenantSecretsChoosesTheReader(t *testing.T) {
	manager := fake.NewClientBuilder().WithObjects(serviceAccount("team-a", "sender"), serviceAccount("team-a", "dflt")).Build()
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	token := &actionsv1alpha1.DestinationSpec{Auth: &actionsv1alpha1.AuthConfig{
		BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "token", Key: "t"}}}
	named := token.DeepCopy()
	named.ServiceAccountName = "sender"
	none := &actionsv1alpha1.DestinationSpec{}
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
		{"default", &TenantSecrets{Config: cfg, DefaultServiceAccount: "dflt"}, false, token, "dflt", false, false},
		{"none, not required", &TenantSecrets{Config: cfg}, false, token, "", true, false},
		{"no Secret, none, not required", &TenantSecrets{Config: cfg}, false, none, "", true, false},
		{"a Secret, required", &TenantSecrets{Config: cfg, Required: true}, false, token, "", false, true},
		// Required guards the Secrets a Destination names: one that names none needs no ServiceAccount (the
		// shipped install sets Required; its sample Destination names no Secret), and reads nothing.
		{"no Secret, required", &TenantSecrets{Config: cfg, Required: true}, false, none, "", false, false},
		{"named without a config", &TenantSecrets{}, false, named, "", false, true},
		// A ServiceAccount is impersonated only to read a Secret: one that names none reads nothing, whether or not
		// its ServiceAccount exists.
		{"named, no Secret", &TenantSecrets{Config: cfg}, false, &actionsv1alpha1.DestinationSpec{ServiceAccountName: "gone"}, "gone", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, sa, err := tc.t.secretsOf(t.Context(), manager, tc.cluster, "team-a", tc.spec, "Destination/team-a/d")
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
				again, _, _ := tc.t.secretsOf(t.Context(), manager, tc.cluster, "team-a", tc.spec, "Destination/team-a/d")
				if again != r {
					t.Error("a second read as the same ServiceAccount made a new client")
				}
			}
		})
	}
}

func serviceAccount(ns, name string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// Issue 40, row 6: a Destination naming a ServiceAccount that does not exist (spec.serviceAccountName, or the
// manager's default) is refused with SecretNotAllowed before anything is impersonated: the API server would
// give system:serviceaccount:team-a:no-such-sa the groups system:serviceaccounts, system:serviceaccounts:team-a
// and system:authenticated, and so every Secret those groups may get. The API server here records each request
// the impersonating client makes: none for a missing ServiceAccount (or one the manager may not get), one
// impersonated Secret read for a ServiceAccount that exists.
func TestTenantSecretsImpersonateOnlyAnExistingServiceAccount(t *testing.T) {
	var mu sync.Mutex
	var seen []string // "<Impersonate-User> <path>"
	apiServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Impersonate-User")+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"token","namespace":"team-a"},"data":{"t":%q}}`,
			base64.StdEncoding.EncodeToString([]byte("a-bearer-token-long-enough")))
	}))
	t.Cleanup(apiServer.Close)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Secret"), meta.RESTScopeNamespace)
	tenants := func(dflt string) *TenantSecrets {
		return &TenantSecrets{Config: &rest.Config{Host: apiServer.URL}, Scheme: clientgoscheme.Scheme, Mapper: mapper,
			DefaultServiceAccount: dflt, Required: true}
	}
	spec := func(sa string) *actionsv1alpha1.DestinationSpec {
		return &actionsv1alpha1.DestinationSpec{ServiceAccountName: sa, Auth: &actionsv1alpha1.AuthConfig{
			BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "token", Key: "t"}}}
	}
	withSender := fake.NewClientBuilder().WithObjects(serviceAccount("team-a", "sender")).Build()
	forbidden := fake.NewClientBuilder().WithObjects(serviceAccount("team-a", "sender")).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return apierrors.NewForbidden(corev1.Resource("serviceaccounts"), key.Name, errors.New("RBAC: no get"))
		}}).Build()
	for _, tc := range []struct {
		name    string
		t       *TenantSecrets
		manager client.Reader
		spec    *actionsv1alpha1.DestinationSpec
		want    string // a fragment of the refusal; "" the Secret is read as the ServiceAccount
	}{
		{"named, missing", tenants(""), withSender, spec("no-such-sa"), "ServiceAccount team-a/no-such-sa, which does not exist"},
		{"default, missing", tenants("dflt"), withSender, spec(""), "ServiceAccount team-a/dflt, which does not exist"},
		{"named, the manager may not get it", tenants(""), forbidden, spec("sender"), "may not get that ServiceAccount"},
		{"named, exists", tenants(""), withSender, spec("sender"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			err := CheckSecrets(t.Context(), tc.t, tc.manager, false, tc.spec, "team-a", "Destination/team-a/d")
			mu.Lock()
			got := slices.Clone(seen)
			mu.Unlock()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if want := []string{"system:serviceaccount:team-a:sender /api/v1/namespaces/team-a/secrets/token"}; !slices.Equal(got, want) {
					t.Errorf("requests %q, want %q", got, want)
				}
				return
			}
			if !errors.Is(err, errServiceAccountNotFound) || Reason(err, "") != actionsv1alpha1.ReasonSecretNotAllowed ||
				!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing") {
				t.Errorf("err = %v, want SecretNotAllowed saying %q", err, tc.want)
			}
			if len(got) != 0 {
				t.Errorf("the API server got %q, want no request: nothing may be read as a ServiceAccount not found", got)
			}
		})
	}
}
