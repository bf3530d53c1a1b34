package metrics

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ReconcilesDominant reports actionledger_reconciles_dominant{namespace}: 1 for the namespace that the
// controller's fair workqueue (internal/fairqueue) holds to its dominant share of the reconcile workers
// (--dominant-reconciles) at the moment of the scrape, no series when none is. It is computed at each scrape from
// the queue's own state and clock, never set and left behind: once the other namespaces have had no request for
// the contention window (1 s), or another namespace's usage overtakes it, the series is gone from the next
// scrape. At most one series per queue (one namespace is dominant at a time), so its cardinality is that of the
// managers' queues in the process, not of the tenants.
var ReconcilesDominant = &dominantCollector{sources: map[int]func() string{}}

// dominantHelp is the HELP text of actionledger_reconciles_dominant.
const dominantHelp = "1 for the namespace held to the dominant share of the reconcile workers now (its reconciles took more than twice every other active namespace's worker time); no series when none is."

var dominantDesc = prometheus.NewDesc("actionledger_reconciles_dominant", dominantHelp, []string{"namespace"}, nil)

// dominantCollector is a prometheus.Collector over the fair workqueues of the process (one per manager; tests
// run several): each source returns its queue's dominant namespace now, or "".
type dominantCollector struct {
	mu      sync.Mutex
	next    int
	sources map[int]func() string
}

// Source adds a queue's dominant-namespace function to the metric, until the returned function removes it (the
// queue's shutdown). f must not call back into the collector.
func (c *dominantCollector) Source(f func() string) (remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.next
	c.next++
	c.sources[id] = f
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.sources, id)
	}
}

// Describe implements prometheus.Collector.
func (c *dominantCollector) Describe(ch chan<- *prometheus.Desc) { ch <- dominantDesc }

// Collect implements prometheus.Collector: one series for each namespace some queue holds to its dominant share
// now (the same namespace held by two managers of one process is one series).
func (c *dominantCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	fns := make([]func() string, 0, len(c.sources))
	for _, f := range c.sources {
		fns = append(fns, f)
	}
	c.mu.Unlock()
	var held []string
	for _, f := range fns {
		if ns := f(); ns != "" && !slices.Contains(held, ns) {
			held = append(held, ns)
		}
	}
	for _, ns := range held {
		ch <- prometheus.MustNewConstMetric(dominantDesc, prometheus.GaugeValue, 1, ns)
	}
}

func init() { ctrlmetrics.Registry.MustRegister(ReconcilesDominant) }
