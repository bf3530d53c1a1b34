// Package postgres keeps tombstones in PostgreSQL (manager flag --tombstone-store=postgres): one row per
// (namespace, name) in the table actionledger_tombstones, with the fields of an ActionTombstone's spec, so that
// identity beyond the object does not grow etcd (docs/tombstones.md, docs/scale.md).
//
// The schema is created and upgraded at start by goose (github.com/pressly/goose/v3) from the SQL files
// embedded in migrations/, under a PostgreSQL session advisory lock (two managers starting at once migrate
// once), with goose's version table named actionledger_goose_db_version. Connections are a pgx pool
// (github.com/jackc/pgx/v5/pgxpool); every operation is bounded by Options.OpTimeout, so a database that does
// not answer makes a lookup fail fast ("unknown") instead of holding a reconcile worker.
//
// Writes are one transaction: INSERT ... ON CONFLICT DO NOTHING, and on a conflict SELECT ... FOR UPDATE and an
// UPDATE when tombstone.NeedsWrite says so, so concurrent writers of one key (two managers during a shard move)
// serialize on the row. Expiry deletes rows past expires_at in batches through the expires_at index
// (DELETE ... WHERE ctid = ANY(ARRAY(SELECT ctid ... LIMIT n)), a TID scan), re-checking expires_at on the
// row it deletes, so a row extended meanwhile is kept.
package postgres

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/tombstone"
)

// Table is the tombstone table (the scale bench reads its size with pg_total_relation_size).
const Table = "actionledger_tombstones"

// VersionTable is goose's version table for the migrations of this package.
const VersionTable = "actionledger_goose_db_version"

// lockID is the advisory lock key migrations hold (a constant of our own, not goose's default, so that an
// application's own goose migrations in the same database do not wait for ours).
const lockID int64 = 0x6163746c65646772 // "actledgr"

//go:embed migrations/*.sql
var migrations embed.FS

// Defaults of Options.
const (
	DefaultOpTimeout      = 3 * time.Second
	DefaultConnectTimeout = 2 * time.Second
	DefaultExpireInterval = time.Minute
	DefaultExpireBatch    = 1000
	DefaultPingInterval   = 10 * time.Second
)

// ErrNotMigrated is returned by Lookup and Write until the schema has been migrated (Migrate or Start).
var ErrNotMigrated = errors.New("the tombstone table is not migrated yet")

// Options tune a Store; zero values take the defaults above.
type Options struct {
	// OpTimeout bounds each lookup, write, expiry batch and ping.
	OpTimeout time.Duration
	// ExpireInterval is how often the Expirer deletes expired rows.
	ExpireInterval time.Duration
	// ExpireBatch is the number of rows one DELETE removes.
	ExpireBatch int
	// PingInterval is how often Start checks the database (metric actionledger_tombstone_store_up).
	PingInterval time.Duration
	// Now is the clock of the expiry (default time.Now).
	Now func() time.Time
	// Log receives migration and availability messages; never the DSN.
	Log logr.Logger
}

// Store is the PostgreSQL tombstone store.
type Store struct {
	pool     *pgxpool.Pool
	o        Options
	migrated atomic.Bool
}

var _ tombstone.Store = (*Store)(nil)

// New returns a store on the database of dsn (a libpq URL or key=value string, as pgx parses it) without
// connecting: Migrate, or Start as a manager Runnable, creates the schema. The error never contains the DSN.
func New(dsn string, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message quotes the connection string (password redacted); ours says less on purpose.
		return nil, errors.New("parsing the tombstone store DSN: not a valid PostgreSQL connection string")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the tombstone store pool: %w", err)
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.ExpireInterval <= 0 {
		o.ExpireInterval = DefaultExpireInterval
	}
	if o.ExpireBatch <= 0 {
		o.ExpireBatch = DefaultExpireBatch
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	metrics.InitTombstoneStore(tombstone.StorePostgres)
	return &Store{pool: pool, o: o}, nil
}

// Open is New followed by Migrate; on a failed migration the pool is closed.
func Open(ctx context.Context, dsn string, o Options) (*Store, error) {
	s, err := New(dsn, o)
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Name is tombstone.StorePostgres.
func (s *Store) Name() string { return tombstone.StorePostgres }

// Migrate applies the embedded migrations that are not applied yet (none on a restart), holding the advisory
// lock so that concurrent managers migrate once.
func (s *Store) Migrate(ctx context.Context) error {
	db := stdlib.OpenDBFromPool(s.pool)
	defer func() { _ = db.Close() }() // does not close the pool
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		return fmt.Errorf("goose store: %w", err)
	}
	// Another replica migrating holds the lock: ask again every second, for up to 5 minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("goose locker: %w", err)
	}
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	p, err := goose.NewProvider("", db, fsys, goose.WithStore(store), goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("goose provider: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrating the tombstone store: %w", err)
	}
	for _, r := range results {
		s.o.Log.Info("tombstone store migrated", "version", r.Source.Version, "file", r.Source.Path,
			"duration", r.Duration)
	}
	s.migrated.Store(true)
	return nil
}

