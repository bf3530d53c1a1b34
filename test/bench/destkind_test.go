package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// The kinds of bench Destination (BENCH_DESTS), measured side by side in the throughput parts (headline,
// sizes, destlatency). Both point at the recording destination, which deduplicates on the key either way; the
// kind is what the Destination declares, so what the manager believes (issue 24).
const (
	// destUnsafe: spec.idempotency.supported false and effect Unsafe. Repeating is not safe, so the manager
	// claims every attempt before sending it.
	destUnsafe = "unsafe"
	// destSafe: spec.idempotency.supported true, and spec.idempotency.claim WhenUnsafe when the installed CRD
	// has that field (no claim written before a send that is safe to repeat).
	destSafe = "safe"
	// claimWhenUnsafe is the spec.idempotency.claim of the safe kind.
	claimWhenUnsafe = "WhenUnsafe"
)

// parseDests parses BENCH_DESTS, a comma list of destination kinds ("unsafe,safe"); an empty string is def.
// Unknown kinds and duplicates are refused (a typo in a benchmark knob must not silently measure something
// else).
func parseDests(v string, def []string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return def, nil
	}
	var out []string
	for s := range strings.SplitSeq(v, ",") {
		k := strings.TrimSpace(s)
		if k != destUnsafe && k != destSafe {
			return nil, fmt.Errorf("BENCH_DESTS item %q: want %s or %s", s, destUnsafe, destSafe)
		}
		if slices.Contains(out, k) {
			return nil, fmt.Errorf("BENCH_DESTS item %q: listed twice", s)
		}
		out = append(out, k)
	}
	return out, nil
}

// crdHasField reports whether the installed Destination CRD's schema (served version of actionsv1alpha1) has
// the field spec.<path...>, for example ("concurrency", "maxInFlight").
func crdHasField(e *envtestutil.Env, path ...string) (bool, error) {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	name := "destinations." + actionsv1alpha1.GroupVersion.Group
	if err := e.Client.Get(context.Background(), types.NamespacedName{Name: name}, crd); err != nil {
		return false, fmt.Errorf("reading CRD %s: %w", name, err)
	}
	fields := []string{"schema", "openAPIV3Schema", "properties", "spec"}
	for _, p := range path {
		fields = append(fields, "properties", p)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		vm, ok := v.(map[string]any)
		if !ok || vm["name"] != actionsv1alpha1.GroupVersion.Version {
			continue
		}
		_, found, _ := unstructured.NestedMap(vm, fields...)
		return found, nil
	}
	return false, nil
}

// keptDest is what the API server kept of a bench Destination's optional fields: spec.concurrency.maxInFlight
// (0: not set) and spec.idempotency.claim ("": not set).
type keptDest struct {
	MaxInFlight int
	Claim       string
}

// createBenchDestination creates Destination name at url in ns as an unstructured object, so the bench builds
// before the API type has the fields of other branches. The optional fields (spec.concurrency.maxInFlight =
// d.MaxInFlight; spec.idempotency.claim = WhenUnsafe for the safe kind) are written only when the installed CRD
// has them and a dry run keeps them; a missing field, or a value the API server prunes or refuses (above the
// CRD's maximum, say), is logged once as a note, and the Destination is created without it.
func createBenchDestination(t *testing.T, e *envtestutil.Env, ns, name, url string, d benchDest) keptDest {
	t.Helper()
	u := benchDestination(t, ns, name, url, d)
	optional(t, e, u, int64(d.MaxInFlight), fmt.Sprintf("BENCH_MAX_IN_FLIGHT=%d", d.MaxInFlight), "concurrency", "maxInFlight")
	if d.Kind == destSafe {
		optional(t, e, u, claimWhenUnsafe, "the safe destination's claim: "+claimWhenUnsafe, "idempotency", "claim")
	}
	if err := e.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("creating Destination: %v", err)
	}
	var kept keptDest
	if v, found, _ := unstructured.NestedInt64(u.Object, "spec", "concurrency", "maxInFlight"); found {
		kept.MaxInFlight = int(v)
	}
	kept.Claim, _, _ = unstructured.NestedString(u.Object, "spec", "idempotency", "claim")
	return kept
}

