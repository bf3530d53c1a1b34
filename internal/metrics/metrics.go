// Package metrics defines actionledger's Prometheus metrics (CONTRACT "Metrics") on controller-runtime's
// registry, served on the manager's metrics endpoint. Labels are low-cardinality: the destination
// ("Destination/<namespace>/<name>" or "ClusterDestination/<name>"), a result class or a decision; never
// an action's key or name.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/retry"
)

// labelDestination is the destination label ("Destination/<namespace>/<name>" or "ClusterDestination/<name>").
const labelDestination = "destination"

var (
	// Attempts counts attempts sent, by destination and result class (Success, Rejected, Retryable,
	// InProgress, NotSent, Uncertain).
	Attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actionledger_attempts_total",
		Help: "Attempts sent to destinations, by destination and result class.",
	}, []string{labelDestination, "result"})

	// Retries counts attempts after the first, by destination.
	Retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actionledger_retries_total",
		Help: "Attempts after an action's first attempt, by destination.",
	}, []string{labelDestination})

	// Replays counts outcomes returned without a send (from a tombstone).
	Replays = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "actionledger_replays_total",
		Help: "Recorded outcomes returned without a send (tombstone replays).",
	})

	// TombstoneLookups counts first-sight tombstone lookups by how they were answered: "index" (proven absent
	// without a read, objects.Index) or "live" (a GET from the API server).
	TombstoneLookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actionledger_tombstone_lookups_total",
		Help: "First-sight tombstone lookups, by source: index (proven absent without a read) or live (a GET).",
	}, []string{"source"})

	// FingerprintConflicts counts keys refused because they are bound to another fingerprint.
	FingerprintConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "actionledger_fingerprint_conflicts_total",
		Help: "Actions refused because their key is bound to a different fingerprint.",
	})

	// OutcomeUnknown is the number of actions currently in phase OutcomeUnknown (as seen by this manager's cache).
	OutcomeUnknown = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "actionledger_outcome_unknown",
		Help: "Actions currently in phase OutcomeUnknown, waiting for a person's decision.",
	})

	// Exhausted counts actions that ended Exhausted (the dead-letter disposition), by destination.
	Exhausted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actionledger_exhausted_total",
		Help: "Actions that ended Exhausted (attempts, deadline or budget ran out), by destination.",
	}, []string{labelDestination})

	// ManualResolutions counts people's decisions, by decision (applied, not-applied, retry).
	ManualResolutions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actionledger_manual_resolutions_total",
		Help: "Decisions made by people with the resolve annotation, by decision.",
	}, []string{"decision"})

	// ReconciliationDuration observes one reconcile of an ExternalAction, in seconds.
	ReconciliationDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "actionledger_reconciliation_duration_seconds",
		Help:    "Duration of one ExternalAction reconcile, in seconds (the destination call is not included: sends run in the dispatcher).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})

	// ActionDuration observes creation to terminal phase, in seconds, by phase.
	ActionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "actionledger_action_duration_seconds",
		Help:    "Time from an ExternalAction's creation to its terminal phase, in seconds, by phase.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 20),
	}, []string{"phase"})

	// AttemptDuration observes one attempt, from its claim to its outcome, in seconds, by destination: the
	// destination's latency as actionledger sees it (a timeout observes the attempt timeout).
	AttemptDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "actionledger_attempt_duration_seconds",
		Help:    "Duration of one attempt, from its claim to its outcome, in seconds, by destination.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{labelDestination})

	// Delayed counts admissions refused by a destination's rate limit, pause or retry budget, by destination and reason.
	Delayed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actionledger_delayed_total",
		Help: "Sends delayed by a destination's rate limit, Retry-After pause or retry budget, by destination and reason.",
	}, []string{labelDestination, "reason"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Attempts, Retries, Replays, TombstoneLookups, FingerprintConflicts, OutcomeUnknown,
		Exhausted, ManualResolutions, ReconciliationDuration, ActionDuration, Delayed, AttemptDuration)
	// Every decision's series exists at zero from the start, so that rate() and increase() alerts see the
	// first decision (a series that appears with its first increment hides it).
	for _, d := range []string{actionsv1alpha1.DecisionApplied, actionsv1alpha1.DecisionNotApplied, actionsv1alpha1.DecisionRetry} {
		ManualResolutions.WithLabelValues(d)
	}
}

// attemptResults are the result label values of Attempts (package retry's classes).
var attemptResults = []retry.Class{retry.ClassSuccess, retry.ClassRejected, retry.ClassRetryable, retry.ClassInProgress,
	retry.ClassNotSent, retry.ClassUncertain}

// delayedReasons are the reason label values of Delayed (api/v1alpha1 condition reasons).
var delayedReasons = []string{actionsv1alpha1.ReasonRateLimited, actionsv1alpha1.ReasonRetryBudgetExhausted,
	actionsv1alpha1.ReasonConcurrencyLimited}

// InitDestination creates the per-destination series of the destination id at zero (attempts by result,
// retries, exhausted, delayed by reason, attempt duration), so that alerts and dashboards see a destination
// from its first validation, before its first attempt. It is idempotent; ForgetDestination undoes it.
func InitDestination(id string) {
	for _, c := range attemptResults {
		Attempts.WithLabelValues(id, string(c))
	}
	for _, r := range delayedReasons {
		Delayed.WithLabelValues(id, r)
	}
	Retries.WithLabelValues(id)
	Exhausted.WithLabelValues(id)
	AttemptDuration.WithLabelValues(id)
	for _, o := range DeadLetterOutcomes {
		DeadLetterDeliveries.WithLabelValues(id, o)
	}
}

// ForgetDestination deletes every series of the destination id ("Destination/<namespace>/<name>" or
// "ClusterDestination/<name>") from the per-destination metrics, when that destination is deleted. It returns the
// number of series deleted. An attempt still in flight when the destination is deleted may record one series
// again; it goes with the manager's next restart.
func ForgetDestination(id string) int {
	match := prometheus.Labels{labelDestination: id}
	n := 0
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{Attempts, Retries, Exhausted, AttemptDuration, Delayed, DeadLetterDeliveries} {
		n += v.DeletePartialMatch(match)
	}
	return n
}
