package controller

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/metrics"
)

// Egress check of the validator.
const (
	// egressLookupTimeout bounds resolving a destination's host name.
	egressLookupTimeout = 5 * time.Second
	// egressRecheckInterval is how often a destination whose URL host is a name is validated again, since
	// what the name resolves to changes without the object changing.
	egressRecheckInterval = 5 * time.Minute
)

// Resolver resolves host names to addresses; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DestinationReconciler validates Destinations and ClusterDestinations and reports the result as their
// Ready condition: the URL parses, its host is not refused by the egress policy, every Secret it names is
// readable and in the allowed namespace, and the post-check's CEL expressions compile. Actions do not
// depend on it: they validate again when they send, and the executor checks every dial.
type DestinationReconciler struct {
	client.Client
	// APIReader reads Secrets directly from the API server (they are not cached), with the manager's rights.
	APIReader client.Reader
	// Tenants reads a namespaced Destination's Secrets with the rights of its ServiceAccount, as the senders do
	// (nil: with APIReader).
	Tenants *destination.TenantSecrets
	// ControllerNamespace is where ClusterDestinations read Secrets.
	ControllerNamespace string
	// Exprs compiles CEL expressions.
	Exprs *expr.Cache
	// Egress is the manager's egress policy; nil skips the egress check.
	Egress *egress.Policy
	// Resolver resolves URL host names for the egress check; nil uses net.DefaultResolver.
	Resolver Resolver
	// Cluster selects ClusterDestination (true) or Destination (false).
	Cluster bool
	// InsecureSkipVerifyAllowed lets namespaced Destinations turn TLS verification off (manager flag
	// --insecure-skip-verify-allowed); without it such a Destination is Ready=False, reason
	// InsecureSkipVerifyNotAllowed.
	InsecureSkipVerifyAllowed bool
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool
	// Tokens is the senders' OAuth2 token cache; a deleted destination's entry is dropped from it (nil: none).
	Tokens *httpexec.TokenCache
}

// Reconcile validates one destination and writes its Ready condition when it changes.
func (r *DestinationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var obj client.Object
	var spec *actionsv1alpha1.DestinationSpec
	var status *actionsv1alpha1.DestinationStatus
	var selector *metav1.LabelSelector
	secretNS, id := req.Namespace, "Destination/"+req.Namespace+"/"+req.Name
	if r.Cluster {
		cd := &actionsv1alpha1.ClusterDestination{}
		obj, spec, status, secretNS, id = cd, &cd.Spec.DestinationSpec, &cd.Status, r.ControllerNamespace, "ClusterDestination/"+req.Name
	} else {
		d := &actionsv1alpha1.Destination{}
		obj, spec, status = d, &d.Spec, &d.Status
	}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted: its metric series go too, so a deleted tenant's destination does not stay in every scrape.
			metrics.ForgetDestination(id)
			if r.Tokens != nil {
				r.Tokens.Forget(id) // and its cached token, which nothing would ever use again
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	// Its metric series exist at zero from now on, so that alerts work before the first attempt.
	metrics.InitDestination(id)
	if cd, ok := obj.(*actionsv1alpha1.ClusterDestination); ok {
		selector = cd.Spec.NamespaceSelector
	}
	cond := metav1.Condition{Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid",
		Message: "the URL, Secrets and expressions are valid", ObservedGeneration: obj.GetGeneration()}
	recheck, err := r.validate(ctx, spec, secretNS, fmt.Sprintf("%s %s", kindOf(r.Cluster), req.String()))
	if err == nil && selector != nil {
		if _, serr := metav1.LabelSelectorAsSelector(selector); serr != nil {
			err = fmt.Errorf("spec.namespaceSelector: %w", serr)
		}
	}
	if err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, destination.Reason(err, "Invalid"), err.Error()
	}
	result := ctrl.Result{}
	if recheck {
		result.RequeueAfter = egressRecheckInterval
	}
	before := status.DeepCopy()
	status.ObservedGeneration = obj.GetGeneration()
	meta.SetStatusCondition(&status.Conditions, cond)
	if before.ObservedGeneration == status.ObservedGeneration && sameCondition(before.Conditions, cond) {
		return result, nil
	}
	if err := r.Status().Update(ctx, obj); err != nil {
		return ctrl.Result{}, ignoreConflict(err)
	}
	return result, nil
}

