package envtestutil

import (
	"bytes"
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Annotate sets the annotations kv on the ExternalAction ns/name, retrying on conflicts for up to 10 s
// (a person's kubectl annotate racing the controller's status writes).
func (e *Env) Annotate(t *testing.T, ns, name string, kv map[string]string) {
	t.Helper()
	e.WaitFor(t, ns, name, 10*time.Second, "annotation update", func(xa *actionsv1alpha1.ExternalAction) bool {
		if xa.Annotations == nil {
			xa.Annotations = map[string]string{}
		}
		maps.Copy(xa.Annotations, kv)
		err := e.Client.Update(context.Background(), xa)
		if err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("annotating %s/%s: %v", ns, name, err)
		}
		return err == nil
	})
}

// UpdateDestination reads the Destination ns/name, applies mutate and writes it back, reading again and
// retrying when the API server answers 409 Conflict (the destination controller writes the Destination's status
// at any time, so a read-modify-write from a test races it exactly as a person's kubectl edit does).
func (e *Env) UpdateDestination(t testing.TB, ns, name string, mutate func(*actionsv1alpha1.Destination)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &actionsv1alpha1.Destination{}
		if err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		mutate(d)
		return e.Client.Update(context.Background(), d)
	})
	if err != nil {
		t.Fatalf("updating Destination %s/%s: %v", ns, name, err)
	}
}

// SyncBuffer is an io.Writer that a process's output goroutines and the test's reads may use at once.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