// Start migrates (retrying with a growing delay while the database cannot be reached), then checks the
// database every PingInterval for the metric, until ctx ends; then it closes the pool. It is a manager
// Runnable that runs on every replica (NeedLeaderElection false).
func (s *Store) Start(ctx context.Context) error {
	defer s.Close()
	delay := time.Second
	for !s.migrated.Load() {
		err := s.Migrate(ctx)
		if err == nil {
			break
		}
		metrics.TombstoneStoreResult(tombstone.StorePostgres, "ping", err)
		s.o.Log.Error(err, "tombstone store not migrated; first sends wait", "retryIn", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
	metrics.TombstoneStoreResult(tombstone.StorePostgres, "ping", nil)
	t := time.NewTicker(s.o.PingInterval)
	defer t.Stop()
	up := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, s.o.OpTimeout)
		err := s.pool.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		metrics.TombstoneStoreResult(tombstone.StorePostgres, "ping", err)
		if (err == nil) != up {
			up = err == nil
			// Detail only: the controller logs one Info line when an operation first fails and one when it is
			// answered again (with the number of actions that waited); the metric shows the rest.
			if up {
				s.o.Log.V(1).Info("tombstone store ping answered again")
			} else {
				s.o.Log.V(1).Info("tombstone store ping not answered", "err", err.Error())
			}
		}
	}
}

// NeedLeaderElection is false: every replica migrates and reports the store's health.
func (s *Store) NeedLeaderElection() bool { return false }

const columns = `key, fingerprint, phase, status_code, response, uid, completed_at, expires_at`

