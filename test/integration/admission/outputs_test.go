package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	outputsOneTarget = "spec.outputs names exactly one target: set either secretName or configMapName"
	outputsDNS       = "must be a DNS-1123 subdomain"
	outputsKey       = "spec.outputs.values keys must be valid Secret and ConfigMap data keys"
)

func outputs(ns string, o actionsv1alpha1.ActionOutputs) *actionsv1alpha1.ExternalAction {
	return action(ns, func(s *actionsv1alpha1.ExternalActionSpec) { s.Outputs = &o })
}

func values(n int) map[string]actionsv1alpha1.OutputExpression {
	v := map[string]actionsv1alpha1.OutputExpression{}
	for i := range n {
		v[fmt.Sprintf("k%d", i)] = "response.body.id"
	}
	return v
}

// spec.outputs: exactly one same-namespace target with a DNS-1123 name, 1 to 32 keys that are valid Secret and
// ConfigMap data keys, expressions of 1 to 4096 characters.
func TestOutputsAdmission(t *testing.T) {
	ns := env.Namespace(t)
	id := map[string]actionsv1alpha1.OutputExpression{"id": "response.body.id"}
	run(t, []admissionCase{
		{"secret", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "order.out-1", Values: id}), ""},
		{"configmap retained", outputs(ns, actionsv1alpha1.ActionOutputs{ConfigMapName: "out", Values: id, Retain: true}), ""},
		{"both targets", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "a", ConfigMapName: "b", Values: id}), outputsOneTarget},
		{"no target", outputs(ns, actionsv1alpha1.ActionOutputs{Values: id}), outputsOneTarget},
		{"upper-case name", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "Out", Values: id}), "spec.outputs.secretName " + outputsDNS},
		{"name with slash", outputs(ns, actionsv1alpha1.ActionOutputs{ConfigMapName: "other-ns/out", Values: id}), "spec.outputs.configMapName " + outputsDNS},
		{"name ends with dash", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out-", Values: id}), outputsDNS},
		{"name 254 characters", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: strings.Repeat("a", 254), Values: id}), "spec.outputs.secretName"},
		{"name 253 characters", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: strings.Repeat("a", 253), Values: id}), ""},
		{"no values", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{}}), "spec.outputs.values"},
		{"32 keys", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: values(32)}), ""},
		{"33 keys", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: values(33)}), "spec.outputs.values"},
		{"key with slash", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"a/b": "1"}}), outputsKey},
		{"key dot-dot", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"..a": "1"}}), outputsKey},
		{"key dot", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{".": "1"}}), outputsKey},
		{"key with dots and dashes", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"a.b-c_D": "1"}}), ""},
		{"empty expression", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"a": ""}}), "spec.outputs.values.a"},
		{"expression 4096", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"a": actionsv1alpha1.OutputExpression(`"` + strings.Repeat("x", 4094) + `"`)}}), ""},
		{"expression 4097", outputs(ns, actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"a": actionsv1alpha1.OutputExpression(strings.Repeat("x", 4097))}}), "spec.outputs.values.a"},
	})
}

// spec.outputs is immutable: it cannot be added, changed or removed.
func TestOutputsImmutable(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	with := envtestutil.Action(ns, "with", "d", "/x", "")
	with.Spec.Outputs = &actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"id": "response.body.id"}}
	env.Create(t, with)
	env.Create(t, envtestutil.Action(ns, "without", "d", "/x", ""))
	for _, c := range []struct {
		name   string
		mutate func(*actionsv1alpha1.ExternalAction)
	}{
		{"with", func(xa *actionsv1alpha1.ExternalAction) { xa.Spec.Outputs.SecretName = "other" }},
		{"with", func(xa *actionsv1alpha1.ExternalAction) { xa.Spec.Outputs.Values["more"] = "response.statusCode" }},
		{"with", func(xa *actionsv1alpha1.ExternalAction) { xa.Spec.Outputs.Retain = true }},
		{"with", func(xa *actionsv1alpha1.ExternalAction) { xa.Spec.Outputs = nil }},
		{"without", func(xa *actionsv1alpha1.ExternalAction) {
			xa.Spec.Outputs = &actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"id": "1"}}
		}},
	} {
		xa := env.Get(t, ns, c.name)
		c.mutate(xa)
		err := env.Client.Update(ctx, xa)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.outputs is immutable") {
			t.Errorf("%s: changing spec.outputs to %+v: err = %v, want Invalid \"spec.outputs is immutable\"", c.name, xa.Spec.Outputs, err)
		}
	}
}
