// Package tombstone defines where the identity of a gone ExternalAction is kept: the key binding and outcome
// that outlive the object for its destination's retention.tombstoneTTL (DESIGN rules 6-8, docs/tombstones.md).
//
// Two stores implement Store: ActionTombstone objects in the API server (the default, objects.Store)
// and a PostgreSQL table (package tombstone/postgres). Both keep the same record, so a replay from either
// looks the same. A store that cannot answer a lookup returns an error, never "absent": the controller then
// waits (a first send is never made on a guess).
package tombstone

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Store names, as the --tombstone-store flag and the store label of the metrics spell them.
const (
	StoreObjects  = "objects"
	StorePostgres = "postgres"
)

// Record is one tombstone: the action's namespace and name (the store's key) and what is kept of it, the same
// fields as an ActionTombstone's spec.
type Record struct {
	Namespace string
	Name      string
	Spec      actionsv1alpha1.ActionTombstoneSpec
}

// Store keeps tombstones by (namespace, name).
type Store interface {
	// Name is the store's name (StoreObjects or StorePostgres).
	Name() string
	// Lookup returns the tombstone of xa's namespace/name, expired or not (the caller compares expiresAt with
	// its clock), or nil when there is none. An error means the store could not answer: unknown, never absent.
	// xa is passed whole because a store may prove absence from the object's resourceVersion (objects.Index).
	Lookup(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (*Record, error)
	// Write records rec for the object writer (the UID of the ExternalAction that is going) idempotently: a new
	// key is inserted; over an existing one rec is written only when NeedsWrite says so. Concurrent writes of the
	// same key leave one of them, whole.
	Write(ctx context.Context, rec *Record, writer types.UID) error
	// Expire deletes up to limit tombstones whose expiresAt is at or before now and returns how many it deleted.
	Expire(ctx context.Context, now time.Time, limit int) (int, error)
}

// NeedsWrite reports whether next, written by the object writer, replaces cur under the same key. It does when
// anything recorded differs (a new action under the key after the horizon, or a non-terminal tombstone
// finished by a later object: the lookup already refused a different fingerprint inside the horizon, DESIGN
// rule 6), or when another object than the one cur stands for extends the horizon by more than a second (a
// replayed copy going: the horizon runs from when the last object holding the key went, docs/retention.md).
// The same object's write again (a finalization retried after its first write) changes nothing.
func NeedsWrite(cur, next *actionsv1alpha1.ActionTombstoneSpec, writer types.UID) bool {
	same := cur.Fingerprint == next.Fingerprint && cur.Phase == next.Phase && cur.UID == next.UID &&
		cur.StatusCode == next.StatusCode && cur.CompletedAt.Equal(next.CompletedAt) &&
		equality.Semantic.DeepEqual(cur.Response, next.Response)
	extend := string(writer) != cur.UID && cur.ExpiresAt.Add(time.Second).Before(next.ExpiresAt.Time)
	return !same || extend
}

// Chain looks a key up in Primary and, when Primary has none, in Fallback; it writes and expires in Primary
// only. It lets a manager switched from ActionTombstone objects to PostgreSQL keep honouring the objects
// written before the switch until they expire (their own collector deletes them).
type Chain struct {
	Primary  Store
	Fallback Store
	// Now reads the clock that decides whether Primary's record is past its expiresAt (nil: time.Now).
	Now func() time.Time
}

// Name is the primary store's name.
func (c Chain) Name() string { return c.Primary.Name() }

// Lookup asks Primary, then Fallback when Primary has no record or only one past its expiresAt (not yet
// swept: it binds nothing, while an older Fallback record may still bind the key); an error from either is an
// unknown answer. Primary's expired record is returned when Fallback has none.
func (c Chain) Lookup(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (*Record, error) {
	rec, err := c.Primary.Lookup(ctx, xa)
	if err != nil || c.Fallback == nil {
		return rec, err
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	if rec != nil && !rec.Spec.ExpiresAt.Time.Before(now()) {
		return rec, nil
	}
	old, err := c.Fallback.Lookup(ctx, xa)
	if err != nil || old != nil {
		return old, err
	}
	return rec, nil
}

// Write writes to Primary.
func (c Chain) Write(ctx context.Context, rec *Record, writer types.UID) error {
	return c.Primary.Write(ctx, rec, writer)
}

// Expire expires in Primary.
func (c Chain) Expire(ctx context.Context, now time.Time, limit int) (int, error) {
	return c.Primary.Expire(ctx, now, limit)
}
