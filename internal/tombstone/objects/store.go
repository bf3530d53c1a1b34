package objects

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/tombstone"
)

// Store keeps tombstones as ActionTombstone objects named like their action, in its namespace (the
// default store, nothing to install). Lookups are proven absent by Index without a read when it can, else read
// live from Reader (never from the informer cache: a tombstone written a moment ago by the previous object's
// finalizer must be seen). Expiry is TombstoneReconciler's, each tombstone requeued for its own expiresAt;
// Expire is the same deletion in one pass.
type Store struct {
	// Client creates and updates tombstones.
	Client client.Client
	// Reader reads tombstones live from the API server (the manager's APIReader).
	Reader client.Reader
	// Index proves a new key has no tombstone without a read; nil reads every lookup live.
	Index *Index
}

var _ tombstone.Store = (*Store)(nil)

// Name is tombstone.StoreObjects.
func (s *Store) Name() string { return tombstone.StoreObjects }

// Lookup returns xa's ActionTombstone, nil when the index proves it absent or the API server has none, or the
// API server's error.
func (s *Store) Lookup(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (*tombstone.Record, error) {
	if s.Index != nil {
		absent, err := s.Index.Absent(ctx, xa)
		if err != nil {
			log.FromContext(ctx).V(1).Info("tombstone index unavailable; reading the tombstone live", "err", err.Error())
		}
		if absent {
			metrics.TombstoneLookups.WithLabelValues("index").Inc()
			return nil, nil
		}
	}
	metrics.TombstoneLookups.WithLabelValues("live").Inc()
	ts := &actionsv1alpha1.ActionTombstone{}
	err := s.Reader.Get(ctx, client.ObjectKeyFromObject(xa), ts)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the ActionTombstone %s/%s: %w", xa.Namespace, xa.Name, err)
	}
	return &tombstone.Record{Namespace: ts.Namespace, Name: ts.Name, Spec: ts.Spec}, nil
}

// Write creates rec's ActionTombstone, or updates the existing one when tombstone.NeedsWrite says so (retried
// on a Conflict with a concurrent writer). A namespace that is terminating refuses the create; that error is
// returned as the API server gave it (apierrors.HasStatusCause finds corev1.NamespaceTerminatingCause).
func (s *Store) Write(ctx context.Context, rec *tombstone.Record, writer types.UID) error {
	ts := &actionsv1alpha1.ActionTombstone{
		ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "actionledger"}},
		Spec: rec.Spec,
	}
	err := s.Client.Create(ctx, ts)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("writing the tombstone of %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &actionsv1alpha1.ActionTombstone{}
		if err := s.Reader.Get(ctx, client.ObjectKeyFromObject(ts), cur); err != nil {
			return fmt.Errorf("reading the existing tombstone: %w", err)
		}
		if !tombstone.NeedsWrite(&cur.Spec, &rec.Spec, writer) {
			return nil
		}
		cur.Spec = rec.Spec
		return s.Client.Update(ctx, cur)
	})
	if err != nil {
		return fmt.Errorf("updating the tombstone of %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	return nil
}

// Expire deletes up to limit ActionTombstones past expiresAt, each with UID and resourceVersion preconditions
// (a tombstone rewritten meanwhile is kept). It lists every tombstone, 500 a page.
func (s *Store) Expire(ctx context.Context, now time.Time, limit int) (int, error) {
	n := 0
	list := &actionsv1alpha1.ActionTombstoneList{}
	opts := []client.ListOption{client.Limit(500)}
	for n < limit {
		if err := s.Reader.List(ctx, list, opts...); err != nil {
			return n, fmt.Errorf("listing tombstones: %w", err)
		}
		for i := range list.Items {
			ts := &list.Items[i]
			if n >= limit || now.Before(ts.Spec.ExpiresAt.Time) {
				continue
			}
			uid, rv := ts.UID, ts.ResourceVersion
			err := s.Client.Delete(ctx, ts, client.Preconditions{UID: &uid, ResourceVersion: &rv})
			if err == nil {
				n++
			} else if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return n, fmt.Errorf("deleting expired tombstone: %w", err)
			}
		}
		if list.Continue == "" {
			break
		}
		opts = []client.ListOption{client.Limit(500), client.Continue(list.Continue)}
	}
	return n, nil
}
