package controller_test

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/controller"
)

func finished(phase actionsv1alpha1.Phase, annotations map[string]string) *actionsv1alpha1.ExternalAction {
	return &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Annotations: annotations,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Status: actionsv1alpha1.ExternalActionStatus{Phase: phase, Attempts: 1,
			AttemptHistory: []actionsv1alpha1.AttemptRecord{{Number: 1, Result: "Succeeded", StatusCode: 201}},
			Response: &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":1}`, BodySHA256: "sha256:x",
				Headers: map[string]string{"Location": "/1"}},
			LastError:  "Retryable: status 503",
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "done"}}},
	}
}

func TestTrimFinished(t *testing.T) {
	for _, tc := range []struct {
		name string
		xa   *actionsv1alpha1.ExternalAction
		trim bool
	}{
		{"succeeded", finished(actionsv1alpha1.PhaseSucceeded, nil), true},
		{"exhausted with other annotations", finished(actionsv1alpha1.PhaseExhausted, map[string]string{"a": "b"}), true},
		{"in progress", finished(actionsv1alpha1.PhaseInProgress, nil), false},
		{"decision pending", finished(actionsv1alpha1.PhaseOutcomeUnknown, map[string]string{actionsv1alpha1.AnnotationResolve: "retry"}), false},
	} {
		out, err := controller.TrimFinished(tc.xa)
		if err != nil {
			t.Fatal(err)
		}
		xa := out.(*actionsv1alpha1.ExternalAction)
		if xa.ManagedFields != nil {
			t.Errorf("%s: managedFields kept", tc.name)
		}
		trimmed := xa.Status.AttemptHistory == nil && xa.Status.Response.Body == "" && xa.Status.Response.Headers == nil &&
			xa.Status.Conditions == nil && xa.Status.LastError == ""
		if trimmed != tc.trim || controller.IsTrimmed(xa) != tc.trim {
			t.Errorf("%s: trimmed %v, marked %v, want %v", tc.name, trimmed, controller.IsTrimmed(xa), tc.trim)
		}
		if xa.Status.Response.StatusCode != 201 || xa.Status.Response.BodySHA256 != "sha256:x" || xa.Status.Attempts != 1 {
			t.Errorf("%s: a field the tombstone reads was dropped: %s", tc.name, xa.Status.Response.BodySHA256)
		}
		if tc.name == "exhausted with other annotations" && xa.Annotations["a"] != "b" {
			t.Errorf("%s: annotations %v", tc.name, xa.Annotations)
		}
	}
}

// TestGuardTrimmed: no status write leaves from a trimmed copy; an Update of one goes without the mark.
func TestGuardTrimmed(t *testing.T) {
	stored := finished(actionsv1alpha1.PhaseSucceeded, nil)
	stored.ManagedFields = nil
	var sent []string
	base := fake.NewClientBuilder().WithScheme(app.Scheme).WithObjects(stored.DeepCopy()).
		WithStatusSubresource(&actionsv1alpha1.ExternalAction{}).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			sent = append(sent, "update")
			if controller.IsTrimmed(obj) {
				t.Errorf("the mark was sent in an Update")
			}
			return c.Update(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			sent = append(sent, sub+" update")
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}).Build()
	c := controller.GuardTrimmed(base)
	ctx := context.Background()
	cur := &actionsv1alpha1.ExternalAction{}
	if err := base.Get(ctx, client.ObjectKeyFromObject(stored), cur); err != nil {
		t.Fatal(err)
	}
	out, _ := controller.TrimFinished(cur)
	trimmed := out.(*actionsv1alpha1.ExternalAction)

	if err := c.Status().Update(ctx, trimmed.DeepCopy()); !errors.Is(err, controller.ErrTrimmedCopy) {
		t.Errorf("status update of a trimmed copy: %v, want ErrTrimmedCopy", err)
	}
	if err := c.SubResource("status").Update(ctx, trimmed.DeepCopy()); !errors.Is(err, controller.ErrTrimmedCopy) {
		t.Errorf("status subresource update of a trimmed copy: %v, want ErrTrimmedCopy", err)
	}
	if err := c.Status().Patch(ctx, trimmed.DeepCopy(), client.MergeFrom(trimmed)); !errors.Is(err, controller.ErrTrimmedCopy) {
		t.Errorf("status patch of a trimmed copy: %v, want ErrTrimmedCopy", err)
	}
	if len(sent) != 0 {
		t.Fatalf("sent %v from a trimmed copy", sent)
	}
	upd := trimmed.DeepCopy()
	upd.Finalizers = []string{actionsv1alpha1.Finalizer}
	if err := c.Update(ctx, upd); err != nil {
		t.Fatalf("update of a trimmed copy: %v", err)
	}
	got := &actionsv1alpha1.ExternalAction{}
	if err := base.Get(ctx, client.ObjectKeyFromObject(stored), got); err != nil {
		t.Fatal(err)
	}
	if controller.IsTrimmed(got) || len(got.Status.AttemptHistory) != 1 || got.Status.Response.Body == "" {
		t.Errorf("after the Update: marked %v, history %d, body %q", controller.IsTrimmed(got), len(got.Status.AttemptHistory), got.Status.Response.Body)
	}
	if err := c.Status().Update(ctx, got); err != nil {
		t.Errorf("status update of a fresh copy: %v", err)
	}
}
