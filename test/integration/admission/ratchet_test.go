package admission

import (
	"context"
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

// An object stored before a bound existed (here: a Destination with a 1h timeout, written while the CRD had no
// timeout rule) stays usable after the upgrade: Kubernetes' CRD validation ratcheting does not re-check a field
// an update leaves unchanged, so the controller's status writes and metadata edits still succeed, while changing
// the field itself must respect the bound. Without this a CRD upgrade would wedge existing destinations.
func TestStoredObjectsKeepWorkingAfterBoundsArrive(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	crdKey := client.ObjectKey{Name: "destinations.actions.actionledger.dev"}
	withTimeoutRule := &apiextensionsv1.CustomResourceDefinition{}
	if err := crds.Get(ctx, crdKey, withTimeoutRule); err != nil {
		t.Fatal(err)
	}
	setTimeoutRules := func(rules apiextensionsv1.ValidationRules) {
		t.Helper()
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(ctx, crdKey, crd); err != nil {
			t.Fatal(err)
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		timeout := spec.Properties["timeout"]
		timeout.XValidations = rules
		spec.Properties["timeout"] = timeout
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		if err := crds.Update(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	rules := withTimeoutRule.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["timeout"].XValidations
	if len(rules) == 0 {
		t.Fatal("the installed Destination CRD has no rule on spec.timeout")
	}
	// accepted dry-run creates a Destination with the given timeout and reports whether the server took it.
	accepted := func(timeout time.Duration) bool {
		return env.Client.Create(ctx, destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Timeout = &metav1.Duration{Duration: timeout}
		}), client.DryRunAll) == nil
	}

	// The "old" CRD: no bound on timeout. Store a Destination with a 1h timeout.
	setTimeoutRules(nil)
	t.Cleanup(func() { setTimeoutRules(rules) })
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD without the timeout rule to be served"),
		func() bool { return accepted(time.Hour) })
	old := destination(ns, func(s *actionsv1alpha1.DestinationSpec) { s.Timeout = &metav1.Duration{Duration: time.Hour} })
	env.Create(t, old)

	// The upgrade brings the bound back.
	setTimeoutRules(rules)
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD with the timeout rule to be served"),
		func() bool { return !accepted(time.Hour) })

	cur := &actionsv1alpha1.Destination{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), cur); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
		Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid", Message: "ratcheted",
	})
	if err := env.Client.Status().Update(ctx, cur); err != nil {
		t.Fatalf("status write on a Destination stored before the timeout bound: %v", err)
	}
	cur.Labels = map[string]string{"touched": "yes"}
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("metadata edit on a Destination stored before the timeout bound: %v", err)
	}
	cur.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Hour}
	err = env.Client.Update(ctx, cur)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "timeout must be a Go duration greater than 0s and at most 10m") {
		t.Fatalf("changing the stored timeout to 2h: err = %v, want the timeout refusal", err)
	}
}

// A ClusterDestination stored while admission only asked its keyFormat to contain {namespace} (here
// "{namespace}-{name}", which row 4 of issue 23 shows to be ambiguous) keeps working after the stricter rule
// arrives: the rule is a transition rule that passes while the keyFormat is unchanged, so status writes,
// metadata edits and edits of other spec fields succeed. A new or changed keyFormat must satisfy the rule.
func TestStoredClusterDestinationKeepsItsKeyFormat(t *testing.T) {
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
	// The rule is found by its fieldPath, so that the test follows the CRD rather than an index.
	var keyRule apiextensionsv1.ValidationRules
	for _, r := range installed.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].XValidations {
		if r.FieldPath == ".idempotency.keyFormat" {
			keyRule = append(keyRule, r)
		}
	}
	if len(keyRule) != 1 || keyRule[0].OptionalOldSelf == nil || !*keyRule[0].OptionalOldSelf {
		t.Fatalf("the installed ClusterDestination CRD has %d keyFormat rules on spec, want one with optionalOldSelf", len(keyRule))
	}
	// setKeyRule installs the CRD's spec rules without (on=false) or with the keyFormat rule.
	setKeyRule := func(on bool) {
		t.Helper()
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(ctx, crdKey, crd); err != nil {
			t.Fatal(err)
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		rules := apiextensionsv1.ValidationRules{}
		for _, r := range spec.XValidations {
			if r.FieldPath != ".idempotency.keyFormat" {
				rules = append(rules, r)
			}
		}
		if on {
			rules = append(rules, keyRule...)
		}
		spec.XValidations = rules
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		if err := crds.Update(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	ambiguous := "{namespace}-{name}"
	accepted := func(format string) bool {
		return env.Client.Create(ctx, clusterDestination(keyFormat(format)), client.DryRunAll) == nil
	}

	// The "old" CRD: no keyFormat rule beyond what the schema says. Store the ambiguous format.
	setKeyRule(false)
	t.Cleanup(func() { setKeyRule(true) })
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD without the keyFormat rule to be served"),
		func() bool { return accepted(ambiguous) })
	old := clusterDestination(keyFormat(ambiguous))
	old.Name = "stored-before-key-rule"
	env.Create(t, old)
	t.Cleanup(func() { _ = env.Client.Delete(ctx, old) })

	// The upgrade brings the rule.
	setKeyRule(true)
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD with the keyFormat rule to be served"),
		func() bool { return !accepted(ambiguous) })

	cur := &actionsv1alpha1.ClusterDestination{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), cur); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
		Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid", Message: "ratcheted",
	})
	if err := env.Client.Status().Update(ctx, cur); err != nil {
		t.Fatalf("status write on a ClusterDestination stored before the keyFormat rule: %v", err)
	}
	cur.Labels = map[string]string{"touched": "yes"}
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("metadata edit on a ClusterDestination stored before the keyFormat rule: %v", err)
	}
	cur.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("timeout edit on a ClusterDestination stored before the keyFormat rule: %v", err)
	}
	cur.Spec.Idempotency.KeyFormat = "{namespace}{name}"
	err = env.Client.Update(ctx, cur)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), keyNS) {
		t.Fatalf("changing the stored keyFormat to another ambiguous one: err = %v, want the keyFormat refusal", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Idempotency.KeyFormat = "{namespace}/{name}"
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("changing the stored keyFormat to {namespace}/{name}: %v", err)
	}
	cur.Spec.Idempotency.KeyFormat = ambiguous
	err = env.Client.Update(ctx, cur)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), keyNS) {
		t.Fatalf("changing the keyFormat back to %s: err = %v, want the keyFormat refusal", ambiguous, err)
	}
}

