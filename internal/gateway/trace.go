package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/tracing"
)

// continueTrace continues the caller's W3C traceparent (docs/tracing.md): with tracing on, the create is a span
// of the caller's trace; the action to create gets the traceparent of that span (or, with tracing off, the
// caller's as it came) in the annotation actions.actionledger.dev/traceparent, so that its attempts join the
// caller's trace. A request without a valid traceparent starts none (tracing off) or a new trace (on).
func continueTrace(r *http.Request, xa *actionsv1alpha1.ExternalAction) (context.Context, trace.Span) {
	ctx, span := tracing.FromRequest(r, "gateway create")
	if tp := tracing.Traceparent(trace.SpanContextFromContext(ctx)); tp != "" {
		if xa.Annotations == nil {
			xa.Annotations = map[string]string{}
		}
		xa.Annotations[actionsv1alpha1.AnnotationTraceparent] = tp
	}
	return ctx, span
}
