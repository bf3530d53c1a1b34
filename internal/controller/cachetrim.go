package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// AnnotationCacheTrimmed marks a cached ExternalAction from which TrimFinished dropped fields. It exists only in
// the manager's cache (never written: GuardTrimmed refuses a write that would carry it) and says that the copy
// must not be the base of a status write.
const AnnotationCacheTrimmed = "actions.actionledger.dev/cache-trimmed"

// ErrTrimmedCopy is returned by GuardTrimmed's client for a write based on a copy that TrimFinished trimmed:
// it would erase the dropped history, response, conditions and lastError in etcd. Read a fresh copy (APIReader)
// and decide on it.
var ErrTrimmedCopy = errors.New("refusing to write from a trimmed cache copy (attemptHistory, response body and " +
	"headers, conditions and lastError are not cached for finished actions); read a fresh copy from the API server first")

// trimmedMark is the annotations map of a trimmed object that had none: shared by all of them, so the mark costs
// no allocation per cached object. The cache hands out deep copies, so nothing writes to it.
var trimmedMark = map[string]string{AnnotationCacheTrimmed: trimmedValue}

const trimmedValue = "true"

// TrimFinished is the cache transform of ExternalActions (cache.ByObject Transform; it also strips managedFields,
// as the cache's default transform does for every other kind). For a finished action (a terminal phase, no open
// claim, not being deleted) with no decision by a person pending (AnnotationResolve), it drops what no decision
// on a finished action reads: status.attemptHistory, the response's body and headers, status.conditions and
// status.lastError (people and kstatus read those from the API server, not from this cache). The phase,
// key, fingerprint, attempts, times, replayedFrom, resolution and the response's status code, hash and
// bodyTruncated stay: collection, the tombstone and the gauges read them. It marks such a copy with
// AnnotationCacheTrimmed. An object with the resolve annotation is cached whole, because resolving writes its
// status from the cached copy. Any other value is returned unchanged.
func TrimFinished(obj any) (any, error) {
	if o, ok := obj.(client.Object); ok {
		o.SetManagedFields(nil)
	}
	xa, ok := obj.(*actionsv1alpha1.ExternalAction)
	if !ok || !trimmable(xa) {
		return obj, nil
	}
	st := &xa.Status
	st.AttemptHistory, st.Conditions, st.LastError = nil, nil, ""
	if st.Response != nil {
		st.Response.Body, st.Response.Headers = "", nil
	}
	if len(xa.Annotations) == 0 {
		xa.Annotations = trimmedMark
	} else {
		a := make(map[string]string, len(xa.Annotations)+1)
		maps.Copy(a, xa.Annotations)
		a[AnnotationCacheTrimmed] = trimmedValue
		xa.Annotations = a
	}
	return xa, nil
}

func trimmable(xa *actionsv1alpha1.ExternalAction) bool {
	if !xa.Status.Phase.Terminal() || xa.Status.Claim != nil || !xa.DeletionTimestamp.IsZero() {
		return false
	}
	_, pending := xa.Annotations[actionsv1alpha1.AnnotationResolve]
	return !pending
}

// IsTrimmed reports whether obj is an ExternalAction copy that TrimFinished trimmed.
func IsTrimmed(obj client.Object) bool {
	_, ok := obj.GetAnnotations()[AnnotationCacheTrimmed]
	return ok
}

// GuardTrimmed wraps c so that no write is based on a trimmed cache copy: a status Update or Patch of a trimmed
// ExternalAction, and a Patch whose body carries the mark, are refused with ErrTrimmedCopy before anything is
// sent; an Update of one (the main resource: finalizers, annotations) is sent without the mark. Reads and every
// other write pass through.
func GuardTrimmed(c client.Client) client.Client { return &guardedClient{Client: c} }

type guardedClient struct{ client.Client }

// Update writes the object without the mark: the main resource never carries status (the status subresource is
// separate), so only the mark itself would leak from a trimmed copy. On failure the mark is put back, so the copy
// still cannot be the base of a status write.
func (g *guardedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if !IsTrimmed(obj) {
		return g.Client.Update(ctx, obj, opts...)
	}
	marked := obj.GetAnnotations()
	a := make(map[string]string, len(marked))
	for k, v := range marked {
		if k != AnnotationCacheTrimmed {
			a[k] = v
		}
	}
	if len(a) == 0 {
		a = nil
	}
	obj.SetAnnotations(a)
	if err := g.Client.Update(ctx, obj, opts...); err != nil {
		obj.SetAnnotations(marked)
		return err
	}
	return nil
}

func (g *guardedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := checkPatch(obj, patch); err != nil {
		return err
	}
	return g.Client.Patch(ctx, obj, patch, opts...)
}

func (g *guardedClient) Status() client.SubResourceWriter {
	return &guardedStatus{SubResourceWriter: g.Client.Status()}
}

func (g *guardedClient) SubResource(subResource string) client.SubResourceClient {
	if subResource != "status" {
		return g.Client.SubResource(subResource)
	}
	return &guardedSubResource{SubResourceClient: g.Client.SubResource(subResource)}
}

type guardedStatus struct{ client.SubResourceWriter }

func (g *guardedStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if IsTrimmed(obj) {
		return trimmedError("status update", obj)
	}
	return g.SubResourceWriter.Update(ctx, obj, opts...)
}

func (g *guardedStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if IsTrimmed(obj) {
		return trimmedError("status patch", obj)
	}
	return g.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

type guardedSubResource struct{ client.SubResourceClient }

func (g *guardedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if IsTrimmed(obj) {
		return trimmedError("status update", obj)
	}
	return g.SubResourceClient.Update(ctx, obj, opts...)
}

func (g *guardedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if IsTrimmed(obj) {
		return trimmedError("status patch", obj)
	}
	return g.SubResourceClient.Patch(ctx, obj, patch, opts...)
}

// checkPatch refuses a main-resource patch that would write the mark (a merge patch computed between two trimmed
// copies does not mention it, and the main resource never writes status, so only the mark itself can leak).
func checkPatch(obj client.Object, patch client.Patch) error {
	if !IsTrimmed(obj) {
		return nil
	}
	data, err := patch.Data(obj)
	if err != nil {
		return fmt.Errorf("computing the patch of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	if strings.Contains(string(data), AnnotationCacheTrimmed) {
		return trimmedError("patch", obj)
	}
	return nil
}

func trimmedError(what string, obj client.Object) error {
	return fmt.Errorf("%s of %s/%s: %w", what, obj.GetNamespace(), obj.GetName(), ErrTrimmedCopy)
}
