package admission

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// spec.subject is bounded at 253 characters and immutable: it cannot be added, changed or removed.
func TestSubjectBoundedAndImmutable(t *testing.T) {
	ns := env.Namespace(t)
	long := envtestutil.Action(ns, "long", "d", "/x", "")
	long.Spec.Subject = strings.Repeat("s", 254)
	ok := envtestutil.Action(ns, "ok", "d", "/x", "")
	ok.Spec.Subject = strings.Repeat("s", 253)
	run(t, []admissionCase{{"254 characters", long, "spec.subject"}, {"253 characters", ok, ""}})

	ctx := context.Background()
	with := envtestutil.Action(ns, "with", "d", "/x", "")
	with.Spec.Subject = "order/19"
	env.Create(t, with)
	without := envtestutil.Action(ns, "without", "d", "/x", "")
	env.Create(t, without)
	for _, c := range []struct {
		name   string
		mutate func(*actionsv1alpha1.ExternalAction)
	}{
		{"with", func(xa *actionsv1alpha1.ExternalAction) { xa.Spec.Subject = "order/20" }},
		{"with", func(xa *actionsv1alpha1.ExternalAction) { xa.Spec.Subject = "" }},
		{"without", func(xa *actionsv1alpha1.ExternalAction) { xa.Spec.Subject = "order/19" }},
	} {
		xa := env.Get(t, ns, c.name)
		c.mutate(xa)
		err := env.Client.Update(ctx, xa)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.subject is immutable") {
			t.Errorf("%s: changing spec.subject to %q: err = %v, want Invalid \"spec.subject is immutable\"", c.name, xa.Spec.Subject, err)
		}
	}
}
