package destination

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// TenantClientCacheSize bounds the impersonating clients kept (one per ServiceAccount, least recently used
// dropped first); a dropped one is made again on its next use.
const TenantClientCacheSize = 1024

// errServiceAccountRequired marks a namespaced Destination that names no ServiceAccount while the manager
// requires one (--require-service-account) and has no default (--default-service-account).
var errServiceAccountRequired = errors.New("service account required")

// TenantSecrets chooses whose rights read a destination's Secrets. A namespaced Destination's are read as a
// ServiceAccount of its own namespace, by impersonation (user "system:serviceaccount:<namespace>:<name>", as
// Flux's kustomize-controller applies as spec.serviceAccountName): its spec.serviceAccountName, else
// DefaultServiceAccount. So a Secret is sent only if that ServiceAccount may get it, whoever wrote the
// Destination. Without either, the manager's own rights read them (its APIReader), unless Required refuses
// that. ClusterDestinations always read with the manager's rights, in the controller's namespace. Safe for
// concurrent use; the zero value reads as the manager what names no ServiceAccount and refuses the rest.
type TenantSecrets struct {
	// Config is the manager's rest.Config; each impersonating client is a copy with Impersonate set. nil: no
	// impersonation is possible, and a Destination that needs one is refused.
	Config *rest.Config
	// Scheme and Mapper serve the impersonating clients (the manager's), so that no client runs discovery.
	Scheme *runtime.Scheme
	Mapper meta.RESTMapper
	// DefaultServiceAccount is the ServiceAccount (a name, in the Destination's namespace) for a Destination
	// without spec.serviceAccountName; "" none (flag --default-service-account).
	DefaultServiceAccount string
	// Required refuses a namespaced Destination that ends up with no ServiceAccount, so that no tenant's Secret
	// is ever read with the manager's rights (flag --require-service-account; multi-tenant installs).
	Required bool

	once    sync.Once
	clients *lru.Cache // "<namespace>/<serviceaccount>" -> client.Reader
}

// ServiceAccount returns the ServiceAccount (a name, in the Destination's namespace) whose rights read the
// Secrets of a Destination with spec.serviceAccountName named ("" none): named, else DefaultServiceAccount,
// else "" (the manager's rights).
func (t *TenantSecrets) ServiceAccount(named string) string {
	if named != "" {
		return named
	}
	return t.DefaultServiceAccount
}

// reader returns the reader of Secrets for a Destination of namespace ns whose Secrets are read as
// ServiceAccount sa ("" the manager: manager), and an error (errServiceAccountRequired) when sa is "" and
// Required. owner names the destination in the error.
func (t *TenantSecrets) reader(manager client.Reader, ns, sa, owner string) (client.Reader, error) {
	if sa == "" {
		if t.Required {
			return nil, fmt.Errorf("%w: %s names no spec.serviceAccountName and the manager has no default "+
				"(--default-service-account), while it reads tenants' Secrets only as a ServiceAccount of their "+
				"namespace (--require-service-account); set spec.serviceAccountName to a ServiceAccount of %s that may get "+
				"the Secrets it names; nothing is sent", errServiceAccountRequired, owner, ns)
		}
		return manager, nil
	}
	if t.Config == nil {
		return nil, fmt.Errorf("%w: %s reads its Secrets as ServiceAccount %s/%s, but this manager cannot impersonate "+
			"(no rest.Config); nothing is sent", errServiceAccountRequired, owner, ns, sa)
	}
	t.once.Do(func() { t.clients = lru.New(TenantClientCacheSize) })
	key := ns + "/" + sa
	if c, ok := t.clients.Get(key); ok {
		return c.(client.Reader), nil
	}
	cfg := rest.CopyConfig(t.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + sa}
	c, err := client.New(cfg, client.Options{Scheme: t.Scheme, Mapper: t.Mapper})
	if err != nil {
		return nil, fmt.Errorf("making the client that acts as ServiceAccount %s/%s: %w", ns, sa, err)
	}
	t.clients.Add(key, c)
	return c, nil
}

