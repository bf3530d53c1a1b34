package gateway

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// notifier wakes the requests waiting on an ExternalAction when the informer sees it change. Waiters
// subscribe before they read the cache, so a change between the read and the wait is not lost.
type notifier struct {
	mu      sync.Mutex
	waiters map[types.NamespacedName]map[chan struct{}]struct{}
}

func newNotifier() *notifier {
	return &notifier{waiters: map[types.NamespacedName]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel closed at the next change of key, and a cancel to call when done waiting.
func (n *notifier) subscribe(key types.NamespacedName) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	n.mu.Lock()
	set := n.waiters[key]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		n.waiters[key] = set
	}
	set[ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if set, ok := n.waiters[key]; ok {
			if _, ok := set[ch]; ok {
				delete(set, ch)
				if len(set) == 0 {
					delete(n.waiters, key)
				}
			}
		}
	}
}

// notify wakes every waiter of key.
func (n *notifier) notify(key types.NamespacedName) {
	n.mu.Lock()
	set := n.waiters[key]
	delete(n.waiters, key)
	n.mu.Unlock()
	for ch := range set {
		close(ch)
	}
}

// handler is the informer event handler that feeds notify.
func (n *notifier) handler() toolscache.ResourceEventHandler {
	of := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if o, ok := obj.(client.Object); ok {
			n.notify(client.ObjectKeyFromObject(o))
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { of(obj) },
		UpdateFunc: func(_, obj any) { of(obj) },
		DeleteFunc: of,
	}
}