// validate checks spec; recheck reports that the URL host is a name, whose egress verdict may change.
func (r *DestinationReconciler) validate(ctx context.Context, spec *actionsv1alpha1.DestinationSpec, secretNS, owner string) (
	recheck bool, err error) {
	u, err := url.Parse(spec.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false, fmt.Errorf("spec.url %q is not an absolute http or https URL", spec.URL)
	}
	recheck, err = r.checkEgress(ctx, "spec.url", u.Hostname())
	if err != nil {
		return recheck, err
	}
	if a := spec.Auth; a != nil && a.OAuth2 != nil {
		tu, perr := url.Parse(a.OAuth2.TokenURL)
		if perr != nil || tu.Host == "" || (tu.Scheme != "http" && tu.Scheme != "https") || tu.User != nil {
			return recheck, fmt.Errorf("spec.auth.oauth2.tokenURL %q is not an absolute http or https URL without userinfo",
				a.OAuth2.TokenURL)
		}
		tokenRecheck, terr := r.checkEgress(ctx, "spec.auth.oauth2.tokenURL", tu.Hostname())
		recheck = recheck || tokenRecheck
		if terr != nil {
			return recheck, terr
		}
	}
	return recheck, r.validateRest(ctx, spec, secretNS, owner)
}

// checkEgress refuses (an error wrapping *egress.DeniedError) a URL host that is an IP literal the egress policy denies, or a
// name whose addresses are all denied. A name that does not resolve is not judged here: the attempt
// reports it as a DNS error. isName reports that host is a name.
func (r *DestinationReconciler) checkEgress(ctx context.Context, field, host string) (isName bool, err error) {
	if r.Egress == nil {
		return false, nil
	}
	if addr, perr := netip.ParseAddr(host); perr == nil {
		if derr := r.Egress.Check(addr); derr != nil {
			return false, fmt.Errorf("%s host %s: %w", field, host, derr)
		}
		return false, nil
	}
	var res Resolver = net.DefaultResolver
	if r.Resolver != nil {
		res = r.Resolver
	}
	lctx, cancel := context.WithTimeout(ctx, egressLookupTimeout)
	defer cancel()
	addrs, lerr := res.LookupNetIP(lctx, "ip", host)
	if lerr != nil || len(addrs) == 0 {
		return true, nil
	}
	var first error
	for _, a := range addrs {
		derr := r.Egress.Check(a)
		if derr == nil {
			return true, nil
		}
		if first == nil {
			first = derr
		}
	}
	return true, fmt.Errorf("%s host %s resolves only to denied addresses (%d); the first: %w", field, host, len(addrs), first)
}

func (r *DestinationReconciler) validateRest(ctx context.Context, spec *actionsv1alpha1.DestinationSpec, secretNS, owner string) error {
	if err := destination.CheckSpec(spec, owner, !r.Cluster, r.InsecureSkipVerifyAllowed); err != nil {
		return err
	}
	if rc := spec.Reconciliation; rc != nil {
		for field, src := range map[string]string{"applied": rc.Applied, "notApplied": rc.NotApplied} {
			if _, err := r.Exprs.Get(src); err != nil {
				return fmt.Errorf("spec.reconciliation.%s: %w", field, err)
			}
		}
	}
	return destination.CheckSecrets(ctx, r.Tenants, r.APIReader, r.Cluster, spec, secretNS, owner)
}

func sameCondition(conds []metav1.Condition, c metav1.Condition) bool {
	old := meta.FindStatusCondition(conds, c.Type)
	return old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message &&
		old.ObservedGeneration == c.ObservedGeneration
}

func kindOf(cluster bool) string {
	if cluster {
		return destination.KindClusterDestination
	}
	return "Destination"
}

// SetupWithManager registers the validator for Destinations or ClusterDestinations.
func (r *DestinationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		WithOptions(crcontroller.Options{SkipNameValidation: &r.SkipNameValidation})
	if r.Cluster {
		return b.For(&actionsv1alpha1.ClusterDestination{}).Named("clusterdestination").Complete(r)
	}
	return b.For(&actionsv1alpha1.Destination{}).Named("destination").Complete(r)
}
