package main

import (
	"bytes"
	"io"
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
	code := fingerprintCmd(args, strings.NewReader(stdin), &out, &errOut, func(io.Reader) bool { return false })
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

const payManifest = `apiVersion: actions.actionledger.dev/v1alpha1
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
	code, out, errOut := runFingerprint(t, "", "-f", writeFile(t, "xa.yaml", payManifest))
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
	if got := strings.TrimSpace(out); got != "shop/pay-42 "+want {
		t.Fatalf("CLI printed %q, the controller stores %q", got, want)
	}
	if !strings.HasPrefix(want, "sha256:") || len(want) != len("sha256:")+64 {
		t.Errorf("fingerprint %q is not sha256:<64 hex>", want)
	}
	// A different body is a different fingerprint (the CLI is not printing a constant).
	code, other, _ := runFingerprint(t, "", "-f", writeFile(t, "xa.yaml", strings.Replace(payManifest, "amount: 100", "amount: 200", 1)))
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
		"not YAML":    {"{{{ not yaml", "not valid YAML or JSON"},
		"unknown field": {"apiVersion: actions.actionledger.dev/v1alpha1\nkind: ExternalAction\nmetadata: {name: a}\nspec: {destinationRef: {name: d}, request: {}}\nextra: 1\n",
			`not a valid ExternalAction: error unmarshaling JSON: while decoding JSON: json: unknown field "extra"`},
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

// fingerprintOf is what the CLI must print for an ExternalAction named name with this spec.
func fingerprintOf(t *testing.T, spec actionsv1alpha1.ExternalActionSpec) string {
	t.Helper()
	fp, err := fingerprint.Compute(&spec)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// downYAML is the "A destination that is down" manifest of docs/getting-started.md, read from the page so
// that the documented file stays one the CLI reads.
func downYAML(t *testing.T) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "```yaml\n# down.yaml\n")
	if !ok {
		t.Fatal("docs/getting-started.md has no ```yaml block starting with # down.yaml")
	}
	block, _, _ := strings.Cut(rest, "```")
	return block
}

