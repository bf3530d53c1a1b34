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

	// WaitingRequests is the number of requests (attempts, post-checks, dead-letter deliveries) parked in a
	// destination's waiting room (internal/waitroom), by destination and the capacity they wait for: "slot" (room
	// under maxInFlight, woken by a completion) or "time" (a rate-limit token, the retry budget, a Retry-After
	// pause's end or the shard's share, woken at the time the limiter gives). The series of a destination is
	// deleted when nothing waits there for that capacity.
	WaitingRequests = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "actionledger_waiting_requests",
		Help: "Requests parked in the destination's waiting room, by destination and the capacity they wait for (slot or time).",
	}, []string{labelDestination, "capacity"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(InFlightSends, QueuedSends, WaitingRequests)
}

// ReconcilesParked is the number of ExternalAction reconcile requests held back in their namespace's backlog
// because the namespace has its fair share of the reconcile workers' queue admitted (internal/fairqueue). A
// namespace's burst shows here, not in workqueue_depth, while other namespaces' requests go ahead of it.
var ReconcilesParked = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "actionledger_reconciles_parked",
	Help: "ExternalAction reconcile requests held in their namespace's backlog for the workqueue's fair share per namespace.",
})

func init() { ctrlmetrics.Registry.MustRegister(ReconcilesParked) }
