//go:build !unit

package controller_test

import (
	"context"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/actionledger/actionledger/test/envtestutil"
)

// withoutCRDRule runs create while the CRD named crd lacks the one CEL rule that match picks among the rules of
// the schema at path (property names from the root, e.g. spec, request, headers), as a CRD from before the rule,
// and puts the rule back after (also when the test fails). accepted says whether the server, as served now,
// takes what the rule refuses: it is awaited false-then-true around create.
func withoutCRDRule(t *testing.T, crd string, path []string, match func(apiextensionsv1.ValidationRule) bool,
	accepted func() bool, create func()) {
	t.Helper()
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var rule apiextensionsv1.ValidationRules
	setRule := func(on bool) {
		t.Helper()
		obj := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(ctx, client.ObjectKey{Name: crd}, obj); err != nil {
			t.Fatal(err)
		}
		root := obj.Spec.Versions[0].Schema.OpenAPIV3Schema
		*root = withRules(*root, path, func(in apiextensionsv1.ValidationRules) apiextensionsv1.ValidationRules {
			out := apiextensionsv1.ValidationRules{}
			for _, r := range in {
				if match(r) {
					rule = apiextensionsv1.ValidationRules{r}
				} else {
					out = append(out, r)
				}
			}
			if on {
				out = append(out, rule...)
			}
			return out
		})
		if err := crds.Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	setRule(false)
	if len(rule) != 1 {
		t.Fatalf("the CRD %s has no such rule at %v", crd, path)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			setRule(true)
			envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD with the rule to be served"),
				func() bool { return !accepted() })
		}
	}
	t.Cleanup(restore)
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD without the rule to be served"), accepted)
	create()
	restore()
}

// withRules returns s with edit applied to the CEL rules of the schema at path below it (properties are values,
// so each level is written back).
func withRules(s apiextensionsv1.JSONSchemaProps, path []string,
	edit func(apiextensionsv1.ValidationRules) apiextensionsv1.ValidationRules) apiextensionsv1.JSONSchemaProps {
	if len(path) == 0 {
		s.XValidations = edit(s.XValidations)
		return s
	}
	s.Properties[path[0]] = withRules(s.Properties[path[0]], path[1:], edit)
	return s
}
