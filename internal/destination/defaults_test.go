package destination

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
)

// The CRD files of the kinds whose fields the Go code mirrors.
const (
	destinationsCRD        = "actions.actionledger.dev_destinations.yaml"
	clusterDestinationsCRD = "actions.actionledger.dev_clusterdestinations.yaml"
	externalActionsCRD     = "actions.actionledger.dev_externalactions.yaml"
)

// schemaAt reads the generated CRD file (config/crd/bases) and returns the schema of its first version at path,
// dot-separated from the root ("spec.timeout"); a list's items are reached through the list's name.
func schemaAt(t *testing.T, file, path string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	raw, err := os.ReadFile("../../config/crd/bases/" + file)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	s := *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for name := range strings.SplitSeq(path, ".") {
		next, ok := s.Properties[name]
		if !ok {
			t.Fatalf("%s: no %s in the schema", file, path)
		}
		s = next
	}
	return s
}

// defaultAt is the CRD default of the string field at path.
func defaultAt(t *testing.T, file, path string) string {
	t.Helper()
	def := schemaAt(t, file, path).Default
	if def == nil {
		t.Fatalf("%s: %s has no default", file, path)
	}
	var s string
	if err := yaml.Unmarshal(def.Raw, &s); err != nil {
		t.Fatalf("%s: the default of %s: %v", file, path, err)
	}
	return s
}

// The per-attempt timeout and the idempotency header have one value each: the CRDs' defaults mirror the Go
// constants that the resolver, the claims (of attempts and of dead-letter deliveries) and the executor fall
// back to when a field is unset.
func TestDefaultsAgree(t *testing.T) {
	if httpexec.DefaultTimeout != actionsv1alpha1.DefaultTimeout {
		t.Fatalf("timeouts disagree: httpexec %s, API %s", httpexec.DefaultTimeout, actionsv1alpha1.DefaultTimeout)
	}
	for _, file := range []string{destinationsCRD, clusterDestinationsCRD} {
		s := defaultAt(t, file, "spec.timeout")
		if d, err := time.ParseDuration(s); err != nil || d != actionsv1alpha1.DefaultTimeout {
			t.Errorf("%s: spec.timeout defaults to %q, want %s (actionsv1alpha1.DefaultTimeout)", file, s,
				actionsv1alpha1.DefaultTimeout)
		}
		if h := defaultAt(t, file, "spec.idempotency.header"); h != DefaultIdempotencyHdr {
			t.Errorf("%s: spec.idempotency.header defaults to %q, want %q (DefaultIdempotencyHdr)", file, h,
				DefaultIdempotencyHdr)
		}
	}
}

// The bounds the Go code enforces on its own agree with the bounds the API server enforces: the ledger keeps
// as many finished attempts as status.attemptHistory admits, and the dispatcher cuts a destination's
// maxInFlight to the largest value admission accepts.
func TestBoundsAgree(t *testing.T) {
	if got := schemaAt(t, externalActionsCRD, "status.attemptHistory").MaxItems; got == nil || *got != ledger.HistoryLimit {
		t.Errorf("%s: status.attemptHistory has maxItems %s, want %d (ledger.HistoryLimit)", externalActionsCRD, show(got),
			ledger.HistoryLimit)
	}
	for _, file := range []string{destinationsCRD, clusterDestinationsCRD} {
		s := schemaAt(t, file, "spec.concurrency.maxInFlight")
		if s.Maximum == nil || *s.Maximum != dispatch.MaxMaxInFlight {
			t.Errorf("%s: spec.concurrency.maxInFlight has maximum %s, want %d (dispatch.MaxMaxInFlight)", file, show(s.Maximum),
				dispatch.MaxMaxInFlight)
		}
	}
}

// show prints a bound of the schema, or "none".
func show[N int64 | float64](n *N) string {
	if n == nil {
		return "none"
	}
	return fmt.Sprint(*n)
}
