package controller

import (
	"context"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
)

// DestinationRefField indexes ExternalActions in the cache by the destination they reference, as
// "Destination/<name>" (in the action's namespace) or "ClusterDestination/<name>", so that a Destination or
// ClusterDestination event wakes exactly the actions that use it.
const DestinationRefField = "spec.destinationRef"

// destinationRefValue is the DestinationRefField value of a reference of kind to name.
func destinationRefValue(kind, name string) string {
	if kind == kindClusterDestination {
		return kindClusterDestination + "/" + name
	}
	return "Destination/" + name
}

// IndexDestinationRef registers the DestinationRefField index with the manager's cache.
func IndexDestinationRef(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &actionsv1alpha1.ExternalAction{}, DestinationRefField, func(o client.Object) []string {
		xa, ok := o.(*actionsv1alpha1.ExternalAction)
		if !ok {
			return nil
		}
		return []string{destinationRefValue(xa.Spec.DestinationRef.Kind, xa.Spec.DestinationRef.Name)}
	})
}

// actionsUsingDestination maps a Destination or ClusterDestination (any change, its Ready condition included)
// to the unfinished ExternalActions that reference it, listed from the cache by DestinationRefField: a fixed
// destination is seen at once, not on the next destinationRecheck.
func (r *ExternalActionReconciler) actionsUsingDestination(ctx context.Context, d client.Object) []reconcile.Request {
	list := &actionsv1alpha1.ExternalActionList{}
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if _, cluster := d.(*actionsv1alpha1.ClusterDestination); cluster {
		opts = append(opts, client.MatchingFields{DestinationRefField: destinationRefValue(kindClusterDestination, d.GetName())})
	} else {
		opts = append(opts, client.InNamespace(d.GetNamespace()), client.MatchingFields{DestinationRefField: destinationRefValue("Destination", d.GetName())})
	}
	if err := r.List(ctx, list, opts...); err != nil {
		log.FromContext(ctx).V(1).Info("listing the actions of a destination failed", "destination", klog.KObj(d), "err", err.Error())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if xa := &list.Items[i]; !xa.Status.Phase.Terminal() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(xa)})
		}
	}
	return out
}

// logOutcome logs one attempt's recorded outcome at info level: the action (klog.KObj), the attempt, the
// destination, the result class, the status code or error class, and the attempt's duration. Never a
// header value or a body: a destination may echo a secret there (DESIGN rule 11).
func logOutcome(ctx context.Context, cur *actionsv1alpha1.ExternalAction, attempt int32, o ledger.Outcome) {
	kv := []any{"attempt", attempt, "destination", destinationID(cur), "result", string(o.Class)}
	if o.StatusCode != 0 {
		kv = append(kv, "statusCode", o.StatusCode)
	}
	if o.ErrorClass != "" {
		kv = append(kv, "errorClass", o.ErrorClass)
	}
	if c := cur.Status.Claim; c != nil && c.Attempt == attempt && !o.FinishedAt.IsZero() {
		kv = append(kv, "duration", o.FinishedAt.Sub(c.StartedAt.Time).String())
	}
	log.FromContext(ctx).Info("attempt finished", kv...)
}

// logPhaseChange logs a written phase change at info level with the condition reason that explains it.
func logPhaseChange(ctx context.Context, xa *actionsv1alpha1.ExternalAction, prev actionsv1alpha1.Phase, destID string) {
	if destID == "" {
		destID = destinationID(xa)
	}
	reason := ""
	for _, c := range xa.Status.Conditions {
		if c.Type == actionsv1alpha1.ConditionReady {
			reason = c.Reason
		}
	}
	log.FromContext(ctx).Info("phase changed", "externalaction", klog.KObj(xa), "from", string(prev), "to", string(xa.Status.Phase),
		"reason", reason, "attempts", xa.Status.Attempts, "destination", destID)
}

// unstall makes step end a stall on the destination when unblocked (ledger.Unblock of the stored status) is
// not nil: a step that writes nothing writes unblocked (a claim step always writes), and a written status
// drops the stall's message from lastError (staleErr), which ledger.Blocked put there.
func unstall(step ledger.Step, unblocked *actionsv1alpha1.ExternalActionStatus, staleErr string) ledger.Step {
	if unblocked == nil {
		return step
	}
	if step.Status == nil {
		step.Status = unblocked.DeepCopy()
		return step
	}
	if staleErr != "" && step.Status.LastError == staleErr {
		step.Status.LastError = ""
	}
	return step
}
