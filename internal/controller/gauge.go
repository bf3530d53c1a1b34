package controller

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/metrics"
)

// GaugeUpdater sets actionledger_outcome_unknown from the cache every Interval. It runs only on the leader.
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
		if err := g.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).V(1).Info("counting OutcomeUnknown actions failed", "err", err.Error())
		} else {
			n := 0
			for i := range list.Items {
				if list.Items[i].Status.Phase == actionsv1alpha1.PhaseOutcomeUnknown {
					n++
				}
			}
			metrics.OutcomeUnknown.Set(float64(n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