// secretsOf returns the reader of a destination's Secrets and the ServiceAccount it acts as ("" the manager):
// cluster for a ClusterDestination (the manager's rights), else a Destination of namespace ns with spec (its
// serviceAccountName, else DefaultServiceAccount). owner names the destination in errors. A nil t reads every
// destination's with manager (no impersonation configured: tests, and callers that predate it).
//
// A ServiceAccount is impersonated only once manager (the manager's APIReader: a live read) has found it in ns
// (serviceAccountExists): the API server does not check that an impersonated ServiceAccount exists, and gives
// the user system:serviceaccount:<ns>:<name> of any name the groups system:serviceaccounts,
// system:serviceaccounts:<ns> and system:authenticated, so a Destination naming a ServiceAccount that does not
// exist would read every Secret those groups (or a RoleBinding left behind for a deleted ServiceAccount) may
// get. A Destination that names no Secret reads nothing, so it impersonates no one and needs no check.
func (t *TenantSecrets) secretsOf(ctx context.Context, manager client.Reader, cluster bool, ns string,
	spec *actionsv1alpha1.DestinationSpec, owner string) (client.Reader, string, error) {
	if t == nil || cluster {
		return manager, "", nil
	}
	sa := t.ServiceAccount(spec.ServiceAccountName)
	if !namesSecrets(spec) && (sa != "" || t.Required) {
		// Nothing to read: Required guards the Secrets a Destination names, and this one names none (found by
		// the real-cluster suite: the shipped install, which sets Required, refused the sample Destination); and
		// a ServiceAccount is impersonated only to read a Secret.
		return noSecrets{}, sa, nil
	}
	r, err := t.reader(manager, ns, sa, owner)
	if err != nil || sa == "" {
		return r, sa, err
	}
	if err := serviceAccountExists(ctx, manager, ns, sa, owner); err != nil {
		return nil, sa, err
	}
	return r, sa, nil
}

// errServiceAccountNotFound marks a Destination whose Secrets would be read as a ServiceAccount that does not
// exist (or that the manager may not see): nothing is impersonated, read or sent (reason SecretNotAllowed).
var errServiceAccountNotFound = errors.New("service account not found")

// serviceAccountExists reads ServiceAccount ns/sa's metadata with manager (live, as the manager: its ClusterRole
// grants get on serviceaccounts) and returns errServiceAccountNotFound when it does not exist or the manager may
// not get it; another error (the API server unreachable) is returned wrapped, to be tried again.
func serviceAccountExists(ctx context.Context, manager client.Reader, ns, sa, owner string) error {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
	err := manager.Get(ctx, client.ObjectKey{Namespace: ns, Name: sa}, m)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s reads its Secrets as ServiceAccount %s/%s, which does not exist; the manager "+
			"impersonates only a ServiceAccount that exists (the API server would give any other name the groups "+
			"system:serviceaccounts, system:serviceaccounts:%s and system:authenticated, and the Secrets they may "+
			"read); create it, or name one that may get the Secrets (spec.serviceAccountName); nothing is sent",
			errServiceAccountNotFound, owner, ns, sa, ns)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w: %s reads its Secrets as ServiceAccount %s/%s, but the manager may not get that "+
			"ServiceAccount to check that it exists (grant the manager get on serviceaccounts, as its shipped "+
			"ClusterRole does); nothing is impersonated or sent", errServiceAccountNotFound, owner, ns, sa)
	default:
		return fmt.Errorf("checking that ServiceAccount %s/%s, whose rights read the Secrets of %s, exists: %w",
			ns, sa, owner, err)
	}
}

// namesSecrets reports whether spec names any Secret: auth (bearer token, basic, headers, OAuth2 client
// credentials), TLS material (CA bundle, client certificate) or a signing key.
func namesSecrets(spec *actionsv1alpha1.DestinationSpec) bool {
	return spec.Auth != nil || spec.Signing != nil ||
		(spec.TLS != nil && (spec.TLS.CABundle != nil || spec.TLS.ClientCertificate != nil))
}

// noSecrets is the reader of a Destination that names no Secret: any read is refused, so that a Secret named
// later (by a field namesSecrets does not know yet) is never read with the manager's rights.
type noSecrets struct{}

var errNamesNoSecret = fmt.Errorf("%w: this Destination names no Secret, so none is read", errServiceAccountRequired)

func (noSecrets) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return fmt.Errorf("reading %s: %w", key, errNamesNoSecret)
}

func (noSecrets) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errNamesNoSecret
}
