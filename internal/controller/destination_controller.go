package controller

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/expr"
)

// DestinationReconciler validates Destinations and ClusterDestinations and reports the result as their
// Ready condition: the URL parses, every Secret it names is readable and in the allowed namespace, and the
// post-check's CEL expressions compile. Actions do not depend on it: they validate again when they send.
type DestinationReconciler struct {
	client.Client
	// APIReader reads Secrets directly from the API server (they are not cached).
	APIReader client.Reader
	// ControllerNamespace is where ClusterDestinations read Secrets.
	ControllerNamespace string
	// Exprs compiles CEL expressions.
	Exprs *expr.Cache
	// Cluster selects ClusterDestination (true) or Destination (false).
	Cluster bool
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool
}

// Reconcile validates one destination and writes its Ready condition when it changes.
func (r *DestinationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var obj client.Object
	var spec *actionsv1alpha1.DestinationSpec
	var status *actionsv1alpha1.DestinationStatus
	secretNS := req.Namespace
	if r.Cluster {
		cd := &actionsv1alpha1.ClusterDestination{}
		obj, spec, status, secretNS = cd, &cd.Spec, &cd.Status, r.ControllerNamespace
	} else {
		d := &actionsv1alpha1.Destination{}
		obj, spec, status = d, &d.Spec, &d.Status
	}
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cond := metav1.Condition{Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid",
		Message: "the URL, Secrets and expressions are valid", ObservedGeneration: obj.GetGeneration()}
	if err := r.validate(ctx, spec, secretNS, fmt.Sprintf("%s %s", kindOf(r.Cluster), req.String())); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "Invalid", err.Error()
		if errors.Is(err, errSecretNotAllowed) {
			cond.Reason = actionsv1alpha1.ReasonSecretNotAllowed
		}
	}
	before := status.DeepCopy()
	status.ObservedGeneration = obj.GetGeneration()
	meta.SetStatusCondition(&status.Conditions, cond)
	if before.ObservedGeneration == status.ObservedGeneration && sameCondition(before.Conditions, cond) {
		return ctrl.Result{}, nil
	}
	if err := r.Status().Update(ctx, obj); err != nil {
		return ctrl.Result{}, ignoreConflict(err)
	}
	return ctrl.Result{}, nil
}

func (r *DestinationReconciler) validate(ctx context.Context, spec *actionsv1alpha1.DestinationSpec, secretNS, owner string) error {
	u, err := url.Parse(spec.URL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("spec.url %q is not an absolute http or https URL", spec.URL)
	}
	if rc := spec.Reconciliation; rc != nil {
		for field, src := range map[string]string{"applied": rc.Applied, "notApplied": rc.NotApplied} {
			if _, err := r.Exprs.Get(src); err != nil {
				return fmt.Errorf("spec.reconciliation.%s: %w", field, err)
			}
		}
	}
	sr := secretReader{reader: r.APIReader, ctx: ctx, allowed: secretNS, owner: owner}
	if _, _, err := sr.authHeader(spec.Auth); err != nil {
		return err
	}
	if _, err := sr.tlsOptions(spec.TLS); err != nil {
		return err
	}
	return nil
}

func sameCondition(conds []metav1.Condition, c metav1.Condition) bool {
	old := meta.FindStatusCondition(conds, c.Type)
	return old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message &&
		old.ObservedGeneration == c.ObservedGeneration
}

func kindOf(cluster bool) string {
	if cluster {
		return kindClusterDestination
	}
	return "Destination"
}

// SetupWithManager registers the validator for Destinations or ClusterDestinations.
func (r *DestinationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		WithOptions(controller.Options{SkipNameValidation: &r.SkipNameValidation})
	if r.Cluster {
		return b.For(&actionsv1alpha1.ClusterDestination{}).Named("clusterdestination").Complete(r)
	}
	return b.For(&actionsv1alpha1.Destination{}).Named("destination").Complete(r)
}
