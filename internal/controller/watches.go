package controller

import (
	"context"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
)

// DestinationRefField indexes ExternalActions in the cache by the destination they reference, as
// "Destination/<name>" (in the action's namespace) or "ClusterDestination/<name>", so that a Destination or
// ClusterDestination event wakes exactly the actions that use it.
const DestinationRefField = "spec.destinationRef"

// destinationRefValue is the DestinationRefField value of a reference of kind to name.
func destinationRefValue(kind, name string) string {
	if kind == destination.KindClusterDestination {
		return destination.KindClusterDestination + "/" + name
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
// destination is seen at once, not on the next destination.Recheck.
func actionsUsingDestination(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, d client.Object) []reconcile.Request {
		return unfinishedUsing(ctx, c, d)
	}
}

func unfinishedUsing(ctx context.Context, c client.Reader, d client.Object) []reconcile.Request {
	list := &actionsv1alpha1.ExternalActionList{}
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if _, cluster := d.(*actionsv1alpha1.ClusterDestination); cluster {
		opts = append(opts, client.MatchingFields{DestinationRefField: destinationRefValue(destination.KindClusterDestination, d.GetName())})
	} else {
		opts = append(opts, client.InNamespace(d.GetNamespace()), client.MatchingFields{DestinationRefField: destinationRefValue("Destination", d.GetName())})
	}
	if err := c.List(ctx, list, opts...); err != nil {
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

// actionsUsingClusterDestinations maps a Namespace to the unfinished ExternalActions in it that reference a
// ClusterDestination (listed from the cache), so that they re-check its namespaceSelector.
func actionsUsingClusterDestinations(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, ns client.Object) []reconcile.Request {
		list := &actionsv1alpha1.ExternalActionList{}
		if err := c.List(ctx, list, client.InNamespace(ns.GetName()), client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).V(1).Info("listing actions of a relabelled namespace failed", "namespace", ns.GetName(), "err", err.Error())
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			xa := &list.Items[i]
			if xa.Spec.DestinationRef.Kind == destination.KindClusterDestination && !xa.Status.Phase.Terminal() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(xa)})
			}
		}
		return out
	}
}
