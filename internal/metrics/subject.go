package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of spec.subject: actions that wait for another action of their namespace on the same business object.
var (
	// SubjectWaiting is the number of actions waiting for their subject (reasons WaitingForSubject and
	// SubjectOutcomeUnknown), as seen by this manager's cache.
	SubjectWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "actionledger_subject_waiting",
		Help: "Actions waiting for another action on the same spec.subject (reasons WaitingForSubject and SubjectOutcomeUnknown).",
	})

	// SubjectBlockedByUnknown is the longest time, in seconds, that any action has waited behind an
	// OutcomeUnknown holder of its subject (0 when none does), as seen by this manager's cache.
	SubjectBlockedByUnknown = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "actionledger_subject_blocked_by_unknown_seconds",
		Help: "The longest time, in seconds, that an action has waited behind an OutcomeUnknown holder of its spec.subject (0: none).",
	})

	// SubjectWait observes how long an action waited for its subject, in seconds, when it takes the subject.
	SubjectWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "actionledger_subject_wait_seconds",
		Help:    "How long an action waited for its spec.subject before it took it, in seconds.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 20),
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(SubjectWaiting, SubjectBlockedByUnknown, SubjectWait)
}
