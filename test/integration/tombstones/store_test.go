// Package tombstones tests the two tombstone stores, ActionTombstone objects (a real kube-apiserver and etcd)
// and PostgreSQL (a throwaway cluster, test/pgtest), by the same tables: the store's contract, and DESIGN rules
// 6-8 through the real manager. It also tests what happens while PostgreSQL is unreachable.
package tombstones

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/tombstone"
	"github.com/actionledger/actionledger/internal/tombstone/objects"
	"github.com/actionledger/actionledger/internal/tombstone/postgres"
	"github.com/actionledger/actionledger/test/envtestutil"
	"github.com/actionledger/actionledger/test/pgtest"
)

// env is the real control plane shared by this package's tests.
var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

// backend opens a store the way a manager does; open may be called again for a second manager's instance of
// the same store.
type backend struct {
	name string
	// setup prepares one test: the namespace to use and an opener of store instances.
	setup func(t *testing.T) (ns string, open func() tombstone.Store)
}

var backends = []backend{
	{name: tombstone.StoreObjects, setup: func(t *testing.T) (string, func() tombstone.Store) {
		ns := env.Namespace(t)
		return ns, func() tombstone.Store { return &objects.Store{Client: env.Client, Reader: env.Client} }
	}},
	{name: tombstone.StorePostgres, setup: func(t *testing.T) (string, func() tombstone.Store) {
		srv := pgtest.StartT(t)
		return "shop", func() tombstone.Store { return openPG(t, srv.DSN()) }
	}},
}

