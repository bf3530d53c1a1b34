package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/tracing"
)

// The gateway continues the caller's traceparent into the action it creates (annotation
// actions.actionledger.dev/traceparent): as it came with tracing off, and as the child span of the create
// with tracing on; a request without one starts nothing while off.
func TestCreateContinuesTheCallersTrace(t *testing.T) {
	const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req := func(tp string) *http.Request {
		r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/namespaces/shop/destinations/shop/x", nil)
		if tp != "" {
			r.Header.Set("traceparent", tp)
		}
		return r
	}
	xa := &actionsv1alpha1.ExternalAction{}
	_, span := continueTrace(req(caller), xa)
	span.End()
	if got := xa.Annotations[actionsv1alpha1.AnnotationTraceparent]; got != caller {
		t.Errorf("tracing off: annotation %q, want the caller's traceparent %q", got, caller)
	}
	plain := &actionsv1alpha1.ExternalAction{}
	_, span = continueTrace(req(""), plain)
	span.End()
	if _, ok := plain.Annotations[actionsv1alpha1.AnnotationTraceparent]; ok {
		t.Errorf("tracing off, no traceparent: annotation set")
	}

	shutdown, err := tracing.Setup(context.Background(), "gateway-test", func(k string) string {
		return map[string]string{"OTEL_TRACES_EXPORTER": "console"}[k]
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	on := &actionsv1alpha1.ExternalAction{}
	_, span = continueTrace(req(caller), on)
	span.End()
	got := on.Annotations[actionsv1alpha1.AnnotationTraceparent]
	if !strings.HasPrefix(got, "00-0af7651916cd43dd8448eb211c80319c-") || got == caller {
		t.Errorf("tracing on: annotation %q, want the caller's trace with the gateway's span", got)
	}
}
