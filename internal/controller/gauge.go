package controller

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/subject"
)

// PhaseField indexes ExternalActions in the cache by status.phase, so that the gauge reads only the
// OutcomeUnknown ones instead of copying every cached action every Interval (docs/benchmarks.md).
const PhaseField = "status.phase"

// IndexPhase registers the PhaseField index with the manager's cache.
func IndexPhase(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &actionsv1alpha1.ExternalAction{}, PhaseField, func(o client.Object) []string {
		xa, ok := o.(*actionsv1alpha1.ExternalAction)
		if !ok {
			return nil
		}
		return []string{string(xa.Status.Phase)}
	})
}

// GaugeUpdater sets actionledger_outcome_unknown from the cache every Interval. It runs only on the leader.
// It also sets the subject gauges. Its Client must have the PhaseField index (IndexPhase) and the
// subject.WaitField index (subject.Index, registered by the ExternalAction controller's SetupWithManager).
type GaugeUpdater struct {
	Client   client.Reader
	Interval time.Duration
}

// Start implements manager.Runnable.
func (g *GaugeUpdater) Start(ctx context.Context) error {
	t := time.NewTicker(g.Interval)
	defer t.Stop()
	for {
		list := &actionsv1alpha1.ExternalActionList{}
		if err := g.Client.List(ctx, list, client.MatchingFields{PhaseField: string(actionsv1alpha1.PhaseOutcomeUnknown)},
			client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).V(1).Info("counting OutcomeUnknown actions failed", "err", err.Error())
		} else {
			metrics.OutcomeUnknown.Set(float64(len(list.Items)))
		}
		if err := subject.UpdateGauges(ctx, g.Client, time.Now()); err != nil {
			log.FromContext(ctx).V(1).Info("counting actions waiting for a subject failed", "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
