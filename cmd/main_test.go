package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/fingerprint"
)

// runFingerprint runs "actionledger fingerprint" with args and returns its exit code, stdout and stderr.
func runFingerprint(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := fingerprintCmd(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const manifest = `apiVersion: actions.actionledger.dev/v1alpha1
kind: ExternalAction
metadata:
  name: pay-42
  namespace: shop
spec:
  destinationRef:
    name: payments
  request:
    method: POST
    path: /charges
    headers:
      X-Tenant: shop
    body:
      currency: EUR
      amount: 100
      items: [{sku: a, qty: 1}]
  successWhen: response.statusCode == 201
  ttlSecondsAfterFinished: 60
`

// The CLI prints what the controller stores in status.fingerprint: fingerprint.Compute of the spec as the API
// server stores it (defaults applied), which is what the controller hashes.
func TestFingerprintMatchesController(t *testing.T) {
	code, out, errOut := runFingerprint(t, "", "-f", writeFile(t, "xa.yaml", manifest))
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	stored := &actionsv1alpha1.ExternalActionSpec{
		DestinationRef: actionsv1alpha1.DestinationReference{Kind: "Destination", Name: "payments"},
		Request: actionsv1alpha1.ActionRequest{
			Method: "POST", Path: "/charges", Headers: map[string]actionsv1alpha1.HeaderValue{"X-Tenant": "shop"},
			Body: &apiextensionsv1.JSON{Raw: []byte(`{"amount":100,"currency":"EUR","items":[{"qty":1,"sku":"a"}]}`)},
		},
		SuccessWhen: "response.statusCode == 201",
	}
	want, err := fingerprint.Compute(stored)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != want {
		t.Fatalf("CLI printed %q, the controller stores %q", got, want)
	}
	if !strings.HasPrefix(want, "sha256:") || len(want) != len("sha256:")+64 {
		t.Errorf("fingerprint %q is not sha256:<64 hex>", want)
	}
	// A different body is a different fingerprint (the CLI is not printing a constant).
	code, other, _ := runFingerprint(t, "", "-f", writeFile(t, "xa.yaml", strings.Replace(manifest, "amount: 100", "amount: 200", 1)))
	if code != 0 || other == out {
		t.Errorf("a different amount printed %q (exit %d), the same as %q", other, code, out)
	}
}

// Key order, JSON instead of YAML, stdin and the defaults the API server would fill in
// (method POST, path "/", kind Destination) print the same fingerprint.
func TestFingerprintStableAcrossFormsAndDefaults(t *testing.T) {
	base := `{"apiVersion":"actions.actionledger.dev/v1alpha1","kind":"ExternalAction","metadata":{"name":"a"},` +
		`"spec":{"destinationRef":{"kind":"Destination","name":"d"},"request":{"method":"POST","path":"/","body":{"a":1,"b":[1,2]}}}}`
	forms := map[string]string{
		"reordered keys": `{"spec":{"request":{"body":{"b":[1,2],"a":1},"path":"/","method":"POST"},"destinationRef":{"name":"d","kind":"Destination"}},` +
			`"metadata":{"name":"a"},"kind":"ExternalAction","apiVersion":"actions.actionledger.dev/v1alpha1"}`,
		"defaults omitted": `{"apiVersion":"actions.actionledger.dev/v1alpha1","kind":"ExternalAction","metadata":{"name":"a"},` +
			`"spec":{"destinationRef":{"name":"d"},"request":{"body":{"a":1,"b":[1,2]}}}}`,
		"yaml": "apiVersion: actions.actionledger.dev/v1alpha1\nkind: ExternalAction\nmetadata: {name: a}\n" +
			"spec:\n  destinationRef: {name: d}\n  request:\n    method: POST\n    body: {b: [1, 2], a: 1}\n",
	}
	code, want, errOut := runFingerprint(t, "", "-f", writeFile(t, "base.json", base))
	if code != 0 {
		t.Fatalf("base: exit %d: %s", code, errOut)
	}
	for name, form := range forms {
		code, got, errOut := runFingerprint(t, "", "-f", writeFile(t, "form", form))
		if code != 0 || got != want {
			t.Errorf("%s: printed %q (exit %d, %s), want %q", name, got, code, errOut, want)
		}
	}
	if code, got, _ := runFingerprint(t, base, "-f", "-"); code != 0 || got != want {
		t.Errorf("stdin: printed %q (exit %d), want %q", got, code, want)
	}
	if code, got, _ := runFingerprint(t, base); code != 0 || got != want {
		t.Errorf("no -f (stdin default): printed %q (exit %d), want %q", got, code, want)
	}
}

// Anything but an ExternalAction is refused with a clear message and exit status 1.
func TestFingerprintRefusesOtherFiles(t *testing.T) {
	for name, tc := range map[string]struct{ content, wantErr string }{
		"a Destination": {"apiVersion: actions.actionledger.dev/v1alpha1\nkind: Destination\nmetadata: {name: d}\nspec: {url: 'http://x'}\n",
			"not an ExternalAction"},
		"a ConfigMap": {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n", "not an ExternalAction"},
		"no kind":     {"spec:\n  destinationRef: {name: d}\n", `kind ""`},
		"not YAML":    {"{{{ not yaml", "not an ExternalAction"},
		"unknown field": {"apiVersion: actions.actionledger.dev/v1alpha1\nkind: ExternalAction\nmetadata: {name: a}\nspec: {destinationRef: {name: d}, request: {}}\nextra: 1\n",
			"not an ExternalAction"},
	} {
		code, out, errOut := runFingerprint(t, "", "-f", writeFile(t, "f.yaml", tc.content))
		if code != 1 {
			t.Errorf("%s: exit %d, want 1 (stdout %q)", name, code, out)
		}
		if out != "" {
			t.Errorf("%s: printed %q on stdout", name, out)
		}
		if !strings.Contains(errOut, tc.wantErr) || !strings.HasPrefix(errOut, "actionledger fingerprint: ") {
			t.Errorf("%s: stderr %q, want a message containing %q", name, errOut, tc.wantErr)
		}
	}
	if code, _, errOut := runFingerprint(t, "", "-f", filepath.Join(t.TempDir(), "missing.yaml")); code != 1 || !strings.Contains(errOut, "missing.yaml") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
}
