package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// labelStore is the tombstone store label: "objects" or "postgres".
const labelStore = "store"

var (
	// TombstoneStoreUp is 1 while the tombstone store answered its last operation (or health check), 0 after
	// it failed, by store ("objects" or "postgres"). 0 means first sends wait: a lookup that cannot be answered
	// is never taken as "absent".
	TombstoneStoreUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "actionledger_tombstone_store_up",
		Help: "1 if the tombstone store answered its last operation, 0 if it failed (first sends then wait), by store.",
	}, []string{labelStore})

	// TombstoneStoreErrors counts failed tombstone store operations, by store and operation (lookup, write,
	// expire, ping).
	TombstoneStoreErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actionledger_tombstone_store_errors_total",
		Help: "Failed tombstone store operations, by store and operation (lookup, write, expire, ping).",
	}, []string{labelStore, "op"})

	// TombstonesExpired counts tombstones deleted past their replay horizon by a batched expiry, by store.
	TombstonesExpired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "actionledger_tombstones_expired_total",
		Help: "Tombstones deleted past their replay horizon by the batched expiry, by store.",
	}, []string{labelStore})
)

// TombstoneOps are the op label values of TombstoneStoreErrors.
var TombstoneOps = []string{"lookup", "write", "expire", "ping"}

func init() {
	ctrlmetrics.Registry.MustRegister(TombstoneStoreUp, TombstoneStoreErrors, TombstonesExpired)
}

// InitTombstoneStore creates the series of store at zero (errors by operation, expired) and marks it up, so
// that alerts see the first failure.
func InitTombstoneStore(store string) {
	TombstoneStoreUp.WithLabelValues(store).Set(1)
	for _, op := range TombstoneOps {
		TombstoneStoreErrors.WithLabelValues(store, op)
	}
	TombstonesExpired.WithLabelValues(store)
}

// TombstoneStoreResult records the result of one store operation: up or down, and an error count on failure.
func TombstoneStoreResult(store, op string, err error) {
	if err != nil {
		TombstoneStoreUp.WithLabelValues(store).Set(0)
		TombstoneStoreErrors.WithLabelValues(store, op).Inc()
		return
	}
	TombstoneStoreUp.WithLabelValues(store).Set(1)
}
