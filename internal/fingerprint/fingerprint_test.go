package fingerprint

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

func spec(method, path, body string, headers map[string]string) *actionsv1alpha1.ExternalActionSpec {
	s := &actionsv1alpha1.ExternalActionSpec{
		DestinationRef: actionsv1alpha1.DestinationReference{Name: "payments"},
		Request:        actionsv1alpha1.ActionRequest{Method: method, Path: path},
	}
	if headers != nil {
		s.Request.Headers = make(map[string]actionsv1alpha1.HeaderValue, len(headers))
		for k, v := range headers {
			s.Request.Headers[k] = actionsv1alpha1.HeaderValue(v)
		}
	}
	if body != "" {
		s.Request.Body = &apiextensionsv1.JSON{Raw: []byte(body)}
	}
	return s
}

func mustCompute(t *testing.T, s *actionsv1alpha1.ExternalActionSpec) string {
	t.Helper()
	fp, err := Compute(s)
	if err != nil {
		t.Fatalf("Compute: %v", err)
	}
	return fp
}

func TestComputeStableAcrossEquivalentForms(t *testing.T) {
	base := mustCompute(t, spec("POST", "/charges", `{"amount":100,"currency":"EUR"}`, map[string]string{"X-Tenant": "a"}))
	if !strings.HasPrefix(base, Prefix) || len(base) != len(Prefix)+64 {
		t.Fatalf("fingerprint %q is not sha256:<64 hex>", base)
	}
	equivalent := map[string]*actionsv1alpha1.ExternalActionSpec{
		"key order":   spec("POST", "/charges", `{"currency":"EUR","amount":100}`, map[string]string{"X-Tenant": "a"}),
		"whitespace":  spec("POST", "/charges", "{ \"amount\" : 100 ,\n \"currency\":\"EUR\" }", map[string]string{"X-Tenant": "a"}),
		"number form": spec("POST", "/charges", `{"amount":1e2,"currency":"EUR"}`, map[string]string{"X-Tenant": "a"}),
		"header case": spec("POST", "/charges", `{"amount":100,"currency":"EUR"}`, map[string]string{"x-tenant": "a"}),
		"method case": spec("post", "/charges", `{"amount":100,"currency":"EUR"}`, map[string]string{"X-Tenant": "a"}),
		"defaulted kind (server)": func() *actionsv1alpha1.ExternalActionSpec {
			s := spec("POST", "/charges", `{"amount":100,"currency":"EUR"}`, map[string]string{"X-Tenant": "a"})
			s.DestinationRef.Kind = "Destination"
			return s
		}(),
	}
	for name, s := range equivalent {
		if got := mustCompute(t, s); got != base {
			t.Errorf("%s: fingerprint changed: %s != %s", name, got, base)
		}
	}
	// Server-side defaulting of method and path.
	if a, b := mustCompute(t, spec("", "", `{"a":1}`, nil)), mustCompute(t, spec("POST", "/", `{"a":1}`, nil)); a != b {
		t.Errorf("defaulted method/path changed the fingerprint: %s != %s", a, b)
	}
	// Absent, empty and null bodies and header maps are the same input.
	if a, b := mustCompute(t, spec("POST", "/x", "", nil)), mustCompute(t, spec("POST", "/x", "null", map[string]string{})); a != b {
		t.Errorf("absent and null body differ: %s != %s", a, b)
	}
}

