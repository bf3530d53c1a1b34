package objects

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Index answers "this key has no tombstone" without a read per action, and says when it cannot.
//
// A tombstone of key K is written while an object named K exists (by its finalizer, DESIGN rules 7
// and 8), so before that object's deletion; a new object named K is created only after that deletion. So a
// tombstone that the first reconcile of K must see was written before some deletion of an object named K that
// happened before the new object's creation. Such a deletion happened either
//
//   - before the index's snapshot: a LIST of every tombstone's name from the API server, taken after the
//     ExternalAction informer's latest (re)list completed. A tombstone written before it is in the snapshot
//     (or has expired and been collected since, and then it is absent anyway); or
//   - after the informer's latest list: then the informer's watch delivered it, in resourceVersion order,
//     before the new object's own events. The index's event handler records every deleted key; once the
//     handler has seen an event at or past the object's resourceVersion (compared as the Kubernetes API
//     documents, k8s.io/apimachinery/pkg/util/resourceversion), it has seen that deletion too.
//
// A key that is in neither the snapshot nor the deleted set is proven absent. Anything else (the key had a
// tombstone or an object before, the handler lags, the informer re-listed and no snapshot follows it yet) is
// "unknown", and the caller reads the tombstone live. The happy path (a new name) costs no read; a re-created
// key costs one GET, as before. The snapshot costs one paginated metadata LIST at start and after each re-list
// of the ExternalAction informer (RelistHook), or when the deleted set reaches MaxDeleted.
type Index struct {
	// Reader lists tombstones from the API server (the manager's APIReader).
	Reader client.Reader
	// MaxDeleted bounds the deleted set; reaching it takes a new snapshot, which empties it. Default 10,000.
	MaxDeleted int
	// HandlerWait is how long Absent waits for the event handler to reach the object's resourceVersion before
	// answering "unknown". Default 200ms.
	HandlerWait time.Duration

	mu       sync.Mutex
	gen      uint64                        // ExternalAction (re)lists completed
	relist   bool                          // a (re)list of the informer is under way (LIST or watch-list)
	seen     string                        // the highest resourceVersion the handler has seen
	advanced chan struct{}                 // closed and replaced whenever seen advances
	deleted  map[types.NamespacedName]bool // deleted ExternalActions seen since the snapshot began
	snapGen  uint64                        // gen the snapshot was taken at (valid when snap != nil)
	snap     map[types.NamespacedName]bool // names with a tombstone at the snapshot
	snapMu   sync.Mutex                    // one snapshot LIST at a time
}

// NewIndex returns an index reading snapshots through reader.
func NewIndex(reader client.Reader) *Index {
	return &Index{Reader: reader, deleted: map[types.NamespacedName]bool{}, advanced: make(chan struct{})}
}

