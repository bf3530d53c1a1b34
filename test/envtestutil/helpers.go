package envtestutil

import (
	"bytes"
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
