package destination

import (
	"os"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
)

// The per-attempt timeout has one value: the CRD's default for spec.timeout mirrors the Go constant that the
// resolver, the ledger's claim and the executor fall back to.
func TestTimeoutDefaultsAgree(t *testing.T) {
	if DefaultTimeout != ledger.DefaultAttemptTimeout || httpexec.DefaultTimeout != ledger.DefaultAttemptTimeout {
		t.Fatalf("timeouts disagree: destination %s, ledger %s, httpexec %s", DefaultTimeout, ledger.DefaultAttemptTimeout,
			httpexec.DefaultTimeout)
	}
	for _, file := range []string{"actions.actionledger.dev_destinations.yaml", "actions.actionledger.dev_clusterdestinations.yaml"} {
		raw, err := os.ReadFile("../../config/crd/bases/" + file)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			t.Fatal(err)
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		def := spec.Properties["timeout"].Default
		if def == nil {
			t.Fatalf("%s: spec.timeout has no default", file)
		}
		var s string
		if err := yaml.Unmarshal(def.Raw, &s); err != nil {
			t.Fatal(err)
		}
		if d, err := time.ParseDuration(s); err != nil || d != DefaultTimeout {
			t.Errorf("%s: spec.timeout defaults to %q, want %s (DefaultTimeout)", file, s, DefaultTimeout)
		}
	}
}
