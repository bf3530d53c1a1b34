package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the gateway's Prometheus metrics, on their own registry (served by the gateway's /metrics, not
// the manager's).
//
//   - actionledger_gateway_requests_total{method,code}: answered requests.
//   - actionledger_gateway_time_to_first_byte_seconds{method,code}: from the request to the answer's header.
//   - actionledger_gateway_replays_total{source}: answers repeating a recorded outcome; source is "object"
//     (status.response of the live ExternalAction) or "tombstone" (the ActionTombstone of a collected one).
//   - actionledger_gateway_waits_total{result}: waits for a terminal phase (Prefer: wait); result is
//     "terminal" (answered with the outcome) or "timeout" (answered 202).
//   - actionledger_gateway_wait_duration_seconds{result}: how long those waits took.
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec
	ttfb     *prometheus.HistogramVec
	replays  *prometheus.CounterVec
	waits    *prometheus.CounterVec
	waitDur  *prometheus.HistogramVec
}

// NewMetrics registers the gateway's metrics, the Go runtime's and the process's on a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actionledger_gateway_requests_total", Help: "Requests answered by the gateway, by method and code.",
		}, []string{"method", "code"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "actionledger_gateway_time_to_first_byte_seconds",
			Help:    "Time from the request to the answer's status line, by method and code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"method", "code"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actionledger_gateway_replays_total",
			Help: "Answers that repeated a recorded outcome, by source (object or tombstone).",
		}, []string{"source"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "actionledger_gateway_waits_total",
			Help: "Waits for a terminal phase, by result (terminal or timeout).",
		}, []string{"result"}),
		waitDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "actionledger_gateway_wait_duration_seconds",
			Help:    "Duration of the waits for a terminal phase, by result.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"result"}),
	}
	m.Registry.MustRegister(m.requests, m.ttfb, m.replays, m.waits, m.waitDur,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// instrument counts h's answers and observes their time to first byte.
func (m *Metrics) instrument(h http.Handler) http.Handler {
	return promhttp.InstrumentHandlerCounter(m.requests, promhttp.InstrumentHandlerTimeToWriteHeader(m.ttfb, h))
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
