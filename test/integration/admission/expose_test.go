package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	exposeMissing = "a ClusterDestination must say what its tenants may read of its responses: set response.expose"
	exposeCookie  = "response.expose.headers may not name Set-Cookie, Set-Cookie2, Cookie, Authorization"
	pointerSyntax = "should match '^(/([^~]|~[01])*)*$'"
)

// exposing is a ClusterDestination with response.expose e (nil: response absent).
func exposing(e *actionsv1alpha1.ResponseExposure) *actionsv1alpha1.ClusterDestination {
	cd := clusterDestination(nil)
	cd.Spec.Response = nil
	if e != nil {
		cd.Spec.Response = &actionsv1alpha1.ClusterResponsePolicy{Expose: e}
	}
	return cd
}

func names(prefix string, n, size int) []string {
	out := make([]string, n)
	for i := range out {
		s := fmt.Sprintf("%s%d-", prefix, i)
		out[i] = s + strings.Repeat("a", size-len(s))
	}
	return out
}

// Tenancy row 7: a new ClusterDestination must say what its tenants read of its responses (without the
// admission policy that writes {}), may not expose a header that carries a session or credential, and names
// body parts by RFC 6901 JSON Pointers; the lists and their strings are bounded.
func TestClusterDestinationExposeAdmission(t *testing.T) {
	noResponse := exposing(nil)
	emptyResponse := exposing(nil)
	emptyResponse.Spec.Response = &actionsv1alpha1.ClusterResponsePolicy{}
	run(t, []admissionCase{
		{"no response", noResponse, exposeMissing},
		{"response without expose", emptyResponse, exposeMissing},
		{"expose {}", exposing(&actionsv1alpha1.ResponseExposure{}), ""},
		{"headers and pointers", exposing(&actionsv1alpha1.ResponseExposure{Headers: []string{"X-Request-Id", "location"},
			Body: []string{"", "/id", "/items/0/status", "/a~1b/m~0n", "/"}}), ""},
		{"Set-Cookie", exposing(&actionsv1alpha1.ResponseExposure{Headers: []string{"Set-Cookie"}}), exposeCookie},
		{"set-cookie in another case", exposing(&actionsv1alpha1.ResponseExposure{Headers: []string{"sEt-CoOkIe"}}), exposeCookie},
		{"Set-Cookie2", exposing(&actionsv1alpha1.ResponseExposure{Headers: []string{"Set-Cookie2"}}), exposeCookie},
		{"Authorization", exposing(&actionsv1alpha1.ResponseExposure{Headers: []string{"authorization"}}), exposeCookie},
		{"Authentication-Info", exposing(&actionsv1alpha1.ResponseExposure{Headers: []string{"Authentication-Info"}}), exposeCookie},
		{"header not a token", exposing(&actionsv1alpha1.ResponseExposure{Headers: []string{"X Id"}}), tokenName},
		{"32 headers of 256", exposing(&actionsv1alpha1.ResponseExposure{Headers: names("h", 32, 256)}), ""},
		{"33 headers", exposing(&actionsv1alpha1.ResponseExposure{Headers: names("h", 33, 8)}), "must have at most 32 items"},
		{"a header of 257", exposing(&actionsv1alpha1.ResponseExposure{Headers: names("h", 1, 257)}), "may not be more than 256"},
		{"pointer without '/'", exposing(&actionsv1alpha1.ResponseExposure{Body: []string{"id"}}), pointerSyntax},
		{"pointer with ~2", exposing(&actionsv1alpha1.ResponseExposure{Body: []string{"/a~2"}}), pointerSyntax},
		{"32 pointers of 256", exposing(&actionsv1alpha1.ResponseExposure{Body: names("/p", 32, 256)}), ""},
		{"33 pointers", exposing(&actionsv1alpha1.ResponseExposure{Body: names("/p", 33, 8)}), "must have at most 32 items"},
		{"a pointer of 257", exposing(&actionsv1alpha1.ResponseExposure{Body: names("/p", 1, 257)}), "may not be more than 256"},
	})
}

