package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// ShardMembers is the number of live shards (managers started with --watch-label-selector) this manager
	// sees, itself included (internal/shard). Absent without sharding.
	ShardMembers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "actionledger_shard_members",
		Help: "Live shards (sharded managers) seen by this manager, itself included.",
	})

	// ShardShare is the fraction of a destination's rateLimit, retry-budget floor and maxInFlight this
	// manager takes (1/n with n the shards using the destination), by destination. Absent without sharding.
	ShardShare = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "actionledger_shard_destination_share",
		Help: "Fraction of a destination's limits this shard takes (1/shards using it), by destination.",
	}, []string{labelDestination})
)

func init() {
	ctrlmetrics.Registry.MustRegister(ShardMembers, ShardShare)
}
