package objects

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// TestTombstoneIndexRelists: nothing is proven before the informer's first list, during a watch-list until its
// initial-events-end bookmark, or for a key whose object was seen deleted; a new key is proven absent after.
func TestTombstoneIndexRelists(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	old := &actionsv1alpha1.ActionTombstone{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old"}}
	ix := NewIndex(fake.NewClientBuilder().WithScheme(scheme).WithObjects(old).Build())
	ix.HandlerWait = 1 // do not wait for the handler in this test
	ctx := context.Background()
	xa := func(name, rv string) *actionsv1alpha1.ExternalAction {
		return &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	absent := func(name, rv string) bool {
		t.Helper()
		ok, err := ix.Absent(ctx, xa(name, rv))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	h := ix.Handler()
	h.OnAdd(xa("seen", "10"), true)
	if absent("new", "10") {
		t.Fatal("proven absent before the informer's first list")
	}

	fw := watch.NewFake()
	lw := ix.RelistHook(&toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &actionsv1alpha1.ExternalActionList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
	}).(toolscache.ListerWatcherWithContext)
	yes := true
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{SendInitialEvents: &yes})
	if err != nil {
		t.Fatal(err)
	}
	if absent("new", "10") {
		t.Fatal("proven absent during the initial watch-list")
	}
	bookmark := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "11",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	go fw.Action(watch.Bookmark, bookmark)
	<-w.ResultChan()
	if !absent("new", "10") {
		t.Fatal("a new key is not proven absent after the list")
	}
	if absent("old", "10") {
		t.Fatal("a key with a tombstone at the snapshot is proven absent")
	}
	h.OnDelete(xa("gone", "12"))
	if absent("gone", "12") {
		t.Fatal("a key whose object was seen deleted is proven absent")
	}
	if absent("ahead", "13") {
		t.Fatal("proven absent for a resourceVersion the handler has not seen")
	}
	h.OnUpdate(nil, xa("ahead", "13"))
	if !absent("ahead", "13") {
		t.Fatal("not proven absent once the handler saw the resourceVersion")
	}

	// A plain re-list: during it nothing is proven, after it a new snapshot is taken.
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if !absent("ahead", "13") {
		t.Fatal("not proven absent after a re-list")
	}
	ix.relistStarted()
	if absent("ahead", "13") {
		t.Fatal("proven absent while a re-list is under way")
	}
}