// openPG opens (and migrates) a PostgreSQL store, closed when the test ends.
func openPG(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func xaRef(ns, name string) *actionsv1alpha1.ExternalAction {
	return &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func secs(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

// record is a finished action's tombstone as writeTombstone builds it.
func record(ns, name, fp, uid string, expires time.Time) *tombstone.Record {
	done := secs(time.Now())
	return &tombstone.Record{Namespace: ns, Name: name, Spec: actionsv1alpha1.ActionTombstoneSpec{
		Key: ns + "/" + name, Fingerprint: fp, Phase: actionsv1alpha1.PhaseSucceeded, StatusCode: 201,
		CompletedAt: &done, UID: uid, ExpiresAt: secs(expires),
		Response: &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"ch_1"}`, BodySHA256: "sha256:00",
			Headers: map[string]string{"Location": "/charges/ch_1"}},
	}}
}

// sameSpec compares two specs as a replay reads them (times to the second).
func sameSpec(a, b *actionsv1alpha1.ActionTombstoneSpec) bool {
	return a.Key == b.Key && a.Fingerprint == b.Fingerprint && a.Phase == b.Phase && a.StatusCode == b.StatusCode &&
		a.UID == b.UID && a.CompletedAt.Equal(b.CompletedAt) && a.ExpiresAt.Equal(&b.ExpiresAt) &&
		equality.Semantic.DeepEqual(a.Response, b.Response)
}

func lookup(t *testing.T, s tombstone.Store, ns, name string) *tombstone.Record {
	t.Helper()
	rec, err := s.Lookup(context.Background(), xaRef(ns, name))
	if err != nil {
		t.Fatalf("lookup %s/%s in %s: %v", ns, name, s.Name(), err)
	}
	return rec
}

func write(t *testing.T, s tombstone.Store, rec *tombstone.Record, writer string) {
	t.Helper()
	if err := s.Write(context.Background(), rec, types.UID(writer)); err != nil {
		t.Fatalf("write %s/%s to %s: %v", rec.Namespace, rec.Name, s.Name(), err)
	}
}

// The store contract, the same table for both stores: absent is nil; a write reads back whole; an object's own
// second write does not move the horizon, another object's going does; a different fingerprint written under
// the key (a new action after the horizon) replaces it; concurrent writers of one key leave one record whole;
// expiry deletes what is past expiresAt in batches of the given size, and nothing else.
func TestStoreContract(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ns, open := b.setup(t)
			s := open()
			ctx := context.Background()
			hour := time.Now().Add(time.Hour)

			if rec := lookup(t, s, ns, "none"); rec != nil {
				t.Fatalf("lookup of a key never written = %+v, want nil", rec)
			}

			first := record(ns, "order-1", "sha256:aa", "uid-1", hour)
			write(t, s, first, "uid-1")
			got := lookup(t, s, ns, "order-1")
			if got == nil || got.Namespace != ns || got.Name != "order-1" || !sameSpec(&got.Spec, &first.Spec) {
				t.Fatalf("read back %+v, want %+v", got, first)
			}

			// The object's own second write (collect, then finalize) keeps the horizon.
			again := record(ns, "order-1", "sha256:aa", "uid-1", hour.Add(time.Minute))
			again.Spec.CompletedAt = first.Spec.CompletedAt
			write(t, s, again, "uid-1")
			if got := lookup(t, s, ns, "order-1"); !got.Spec.ExpiresAt.Equal(&first.Spec.ExpiresAt) {
				t.Errorf("own second write moved expiresAt to %s, want %s", got.Spec.ExpiresAt, first.Spec.ExpiresAt)
			}
			// A replayed copy (another UID, standing for uid-1) going extends it.
			write(t, s, again, "uid-2")
			if got := lookup(t, s, ns, "order-1"); !got.Spec.ExpiresAt.Equal(&again.Spec.ExpiresAt) || got.Spec.UID != "uid-1" {
				t.Errorf("replayed copy's write: expiresAt %s uid %s, want %s and uid-1", got.Spec.ExpiresAt, got.Spec.UID, again.Spec.ExpiresAt)
			}
			// A new action under the key (after the horizon) replaces the record.
			next := record(ns, "order-1", "sha256:bb", "uid-3", hour)
			next.Spec.Response = nil
			next.Spec.StatusCode = 0
			next.Spec.Phase = actionsv1alpha1.PhaseFailed
			write(t, s, next, "uid-3")
			if got := lookup(t, s, ns, "order-1"); !sameSpec(&got.Spec, &next.Spec) {
				t.Errorf("after a new action's write: %+v, want %+v", got.Spec, next.Spec)
			}

			// Two managers write the same key at once: no error, and the record is one of them, whole.
			other := open()
			a, c := record(ns, "race", "sha256:aa", "uid-a", hour), record(ns, "race", "sha256:cc", "uid-c", hour)
			c.Spec.StatusCode, c.Spec.Response.StatusCode, c.Spec.Response.Body = 200, 200, `{"id":"other"}`
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for i := range 16 {
				st, rec, uid := s, a, "uid-a"
				if i%2 == 1 {
					st, rec, uid = other, c, "uid-c"
				}
				wg.Go(func() { errs <- st.Write(ctx, rec, types.UID(uid)) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("concurrent write: %v", err)
				}
			}
			if got := lookup(t, s, ns, "race"); got == nil || (!sameSpec(&got.Spec, &a.Spec) && !sameSpec(&got.Spec, &c.Spec)) {
				t.Errorf("after concurrent writes: %+v, want one of the two records whole", got)
			}

			// Expiry: five past expiresAt, two not; batches of two.
			past := time.Now().Add(-time.Minute)
			for i := range 5 {
				write(t, s, record(ns, fmt.Sprintf("old-%d", i), "sha256:aa", "u", past), "u")
			}
			total, batches := 0, 0
			for {
				n, err := s.Expire(ctx, time.Now(), 2)
				if err != nil {
					t.Fatal(err)
				}
				if n > 2 {
					t.Fatalf("one Expire deleted %d, limit 2", n)
				}
				total += n
				batches++
				if n == 0 || batches > 10 {
					break
				}
			}
			if total != 5 {
				t.Errorf("expired %d tombstones, want the 5 past expiresAt", total)
			}
			for i := range 5 {
				if rec := lookup(t, s, ns, fmt.Sprintf("old-%d", i)); rec != nil {
					t.Errorf("old-%d survived its expiry", i)
				}
			}
			for _, name := range []string{"order-1", "race"} {
				if lookup(t, s, ns, name) == nil {
					t.Errorf("%s (not expired) was deleted by the expiry", name)
				}
			}
		})
	}
}

// Migrations run at every start: a restart (a second Open on a migrated database) applies nothing and keeps
// the rows; managers starting at once migrate once (goose's advisory lock).
func TestMigrationsIdempotent(t *testing.T) {
	srv := pgtest.StartT(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 3)
	errs := make([]error, 3)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(ctx, srv.DSN(), postgres.Options{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open %d: %v", i, err)
		}
		t.Cleanup(stores[i].Close)
	}
	write(t, stores[0], record("shop", "kept", "sha256:aa", "u", time.Now().Add(time.Hour)), "u")
	s := openPG(t, srv.DSN())
	if lookup(t, s, "shop", "kept") == nil {
		t.Fatal("a restart's migration lost the rows")
	}
	// One applied version, once; and the table the scale bench measures exists under its fixed name.
	if err := srv.SQL(ctx, "postgres", `DO $$ BEGIN
		IF (SELECT count(*) FROM `+postgres.VersionTable+` WHERE version_id > 0) <> 1 THEN RAISE 'versions applied more than once'; END IF;
		IF to_regclass('`+postgres.Table+`') IS NULL THEN RAISE 'no table'; END IF;
		IF to_regclass('actionledger_tombstones_expires_at') IS NULL THEN RAISE 'no expires_at index'; END IF;
	END $$`); err != nil {
		t.Fatal(err)
	}
}

// A store that cannot be reached answers with an error, never "absent", and answers again once it is back.
func TestPostgresUnreachableIsUnknown(t *testing.T) {
	srv := pgtest.StartT(t)
	s := openPG(t, srv.DSN())
	write(t, s, record("shop", "a", "sha256:aa", "u", time.Now().Add(time.Hour)), "u")
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec, err := s.Lookup(context.Background(), xaRef("shop", "new"))
	if err == nil || rec != nil {
		t.Fatalf("lookup with the database down = %+v, %v; want an error", rec, err)
	}
	if d := time.Since(start); d > postgres.DefaultOpTimeout+time.Second {
		t.Errorf("the failed lookup took %s; it must fail within the operation timeout", d)
	}
	if err := s.Write(context.Background(), record("shop", "b", "sha256:aa", "u", time.Now().Add(time.Hour)), "u"); err == nil {
		t.Fatal("write with the database down succeeded")
	}
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lookup(t, s, "shop", "a") == nil {
		t.Fatal("after the restart the tombstone is not found")
	}
}