// Lookup returns the row of xa's namespace/name, nil when there is none, or the error that kept it from
// answering (ErrNotMigrated before the schema exists).
func (s *Store) Lookup(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (*tombstone.Record, error) {
	metrics.TombstoneLookups.WithLabelValues(tombstone.StorePostgres).Inc()
	if !s.migrated.Load() {
		return nil, ErrNotMigrated
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.OpTimeout)
	defer cancel()
	rec, err := scanRecord(s.pool.QueryRow(ctx,
		`SELECT `+columns+` FROM `+Table+` WHERE namespace = $1 AND name = $2`, xa.Namespace, xa.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up the tombstone of %s/%s: %w", xa.Namespace, xa.Name, err)
	}
	rec.Namespace, rec.Name = xa.Namespace, xa.Name
	return rec, nil
}

// Write inserts rec, or on an existing row of the same key updates it when tombstone.NeedsWrite says so, in
// one transaction (see the package doc). Times are stored in whole seconds, as the API server keeps them.
func (s *Store) Write(ctx context.Context, rec *tombstone.Record, writer types.UID) error {
	if !s.migrated.Load() {
		return ErrNotMigrated
	}
	spec := normalize(rec.Spec)
	var resp []byte
	if spec.Response != nil {
		b, err := json.Marshal(spec.Response)
		if err != nil {
			return fmt.Errorf("encoding the tombstone's response: %w", err)
		}
		resp = b
	}
	args := []any{rec.Namespace, rec.Name, spec.Key, spec.Fingerprint, string(spec.Phase), spec.StatusCode, resp,
		spec.UID, timePtr(spec.CompletedAt), spec.ExpiresAt.Time}
	ctx, cancel := context.WithTimeout(ctx, s.o.OpTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Twice at most: a row deleted by the expiry between the INSERT and the SELECT is inserted again.
		for range 2 {
			tag, err := tx.Exec(ctx, `INSERT INTO `+Table+` (namespace, name, `+columns+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (namespace, name) DO NOTHING`, args...)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				return nil
			}
			cur, err := scanRecord(tx.QueryRow(ctx,
				`SELECT `+columns+` FROM `+Table+` WHERE namespace = $1 AND name = $2 FOR UPDATE`, rec.Namespace, rec.Name))
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			if !tombstone.NeedsWrite(&cur.Spec, &spec, writer) {
				return nil
			}
			_, err = tx.Exec(ctx, `UPDATE `+Table+` SET key = $3, fingerprint = $4, phase = $5, status_code = $6,
				response = $7, uid = $8, completed_at = $9, expires_at = $10, updated_at = now()
				WHERE namespace = $1 AND name = $2`, args...)
			return err
		}
		return errors.New("the row was deleted twice while being written")
	})
	if err != nil {
		return fmt.Errorf("writing the tombstone of %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	return nil
}

// Expire deletes up to limit rows whose expires_at is at or before now, in one statement.
func (s *Store) Expire(ctx context.Context, now time.Time, limit int) (int, error) {
	if !s.migrated.Load() {
		return 0, ErrNotMigrated
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.OpTimeout)
	defer cancel()
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+Table+` WHERE ctid = ANY(ARRAY(
		SELECT ctid FROM `+Table+` WHERE expires_at <= $1 LIMIT $2)) AND expires_at <= $1`, now, limit)
	if err != nil {
		return 0, fmt.Errorf("expiring tombstones: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// ExpireAll deletes every row expired at now, ExpireBatch rows a statement, and returns how many it deleted.
func (s *Store) ExpireAll(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		n, err := s.Expire(ctx, now, s.o.ExpireBatch)
		total += n
		if n > 0 {
			metrics.TombstonesExpired.WithLabelValues(tombstone.StorePostgres).Add(float64(n))
		}
		if err != nil || n < s.o.ExpireBatch || ctx.Err() != nil {
			return total, err
		}
	}
}

// Expirer returns the manager Runnable that runs ExpireAll every ExpireInterval on the leader.
func (s *Store) Expirer() *Expirer { return &Expirer{s: s} }

// Expirer deletes expired tombstones periodically (a leader-elected manager Runnable).
type Expirer struct{ s *Store }

// NeedLeaderElection is true: one replica expires.
func (e *Expirer) NeedLeaderElection() bool { return true }

// Start runs until ctx ends.
func (e *Expirer) Start(ctx context.Context) error {
	t := time.NewTicker(e.s.o.ExpireInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !e.s.migrated.Load() {
			continue
		}
		n, err := e.s.ExpireAll(ctx, e.s.o.Now())
		if ctx.Err() != nil {
			return nil
		}
		metrics.TombstoneStoreResult(tombstone.StorePostgres, "expire", err)
		switch {
		case err != nil && !failing:
			// An expected outage (docs/tombstones.md): Info without a stack trace, once until it works again.
			e.s.o.Log.Info("Expiring tombstones failed; retrying every interval", "deleted", n, "interval", e.s.o.ExpireInterval,
				"err", err.Error())
		case err != nil:
			e.s.o.Log.V(1).Info("expiring tombstones still fails", "deleted", n, "err", err.Error())
		case failing:
			e.s.o.Log.Info("expiring tombstones works again", "deleted", n)
		case n > 0:
			e.s.o.Log.V(1).Info("expired tombstones", "deleted", n)
		}
		failing = err != nil
	}
}

func scanRecord(row pgx.Row) (*tombstone.Record, error) {
	var (
		rec       tombstone.Record
		phase     string
		resp      []byte
		completed *time.Time
		expires   time.Time
	)
	sp := &rec.Spec
	if err := row.Scan(&sp.Key, &sp.Fingerprint, &phase, &sp.StatusCode, &resp, &sp.UID, &completed, &expires); err != nil {
		return nil, err
	}
	sp.Phase = actionsv1alpha1.Phase(phase)
	sp.ExpiresAt = metav1.NewTime(expires)
	if completed != nil {
		t := metav1.NewTime(*completed)
		sp.CompletedAt = &t
	}
	if resp != nil {
		sp.Response = &actionsv1alpha1.ResponseRecord{}
		if err := json.Unmarshal(resp, sp.Response); err != nil {
			return nil, fmt.Errorf("decoding the tombstone's response: %w", err)
		}
	}
	return &rec, nil
}

// normalize cuts the times to whole seconds, as an ActionTombstone's spec holds them after the API server's
// round trip (RFC 3339 without fractions), so a replay from either store carries the same values.
func normalize(spec actionsv1alpha1.ActionTombstoneSpec) actionsv1alpha1.ActionTombstoneSpec {
	spec.ExpiresAt = metav1.NewTime(spec.ExpiresAt.Truncate(time.Second))
	if spec.CompletedAt != nil {
		t := metav1.NewTime(spec.CompletedAt.Truncate(time.Second))
		spec.CompletedAt = &t
	}
	return spec
}

func timePtr(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	return &t.Time
}