// With config/admission/response_expose_policy.yaml installed, a new ClusterDestination without
// response.expose gets {} (the status code only); one that states expose keeps it.
func TestNewClusterDestinationExposesTheStatusCode(t *testing.T) {
	ctx := context.Background()
	// The other tests of this package expect the CRD's refusal: once the policy is removed (the cleanups of
	// installFile, which run first), wait until it is no longer applied.
	t.Cleanup(func() {
		envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("the removed policy to stop defaulting expose"), func() bool {
			return env.Client.Create(ctx, exposing(nil), client.DryRunAll) != nil
		})
	})
	installFile(t, "config/admission/response_expose_policy.yaml")
	var cd *actionsv1alpha1.ClusterDestination
	envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("the policy to default response.expose"), func() bool {
		cd = exposing(nil)
		return env.Client.Create(ctx, cd, client.DryRunAll) == nil && cd.Spec.Response != nil && cd.Spec.Response.Expose != nil
	})
	if e := cd.Spec.Response.Expose; len(e.Headers) != 0 || len(e.Body) != 0 {
		t.Errorf("defaulted expose = %+v, want {}", e)
	}
	empty := exposing(nil)
	empty.Spec.Response = &actionsv1alpha1.ClusterResponsePolicy{}
	if err := env.Client.Create(ctx, empty, client.DryRunAll); err != nil || empty.Spec.Response.Expose == nil {
		t.Errorf("response {}: err %v, response %+v; want expose {}", err, empty.Spec.Response)
	}
	listed := exposing(&actionsv1alpha1.ResponseExposure{Body: []string{"/id"}})
	if err := env.Client.Create(ctx, listed, client.DryRunAll); err != nil || strings.Join(listed.Spec.Response.Expose.Body, ",") != "/id" {
		t.Errorf("explicit expose: err %v, response %+v", err, listed.Spec.Response)
	}
	if err := env.Client.Create(ctx, exposing(&actionsv1alpha1.ResponseExposure{Headers: []string{"Set-Cookie"}}), client.DryRunAll); err == nil ||
		!strings.Contains(err.Error(), exposeCookie) {
		t.Errorf("Set-Cookie with the policy installed: %v, want the refusal", err)
	}
}

// A ClusterDestination stored before response.expose existed keeps working after the rule that asks a new one
// for it arrives: it reads back without expose (no CRD default fills it in, so its tenants keep the whole
// response), and status writes, metadata edits and other spec edits succeed. Setting expose is accepted;
// removing it again is refused.
func TestStoredClusterDestinationKeepsItsWholeResponse(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	crdKey := client.ObjectKey{Name: "clusterdestinations.actions.actionledger.dev"}
	installed := &apiextensionsv1.CustomResourceDefinition{}
	if err := crds.Get(ctx, crdKey, installed); err != nil {
		t.Fatal(err)
	}
	var exposeRule apiextensionsv1.ValidationRules
	for _, r := range installed.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].XValidations {
		if r.FieldPath == ".response" {
			exposeRule = append(exposeRule, r)
		}
	}
	if len(exposeRule) != 1 || exposeRule[0].OptionalOldSelf == nil || !*exposeRule[0].OptionalOldSelf {
		t.Fatalf("the installed ClusterDestination CRD has %d expose rules on spec, want one with optionalOldSelf", len(exposeRule))
	}
	setRule := func(on bool) {
		t.Helper()
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(ctx, crdKey, crd); err != nil {
			t.Fatal(err)
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		rules := apiextensionsv1.ValidationRules{}
		for _, r := range spec.XValidations {
			if r.FieldPath != ".response" {
				rules = append(rules, r)
			}
		}
		if on {
			rules = append(rules, exposeRule...)
		}
		spec.XValidations = rules
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		if err := crds.Update(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	accepted := func() bool { return env.Client.Create(ctx, exposing(nil), client.DryRunAll) == nil }

	// The "old" CRD: no expose rule. Store a ClusterDestination without response.
	setRule(false)
	t.Cleanup(func() { setRule(true) })
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD without the expose rule to be served"), accepted)
	old := exposing(nil)
	old.Name = "stored-before-expose"
	env.Create(t, old)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, old) })

	setRule(true)
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD with the expose rule to be served"),
		func() bool { return !accepted() })

	cur := &actionsv1alpha1.ClusterDestination{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), cur); err != nil {
		t.Fatal(err)
	}
	if cur.Spec.Response != nil {
		t.Fatalf("the stored ClusterDestination reads back with response %+v, want none (the whole response)", cur.Spec.Response)
	}
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
		Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid", Message: "ratcheted",
	})
	if err := env.Client.Status().Update(ctx, cur); err != nil {
		t.Fatalf("status write on a ClusterDestination stored before expose: %v", err)
	}
	cur.Labels = map[string]string{"touched": "yes"}
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("metadata edit on a ClusterDestination stored before expose: %v", err)
	}
	cur.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("timeout edit on a ClusterDestination stored before expose: %v", err)
	}
	cur.Spec.Response = &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{Body: []string{"/id"}}}
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("setting expose: %v", err)
	}
	cur.Spec.Response = nil
	err = env.Client.Update(ctx, cur)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), exposeMissing) {
		t.Fatalf("removing expose again: err = %v, want the expose refusal", err)
	}
}
