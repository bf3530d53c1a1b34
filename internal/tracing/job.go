package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/actionledger/actionledger/internal/dispatch"
)

// Attempt makes job's Run the attempt span: a client span named "attempt", child of the span in ctx (the
// reconcile that claimed it), carried across to the dispatcher's goroutine, with the destination, the method
// and the attempt number; done adds what the attempt returned (status code, error class, result) and keeps
// the span's context with the result before the span ends. The span's context is in Run's ctx, so that the
// request carries its traceparent (Inject). Off, with no span context in ctx, job is returned as it is.
func Attempt[R any](ctx context.Context, job dispatch.Job[R], method string, done func(R, trace.Span)) dispatch.Job[R] {
	parent := trace.SpanContextFromContext(ctx)
	if !parent.IsValid() {
		return job
	}
	return wrap(parent, job, "attempt", method, done)
}

// Delivery is Attempt for the delivery of a dead-letter record (internal/deadletter): a client span named
// "dead-letter delivery", whose destination is the sink.
func Delivery[R any](ctx context.Context, job dispatch.Job[R], done func(R, trace.Span)) dispatch.Job[R] {
	parent := trace.SpanContextFromContext(ctx)
	if !parent.IsValid() {
		return job
	}
	return wrap(parent, job, "dead-letter delivery", http.MethodPost, done)
}

// wrap is Attempt's wrapped job, apart so that a job that is not traced does not escape (no allocation).
func wrap[R any](parent trace.SpanContext, job dispatch.Job[R], name, method string, done func(R, trace.Span)) dispatch.Job[R] {
	run, dest, attempt := job.Run, job.Destination, int(job.Attempt)
	job.Run = func(jctx context.Context) R {
		if parent.IsRemote() {
			jctx = trace.ContextWithRemoteSpanContext(jctx, parent)
		} else {
			jctx = trace.ContextWithSpanContext(jctx, parent)
		}
		span := trace.SpanFromContext(jctx)
		if enabled.Load() {
			jctx, span = tr().Start(jctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
				attribute.String(AttrDestination, dest), attribute.Int(AttrAttempt, attempt),
				attribute.String("http.request.method", method)))
		}
		r := run(jctx)
		done(r, span)
		span.End()
		return r
	}
	return job
}

// Outcome sets the attributes of an attempt's outcome on span: the HTTP status code (0: none), the error class
// and the result class.
func Outcome(span trace.Span, statusCode int, errorClass, result string) {
	if !span.IsRecording() {
		return
	}
	if statusCode != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", statusCode))
	}
	if errorClass != "" {
		span.SetAttributes(attribute.String(AttrErrorClass, errorClass), attribute.String("error.type", errorClass))
	}
	span.SetAttributes(attribute.String(AttrResult, result))
}

// FromRequest continues the caller's W3C trace context of r (the gateway): with tracing on, a server span
// name, child of the caller's span when r carries a valid traceparent; off, ctx carries the caller's span
// context as it is (so that it goes on in the action's annotation), or nothing.
func FromRequest(r *http.Request, name string) (context.Context, trace.Span) {
	ctx := r.Context()
	if r.Header.Get("traceparent") != "" {
		ctx = propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr().Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}
