package dispatch

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// TestCompletionsReachTheControllerThroughSourceChannel wires Deliver the way the controller is meant to:
// the outcome goes into a pending map first (DESIGN rule 2), then a GenericEvent for the object goes onto
// the channel of a controller-runtime source.Channel, whose handler enqueues a reconcile.Request. The
// request that comes out of the workqueue finds the outcome in the pending map.
func TestCompletionsReachTheControllerThroughSourceChannel(t *testing.T) {
	ctx := t.Context()

	var pending sync.Map // types.NamespacedName -> Completion[int]
	events := make(chan event.GenericEvent, 16)
	deliver := func(c Completion[int]) {
		pending.Store(c.Key, c)
		obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: c.Key.Namespace, Name: c.Key.Name}}
		select {
		case events <- event.GenericEvent{Object: obj}:
		case <-ctx.Done(): // the controller is gone: the pending outcome is recorded directly (Draining)
		}
	}
	d := newDispatcher(t, Options[int]{Deliver: deliver})

	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	src := source.Channel(events, &handler.EnqueueRequestForObject{})
	if err := src.Start(ctx, queue); err != nil {
		t.Fatal(err)
	}

	keys := []types.NamespacedName{{Namespace: "tenant-a", Name: "pay-1"}, {Namespace: "tenant-b", Name: "pay-2"}}
	for i, k := range keys {
		mustSubmit(t, d, mkJob("Destination/x/pay", k, 0, func(context.Context) int { return 200 + i }))
	}
	got := map[types.NamespacedName]bool{}
	for range keys {
		req := getWithin(t, queue, wait)
		v, ok := pending.Load(req.NamespacedName)
		if !ok {
			t.Fatalf("request %v arrived before its outcome was stored", req)
		}
		if c := v.(Completion[int]); !c.Started || c.Result < 200 {
			t.Fatalf("pending outcome of %v = %+v", req, c)
		}
		got[req.NamespacedName] = true
		queue.Done(req)
	}
	for _, k := range keys {
		if !got[k] {
			t.Fatalf("no request for %v", k)
		}
	}
}

// getWithin takes the next request from queue, failing the test after d.
func getWithin(t *testing.T, queue workqueue.TypedRateLimitingInterface[reconcile.Request], d time.Duration) reconcile.Request {
	t.Helper()
	type item struct {
		req      reconcile.Request
		shutdown bool
	}
	ch := make(chan item, 1)
	go func() {
		req, shutdown := queue.Get()
		ch <- item{req, shutdown}
	}()
	select {
	case it := <-ch:
		if it.shutdown {
			t.Fatal("queue shut down")
		}
		return it.req
	case <-time.After(d):
		t.Fatal("no request enqueued within", d)
		return reconcile.Request{}
	}
}
