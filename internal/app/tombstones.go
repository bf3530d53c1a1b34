package app

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/tombstone"
	"github.com/actionledger/actionledger/internal/tombstone/objects"
	"github.com/actionledger/actionledger/internal/tombstone/postgres"
)

// newTombstoneStore builds the store of o.TombstoneStore. For postgres it adds the store's Runnables to mgr
// (migrations and health on every replica, expiry on the leader) and chains the ActionTombstone objects behind
// it, so that tombstones written before a switch to PostgreSQL are honoured until they expire.
func newTombstoneStore(mgr ctrl.Manager, o Options, index *objects.Index, clk clock.Clock) (tombstone.Store, error) {
	store := &objects.Store{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Index: index}
	switch o.TombstoneStore {
	case "", tombstone.StoreObjects:
		metrics.InitTombstoneStore(tombstone.StoreObjects)
		return store, nil
	case tombstone.StorePostgres:
	default:
		return nil, fmt.Errorf("tombstone store %q: want %s or %s", o.TombstoneStore, tombstone.StoreObjects, tombstone.StorePostgres)
	}
	dsn := o.TombstoneStoreDSN
	if dsn == "" {
		if o.TombstoneStoreDSNFile == "" {
			return nil, fmt.Errorf("tombstone store %s needs a DSN: set --tombstone-store-dsn-file", tombstone.StorePostgres)
		}
		b, err := os.ReadFile(o.TombstoneStoreDSNFile)
		if err != nil {
			return nil, fmt.Errorf("reading the tombstone store DSN file: %w", err)
		}
		dsn = strings.TrimSpace(string(b))
	}
	po := o.Postgres
	if po.Now == nil {
		po.Now = clk.Now
	}
	if po.Log.GetSink() == nil {
		po.Log = ctrl.Log.WithName("tombstones")
		if o.Logger.GetSink() != nil {
			po.Log = o.Logger.WithName("tombstones")
		}
	}
	pg, err := postgres.New(dsn, po)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(pg); err != nil {
		return nil, fmt.Errorf("adding the tombstone store: %w", err)
	}
	if err := mgr.Add(pg.Expirer()); err != nil {
		return nil, fmt.Errorf("adding the tombstone expirer: %w", err)
	}
	return tombstone.Chain{Primary: pg, Fallback: store, Now: clk.Now}, nil
}