// benchDestination is the bench Destination of kind d.Kind without its optional fields.
func benchDestination(t *testing.T, ns, name, url string, d benchDest) *unstructured.Unstructured {
	t.Helper()
	spec := actionsv1alpha1.DestinationSpec{URL: url, Effect: actionsv1alpha1.EffectUnsafe,
		Idempotency: &actionsv1alpha1.IdempotencyConfig{Supported: d.Kind == destSafe}}
	if d.Latency > 10*time.Second {
		// The attempt must end before the default 30 s timeout; give slow destinations room (at most 10m).
		spec.Timeout = &metav1.Duration{Duration: min(3*d.Latency, 10*time.Minute)}
	}
	typed := &actionsv1alpha1.Destination{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	typed.SetGroupVersionKind(actionsv1alpha1.GroupVersion.WithKind("Destination"))
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	// Explicit, not omitted: the unsafe kind says it in its spec.
	if err := unstructured.SetNestedField(u.Object, d.Kind == destSafe, "spec", "idempotency", "supported"); err != nil {
		t.Fatal(err)
	}
	return u
}

// optional sets spec.<path...> = value on u when the CRD has the field and a dry-run create keeps it; otherwise
// it logs why not, once, naming what (the knob or the purpose of the field).
func optional(t *testing.T, e *envtestutil.Env, u *unstructured.Unstructured, value any, what string, path ...string) {
	t.Helper()
	field := "spec." + strings.Join(path, ".")
	has, err := crdHasField(e, path...)
	if err != nil {
		t.Fatal(err)
	}
	if !has {
		noteOnce(t, fmt.Sprintf("note: the Destination CRD has no %s; %s not applied", field, what))
		return
	}
	full := append([]string{"spec"}, path...)
	with := u.DeepCopy()
	if err := unstructured.SetNestedField(with.Object, value, full...); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Create(context.Background(), with, client.DryRunAll); err != nil {
		noteOnce(t, fmt.Sprintf("note: the API server refused %s=%v (%v); %s not applied", field, value, err, what))
		return
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(with.Object, full...); !found {
		noteOnce(t, fmt.Sprintf("note: the API server pruned %s; %s not applied", field, what))
		return
	}
	if err := unstructured.SetNestedField(u.Object, value, full...); err != nil {
		t.Fatal(err)
	}
}

// destLabel names a run's destination in logs and tables: its kind, and for the safe kind whether the
// Destination kept spec.idempotency.claim.
func destLabel(kind, claim string) string {
	if kind == destSafe && claim == "" {
		return kind + " (no claim field)"
	}
	return kind
}

// TestDestKinds checks BENCH_DESTS parsing and the labels (no control plane).
func TestDestKinds(t *testing.T) {
	got, err := parseDests(" unsafe, safe", []string{destUnsafe})
	if err != nil || fmt.Sprint(got) != "[unsafe safe]" {
		t.Fatalf("parseDests: %v, %v", got, err)
	}
	if got, err := parseDests("", []string{destSafe}); err != nil || fmt.Sprint(got) != "[safe]" {
		t.Fatalf("empty knob: %v, %v; want the default", got, err)
	}
	for _, bad := range []string{"fast", "safe,safe", "unsafe,", "Unsafe"} {
		if _, err := parseDests(bad, nil); err == nil {
			t.Errorf("parseDests(%q) accepted", bad)
		}
	}
	if l := destLabel(destSafe, ""); l != "safe (no claim field)" {
		t.Errorf("destLabel = %q", l)
	}
	if l := destLabel(destSafe, claimWhenUnsafe); l != destSafe {
		t.Errorf("destLabel = %q", l)
	}
	if l := destLabel(destUnsafe, ""); l != destUnsafe {
		t.Errorf("destLabel = %q", l)
	}
}