// Absent reports true only when no tombstone of xa's namespace/name can exist that was written before xa was
// created (see Index). false means unknown: read it live. err is a failed snapshot LIST.
func (ix *Index) Absent(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (bool, error) {
	if !ix.waitSeen(ctx, xa.ResourceVersion) {
		return false, nil
	}
	nn := types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name}
	ix.mu.Lock()
	if ix.gen == 0 {
		ix.mu.Unlock()
		return false, nil // the informer has not completed its first list: nothing is proven yet
	}
	fresh := ix.snap != nil && ix.snapGen == ix.gen && !ix.relist
	if fresh {
		absent := !ix.snap[nn] && !ix.deleted[nn]
		ix.mu.Unlock()
		return absent, nil
	}
	ix.mu.Unlock()
	if err := ix.snapshot(ctx); err != nil {
		return false, err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.snap != nil && ix.snapGen == ix.gen && !ix.relist && !ix.snap[nn] && !ix.deleted[nn], nil
}

// waitSeen waits up to HandlerWait for the handler to have seen rv; false when it has not.
func (ix *Index) waitSeen(ctx context.Context, rv string) bool {
	wait := ix.HandlerWait
	if wait <= 0 {
		wait = 200 * time.Millisecond
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		ix.mu.Lock()
		seen, ch := ix.seen, ix.advanced
		ix.mu.Unlock()
		if c, err := resourceversion.CompareResourceVersion(seen, rv); err == nil && c >= 0 {
			return true
		} else if err != nil && seen != "" {
			return false // not a comparable resourceVersion: prove nothing
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// snapshot lists the names of all tombstones (metadata only, paginated, one consistent read) unless a snapshot
// at the current generation exists. The deleted set is emptied as the LIST begins: every deletion seen so far
// happened before it, so its tombstone is in the snapshot.
func (ix *Index) snapshot(ctx context.Context) error {
	ix.snapMu.Lock()
	defer ix.snapMu.Unlock()
	ix.mu.Lock()
	if ix.relist || ix.gen == 0 || (ix.snap != nil && ix.snapGen == ix.gen) {
		ix.mu.Unlock()
		return nil
	}
	gen := ix.gen
	ix.deleted = map[types.NamespacedName]bool{}
	ix.mu.Unlock()

	names := map[types.NamespacedName]bool{}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(actionsv1alpha1.GroupVersion.WithKind("ActionTombstoneList"))
	opts := []client.ListOption{client.Limit(500)}
	for {
		if err := ix.Reader.List(ctx, list, opts...); err != nil {
			return fmt.Errorf("listing tombstone names: %w", err)
		}
		for i := range list.Items {
			names[types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}] = true
		}
		if list.Continue == "" {
			break
		}
		opts = []client.ListOption{client.Limit(500), client.Continue(list.Continue)}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.gen == gen && !ix.relist {
		ix.snap, ix.snapGen = names, gen
	}
	return nil
}

// observe records an ExternalAction event: its resourceVersion, and its key when it was deleted.
func (ix *Index) observe(obj any, deleted bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		// Seen in a re-list, not in the watch: its resourceVersion is stale; only the key counts.
		if ns, name, err := toolscache.SplitMetaNamespaceKey(d.Key); err == nil {
			ix.mu.Lock()
			ix.deleted[types.NamespacedName{Namespace: ns, Name: name}] = true
			ix.mu.Unlock()
		}
		return
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if deleted {
		ix.deleted[types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}] = true
		limit := ix.MaxDeleted
		if limit <= 0 {
			limit = 10000
		}
		if len(ix.deleted) >= limit {
			ix.gen++ // the next Absent takes a new snapshot, which empties the set
		}
	}
	if c, err := resourceversion.CompareResourceVersion(o.GetResourceVersion(), ix.seen); ix.seen == "" || (err == nil && c > 0) {
		ix.seen = o.GetResourceVersion()
		close(ix.advanced)
		ix.advanced = make(chan struct{})
	}
}

// Handler is the event handler to add to the manager's ExternalAction informer.
func (ix *Index) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ix.observe(obj, false) },
		UpdateFunc: func(_, obj any) { ix.observe(obj, false) },
		DeleteFunc: func(obj any) { ix.observe(obj, true) },
	}
}

// relistStarted and relistDone bracket a (re)list of the ExternalAction informer: no snapshot is trusted or taken
// in between, and the snapshot that follows is taken after the list completed.
func (ix *Index) relistStarted() {
	ix.mu.Lock()
	ix.relist = true
	ix.mu.Unlock()
}

func (ix *Index) relistDone() {
	ix.mu.Lock()
	ix.relist = false
	ix.gen++
	ix.mu.Unlock()
}

// RelistHook wraps the ListerWatcher of the ExternalAction informer (cache.Options.NewInformer) so that the
// index knows when a (re)list starts and completes: a LIST call, or a watch-list (sendInitialEvents) until its
// initial-events-end bookmark. Objects that came and went during a gap in the watch are never seen by the
// handler; the snapshot taken after the re-list covers their tombstones.
func (ix *Index) RelistHook(lw toolscache.ListerWatcher) toolscache.ListerWatcher {
	return &relistWatcher{inner: toolscache.ToListerWatcherWithContext(lw), orig: lw, ix: ix}
}

type relistWatcher struct {
	inner toolscache.ListerWatcherWithContext
	orig  toolscache.ListerWatcher
	ix    *Index
}

// IsWatchListSemanticsUnSupported passes on the wrapped ListerWatcher's answer (client-go's reflector asks it
// before it uses a watch-list).
func (w *relistWatcher) IsWatchListSemanticsUnSupported() bool {
	u, ok := w.orig.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

func (w *relistWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return w.ListWithContext(context.Background(), opts)
}

func (w *relistWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	w.ix.relistStarted()
	obj, err := w.inner.ListWithContext(ctx, opts)
	if err == nil {
		// After an error the informer still lacks what changed: it stays "re-listing" until a list succeeds.
		w.ix.relistDone()
	}
	return obj, err
}

func (w *relistWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return w.WatchWithContext(context.Background(), opts)
}

func (w *relistWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if !initial {
		return w.inner.WatchWithContext(ctx, opts)
	}
	w.ix.relistStarted()
	wi, err := w.inner.WatchWithContext(ctx, opts)
	if err != nil {
		return nil, err // still re-listing: the reflector tries again, with a watch-list or a LIST
	}
	var once sync.Once
	return watch.Filter(wi, func(e watch.Event) (watch.Event, bool) {
		if e.Type == watch.Bookmark {
			if o, ok := e.Object.(metav1.Object); ok && o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				once.Do(w.ix.relistDone)
			}
		}
		return e, true
	}), nil
}