// Row 7 of issue 23: a Destination whose signing.hmac was stored before payload existed (it signs the body only)
// keeps working after the rule that asks a new signing.hmac for a payload arrives: the rule passes while the
// stored hmac has no payload, so status writes, metadata edits and edits of other hmac fields succeed. Setting
// payload is accepted; removing it again is refused. The stored object reads back without a payload (no CRD
// default fills it), so the controller keeps signing the body only, as its receiver verifies.
func TestStoredHMACKeepsSigningTheBody(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	crdKey := client.ObjectKey{Name: "destinations.actions.actionledger.dev"}
	// hmacSchema returns the schema of spec.signing.hmac in crd, and a function that puts a changed one back.
	hmacSchema := func(crd *apiextensionsv1.CustomResourceDefinition) (apiextensionsv1.JSONSchemaProps, func(apiextensionsv1.JSONSchemaProps)) {
		root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		spec := root.Properties["spec"]
		signing := spec.Properties["signing"]
		return signing.Properties["hmac"], func(h apiextensionsv1.JSONSchemaProps) {
			signing.Properties["hmac"] = h
			spec.Properties["signing"] = signing
			root.Properties["spec"] = spec
		}
	}
	installed := &apiextensionsv1.CustomResourceDefinition{}
	if err := crds.Get(ctx, crdKey, installed); err != nil {
		t.Fatal(err)
	}
	h, _ := hmacSchema(installed)
	var payloadRule apiextensionsv1.ValidationRules
	for _, r := range h.XValidations {
		if strings.Contains(r.Message, hmacPayload) {
			payloadRule = append(payloadRule, r)
		}
	}
	if len(payloadRule) != 1 || payloadRule[0].OptionalOldSelf == nil || !*payloadRule[0].OptionalOldSelf {
		t.Fatalf("the installed Destination CRD has %d payload rules on spec.signing.hmac, want one with optionalOldSelf", len(payloadRule))
	}
	setPayloadRule := func(on bool) {
		t.Helper()
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(ctx, crdKey, crd); err != nil {
			t.Fatal(err)
		}
		h, put := hmacSchema(crd)
		rules := apiextensionsv1.ValidationRules{}
		for _, r := range h.XValidations {
			if !strings.Contains(r.Message, hmacPayload) {
				rules = append(rules, r)
			}
		}
		if on {
			rules = append(rules, payloadRule...)
		}
		h.XValidations = rules
		put(h)
		if err := crds.Update(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	bodyOnly := func() *actionsv1alpha1.Destination {
		return destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Signing = &actionsv1alpha1.SigningConfig{HMAC: &actionsv1alpha1.HMACSigning{Header: "X-Hub-Signature-256",
				Prefix: "sha256=", SecretRef: actionsv1alpha1.SecretKeySelector{Name: "sig", Key: "secret"}}}
		})
	}
	accepted := func() bool { return env.Client.Create(ctx, bodyOnly(), client.DryRunAll) == nil }

	// The "old" CRD: no payload rule. Store a signing.hmac without payload.
	setPayloadRule(false)
	t.Cleanup(func() { setPayloadRule(true) })
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD without the payload rule to be served"), accepted)
	old := bodyOnly()
	env.Create(t, old)

	setPayloadRule(true)
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the CRD with the payload rule to be served"),
		func() bool { return !accepted() })

	cur := &actionsv1alpha1.Destination{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), cur); err != nil {
		t.Fatal(err)
	}
	if p := cur.Spec.Signing.HMAC.Payload; p != "" {
		t.Fatalf("the stored signing.hmac reads back with payload %q, want none (the body only)", p)
	}
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
		Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid", Message: "ratcheted",
	})
	if err := env.Client.Status().Update(ctx, cur); err != nil {
		t.Fatalf("status write on a Destination stored before the payload rule: %v", err)
	}
	cur.Labels = map[string]string{"touched": "yes"}
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("metadata edit on a Destination stored before the payload rule: %v", err)
	}
	cur.Spec.Signing.HMAC.Prefix = "v1="
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("prefix edit on a signing.hmac stored without payload: %v", err)
	}
	cur.Spec.Signing.HMAC.Payload = actionsv1alpha1.HMACPayloadKeyTimestampBody
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatalf("setting payload KeyTimestampBody: %v", err)
	}
	cur.Spec.Signing.HMAC.Payload = ""
	err = env.Client.Update(ctx, cur)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), hmacPayload) {
		t.Fatalf("removing payload again: err = %v, want the payload refusal", err)
	}
}