// Every document of a multi-document file is read: each ExternalAction gets one "NAME FINGERPRINT" line in
// file order, the items of a List are included, and everything else is named on stderr as skipped.
func TestFingerprintMultiDocument(t *testing.T) {
	xa := func(name, path string) string {
		return "apiVersion: actions.actionledger.dev/v1alpha1\nkind: ExternalAction\nmetadata: {name: " + name +
			"}\nspec: {destinationRef: {name: d}, request: {path: " + path + "}}\n"
	}
	spec := func(dest, path string) actionsv1alpha1.ExternalActionSpec {
		return actionsv1alpha1.ExternalActionSpec{DestinationRef: actionsv1alpha1.DestinationReference{Name: dest},
			Request: actionsv1alpha1.ActionRequest{Path: path}}
	}
	ticket := fingerprintOf(t, actionsv1alpha1.ExternalActionSpec{
		DestinationRef: actionsv1alpha1.DestinationReference{Name: "down"},
		Request: actionsv1alpha1.ActionRequest{Method: "POST", Path: "/tickets",
			Body: &apiextensionsv1.JSON{Raw: []byte(`{"title":"disk full"}`)}},
	})
	a, b := fingerprintOf(t, spec("d", "/a")), fingerprintOf(t, spec("d", "/b"))
	for _, tc := range []struct {
		name, input string
		wantCode    int
		wantOut     []string
		wantErr     []string
	}{{
		name: "the getting-started down.yaml (a Destination, then an ExternalAction)", input: downYAML(t),
		wantOut: []string{"ticket-1 " + ticket},
		wantErr: []string{"skipped Destination/down (document 1): not an ExternalAction"},
	}, {
		name: "a v1 List with two actions and a ConfigMap, then a Destination and empty documents",
		input: `apiVersion: v1
kind: List
items:
- apiVersion: actions.actionledger.dev/v1alpha1
  kind: ExternalAction
  metadata: {name: a}
  spec: {destinationRef: {name: d}, request: {path: /a}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: cm}}
- apiVersion: actions.actionledger.dev/v1alpha1
  kind: ExternalAction
  metadata: {name: b}
  spec: {destinationRef: {name: d}, request: {path: /b}}
---
---
apiVersion: actions.actionledger.dev/v1alpha1
kind: Destination
metadata: {name: d}
spec: {url: 'http://x'}
---
`,
		wantOut: []string{"a " + a, "b " + b},
		wantErr: []string{"skipped ConfigMap/cm (document 1): not an ExternalAction", "skipped Destination/d (document 2): not an ExternalAction"},
	}, {
		name: "an ExternalActionList and a namespaced action",
		input: `apiVersion: actions.actionledger.dev/v1alpha1
kind: ExternalActionList
items:
- {apiVersion: actions.actionledger.dev/v1alpha1, kind: ExternalAction, metadata: {name: a},
   spec: {destinationRef: {name: d}, request: {path: /a}}}
---
` + strings.Replace(xa("b", "/b"), "{name: b}", "{name: b, namespace: shop}", 1),
		wantOut: []string{"a " + a, "shop/b " + b},
	}, {
		name:    "a JSON stream of two objects",
		input:   `{"apiVersion":"actions.actionledger.dev/v1alpha1","kind":"ExternalAction","metadata":{"name":"a"},"spec":{"destinationRef":{"name":"d"},"request":{"path":"/a"}}}` + "\n" + `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}`,
		wantOut: []string{"a " + a},
		wantErr: []string{"skipped Secret/s (document 2): not an ExternalAction"},
	}, {
		name:     "an invalid ExternalAction among valid ones: the valid ones are printed, exit 1",
		input:    xa("a", "/a") + "---\n" + strings.Replace(xa("bad", "/x"), "spec:", "spek: 1\nspec:", 1) + "---\n" + xa("b", "/b"),
		wantCode: 1, wantOut: []string{"a " + a, "b " + b},
		wantErr: []string{`skipped ExternalAction/bad (document 2): not a valid ExternalAction: `, `unknown field "spek"`},
	}, {
		name: "only a Destination", input: "apiVersion: actions.actionledger.dev/v1alpha1\nkind: Destination\nmetadata: {name: d}\nspec: {url: 'http://x'}\n",
		wantCode: 1, wantErr: []string{"skipped Destination/d (document 1): not an ExternalAction", "holds no ExternalAction"},
	}, {
		name: "another apiVersion", input: strings.Replace(xa("a", "/a"), "v1alpha1", "v9", 1),
		wantCode: 1, wantErr: []string{`skipped ExternalAction/a (document 1): apiVersion "actions.actionledger.dev/v9", want actions.actionledger.dev/v1alpha1`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runFingerprint(t, "", "-f", writeFile(t, "m.yaml", tc.input))
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.wantCode, errOut)
			}
			want := strings.Join(tc.wantOut, "\n")
			if want != "" {
				want += "\n"
			}
			if out != want {
				t.Errorf("stdout\n%s\nwant\n%s", out, want)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not contain %q", errOut, w)
				}
			}
			if len(tc.wantErr) == 0 && errOut != "" {
				t.Errorf("unexpected stderr %q", errOut)
			}
		})
	}
}

// failingReader fails the test when it is read: the CLI must not wait on an interactive terminal.
type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Error("the CLI read standard input although it is a terminal and no -f was given")
	return 0, io.EOF
}

// On a terminal without -f the CLI prints its usage (exit 2) instead of waiting; with -f - it reads stdin.
func TestFingerprintTerminalPrintsUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	code := fingerprintCmd(nil, failingReader{t}, &out, &errOut, func(io.Reader) bool { return true })
	if code != 2 || out.Len() != 0 || !strings.Contains(errOut.String(), "Usage: actionledger fingerprint [-f FILE]") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	code = fingerprintCmd([]string{"-f", "-"}, strings.NewReader(payManifest), &out, &errOut, func(io.Reader) bool { return true })
	if code != 0 || !strings.HasPrefix(out.String(), "shop/pay-42 sha256:") {
		t.Errorf("-f - on a terminal: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	// The real check: a pipe is not a terminal, /dev/null is not either (a character device, but no tty).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(); _ = w.Close() }()
	if stdinIsTerminal(r) || stdinIsTerminal(strings.NewReader("")) {
		t.Error("a pipe or a strings.Reader counted as a terminal")
	}
}
