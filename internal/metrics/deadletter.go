package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// DeadLetterDeliveries counts the recorded outcomes of dead-letter deliveries (internal/deadletter) by sink and
// outcome: Delivered, Retried (an attempt failed and the next one is scheduled), Failed, Uncertain (not sent
// again: the sink may have it), Refused (the sink cannot be used; nothing was sent) and GivenUp (a person gave the
// record up, or its namespace was deleted while the sink could not be used).
var DeadLetterDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "actionledger_dead_letter_deliveries_total",
	Help: "Dead-letter delivery outcomes by sink destination and outcome (Delivered, Retried, Failed, Uncertain, Refused, GivenUp).",
}, []string{"destination", "outcome"})

// DeadLetterOutcomes are the values of DeadLetterDeliveries' outcome label; every destination (a possible sink)
// has their series from its first validation (InitDestination).
var DeadLetterOutcomes = []string{"Delivered", "Retried", "Failed", "Uncertain", "Refused", "GivenUp"}

func init() {
	ctrlmetrics.Registry.MustRegister(DeadLetterDeliveries)
}