func TestComputeDistinguishesMeaningfulChanges(t *testing.T) {
	base := mustCompute(t, spec("POST", "/charges", `{"amount":100}`, nil))
	different := map[string]*actionsv1alpha1.ExternalActionSpec{
		"body value (C04)": spec("POST", "/charges", `{"amount":200}`, nil),
		"path (C04)":       spec("POST", "/refunds", `{"amount":100}`, nil),
		"method":           spec("PUT", "/charges", `{"amount":100}`, nil),
		"header":           spec("POST", "/charges", `{"amount":100}`, map[string]string{"x-a": "1"}),
		"number type":      spec("POST", "/charges", `{"amount":"100"}`, nil),
		"destination": func() *actionsv1alpha1.ExternalActionSpec {
			s := spec("POST", "/charges", `{"amount":100}`, nil)
			s.DestinationRef.Name = "other"
			return s
		}(),
		"cluster destination": func() *actionsv1alpha1.ExternalActionSpec {
			s := spec("POST", "/charges", `{"amount":100}`, nil)
			s.DestinationRef.Kind = "ClusterDestination"
			return s
		}(),
		"successWhen": func() *actionsv1alpha1.ExternalActionSpec {
			s := spec("POST", "/charges", `{"amount":100}`, nil)
			s.SuccessWhen = "response.statusCode == 201"
			return s
		}(),
	}
	for name, s := range different {
		if got := mustCompute(t, s); got == base {
			t.Errorf("%s: fingerprint did not change", name)
		}
	}
}

func TestComputeIgnoresNonFingerprintedFields(t *testing.T) {
	a := spec("POST", "/charges", `{"amount":100}`, nil)
	b := spec("POST", "/charges", `{"amount":100}`, nil)
	ttl := int32(60)
	attempts := int32(2)
	b.TTLSecondsAfterFinished = &ttl
	b.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &attempts}
	if mustCompute(t, a) != mustCompute(t, b) {
		t.Error("retryPolicy or ttlSecondsAfterFinished changed the fingerprint")
	}
}

func TestCanonicalBodyRejectsInvalidJSON(t *testing.T) {
	if _, err := Compute(spec("POST", "/x", `{"a":`, nil)); err == nil {
		t.Fatal("want an error for invalid JSON")
	}
}

func TestCanonicalIsRFC8785(t *testing.T) {
	got, err := CanonicalBody([]byte(`{"b":[1.0,2e0,"\u00e9"],"a":{"z":null,"y":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":{"y":true,"z":null},"b":[1,2,"é"]}`
	if string(got) != want {
		t.Fatalf("canonical = %s, want %s", got, want)
	}
}

// spec.subject only orders actions: it is not part of the fingerprint, so existing fingerprints and
// tombstones stay valid when a subject is added to new actions.
func TestSubjectNotInFingerprint(t *testing.T) {
	spec := actionsv1alpha1.ExternalActionSpec{
		DestinationRef: actionsv1alpha1.DestinationReference{Name: "payments"},
		Request:        actionsv1alpha1.ActionRequest{Method: "POST", Path: "/charges"},
	}
	without, err := Compute(&spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Subject = "order/19"
	with, err := Compute(&spec)
	if err != nil {
		t.Fatal(err)
	}
	if with != without {
		t.Errorf("fingerprint with subject %s, without %s: want equal", with, without)
	}
}

// spec.outputs is not part of the fingerprint: adding outputs (or another target, values or retain) to a spec
// gives the fingerprint it had without them, so stored fingerprints and tombstones stay valid.
func TestOutputsNotInFingerprint(t *testing.T) {
	base := spec("POST", "/orders", `{"sku":"a"}`, nil)
	want := mustCompute(t, base)
	wantCanonical, err := Canonical(base)
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]*actionsv1alpha1.ActionOutputs{
		"secret":    {SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"id": "response.body.id"}},
		"configmap": {ConfigMapName: "out2", Values: map[string]actionsv1alpha1.OutputExpression{"a": "1", "b": "2"}, Retain: true},
	} {
		s := spec("POST", "/orders", `{"sku":"a"}`, nil)
		s.Outputs = o
		if got := mustCompute(t, s); got != want {
			t.Errorf("%s: fingerprint with outputs %s, without %s", name, got, want)
		}
		if got, _ := Canonical(s); string(got) != string(wantCanonical) {
			t.Errorf("%s: canonical input with outputs %s, without %s", name, got, wantCanonical)
		}
	}
}
