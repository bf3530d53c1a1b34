package status

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/writeseats"
)

// Every status write, claim or outcome, takes one of its namespace's seats: while another namespace writes, 12
// writes of team-a reach the API server at most Per at a time, the others waiting for a seat, and without the
// seats all 12 reach it together.
func TestStatusWritesTakeTheirNamespacesSeats(t *testing.T) {
	for _, tc := range []struct {
		seats *writeseats.Seats
		most  int32 // the most team-a writes at the client at once, at most
		least int32 // and at least
	}{{writeseats.New(3), 3, 3}, {nil, 12, 12}} {
		t.Run(fmt.Sprintf("seats=%v", tc.seats != nil), func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			var objs []client.Object
			for i := range 12 {
				objs = append(objs, &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a",
					Name: fmt.Sprintf("a-%d", i)}})
			}
			objs = append(objs, &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "b"}})
			var now, most atomic.Int32
			gate := make(chan struct{})
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(objs...).
				WithInterceptorFuncs(interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, cl client.Client,
					sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
					if o.GetNamespace() == "team-a" {
						n := now.Add(1)
						defer now.Add(-1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						<-gate // held at the "API server" until the test lets them through
					}
					return cl.SubResource(sub).Update(ctx, o, opts...)
				}}).Build()
			w := &Writer{Client: c, Reader: c, Recorder: events.NewFakeRecorder(100), Clock: clock.RealClock{},
				Seats: tc.seats, DestinationID: func(*actionsv1alpha1.ExternalAction) string { return "Destination/x/d" }}
			ctx := context.Background()
			write := func(ns, name string) error {
				xa := &actionsv1alpha1.ExternalAction{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, xa); err != nil {
					return err
				}
				_, err := w.Apply(ctx, xa, waitStep("Waiting"), "")
				return err
			}
			if err := write("team-b", "b"); err != nil { // team-b writes: team-a is bounded from now on
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 12)
			for i := range 12 {
				wg.Go(func() { errs <- write("team-a", fmt.Sprintf("a-%d", i)) })
			}
			// Every write is either at the "API server" or waiting for a seat before any is let through.
			arrived := func() bool {
				return now.Load() == tc.most && tc.seats.Waiting() == 12-int(tc.most)
			}
			for deadline := time.Now().Add(5 * time.Second); !arrived(); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d writes at the API server and %d waiting for a seat; want %d and %d", now.Load(),
						tc.seats.Waiting(), tc.most, 12-int(tc.most))
				}
			}
			close(gate)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if m := most.Load(); m > tc.most || m < tc.least {
				t.Fatalf("at most %d of team-a's writes were at the API server at once; want %d to %d", m, tc.least, tc.most)
			}
		})
	}
}
