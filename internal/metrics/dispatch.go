package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// InFlightSends is the number of sends running now in the dispatcher, by destination (DESIGN rule 10). The
	// series of a destination is deleted when it has nothing in flight and nothing queued.
	InFlightSends = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "actionledger_inflight_sends",
		Help: "Sends running now, by destination (bounded by the destination's maxInFlight).",
	}, []string{labelDestination})

	// QueuedSends is the number of claimed attempts waiting in the dispatcher for a free slot, by destination.
	// The series of a destination is deleted when it has nothing in flight and nothing queued.
	QueuedSends = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "actionledger_queued_sends",
		Help: "Claimed attempts waiting for a free in-flight slot, by destination.",
	}, []string{labelDestination})
)

func init() {
	ctrlmetrics.Registry.MustRegister(InFlightSends, QueuedSends)
}
