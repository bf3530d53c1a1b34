// Package tracing gives every attempt an OpenTelemetry trace: reconcile -> claim -> attempt (one span per
// attempt, with the destination, method, status code, error class and attempt number) -> record, exported by
// OTLP when the standard OTEL_EXPORTER_OTLP_* variables are set (docs/tracing.md), and off otherwise.
//
// Correlation is not identity: a trace id is drawn at random by the SDK for each claimed attempt (or taken
// from the pipeline's traceparent in the action's annotation actions.actionledger.dev/traceparent); it is
// never derived from the idempotency key, and the key never goes into a span name. The W3C traceparent of the
// attempt span goes to the destination with the request (unless the Destination sets traceContext: None),
// beside the idempotency header, never in its place.
//
// Off costs nothing on the send path: every hook first reads one package variable and, when tracing is off
// and the action carries no traceparent annotation, returns what it was given without a span, a context or
// an allocation (TestOffAllocatesNothing measures it).
package tracing

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// ScopeName is the instrumentation scope of actionledger's spans.
const ScopeName = "github.com/actionledger/actionledger"

// Span attribute keys of actionledger's spans (besides the semantic conventions' http.* and server.*).
const (
	AttrDestination = "actionledger.destination"
	AttrAttempt     = "actionledger.attempt"
	AttrResult      = "actionledger.result"
	AttrErrorClass  = "actionledger.error_class"
	AttrNamespace   = "actionledger.namespace"
	AttrAction      = "actionledger.action"
)

// enabled is set by Setup when a real tracer provider is installed; false means the hooks do nothing.
var enabled atomic.Bool

// tracer is the tracer of the provider Setup installed (the global no-op one until then).
var tracer atomic.Pointer[trace.Tracer]

// propagator is W3C Trace Context only: the traceparent and tracestate headers.
var propagator = propagation.TraceContext{}

// Enabled reports whether spans are recorded and exported.
func Enabled() bool { return enabled.Load() }

// Exporter names the exporter the environment asks for: "otlp" (an OTLP endpoint is set, or
// OTEL_TRACES_EXPORTER=otlp), "console" (OTEL_TRACES_EXPORTER=console: spans as JSON on stderr), or "" (off).
func Exporter(getenv func(string) string) string {
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "none":
		return ""
	case "console", "otlp":
		return v
	}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		return "otlp"
	}
	return ""
}

// Setup installs the tracer provider the environment asks for (Exporter) for service (the resource's
// service.name unless OTEL_SERVICE_NAME says otherwise), and the W3C Trace Context propagator. Without one it
// installs nothing and tracing stays off. The returned function flushes and stops the exporter.
func Setup(ctx context.Context, service string, getenv func(string) string, stderr io.Writer) (func(context.Context) error, error) {
	kind := Exporter(getenv)
	if kind == "" {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := exporter(ctx, kind, getenv, stderr)
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, err
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	t := tp.Tracer(ScopeName)
	tracer.Store(&t)
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

// exporter makes the span exporter of kind; an OTLP exporter reads its endpoint, headers, TLS and timeout from
// the standard variables itself, and speaks OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (or OTEL_EXPORTER_OTLP_PROTOCOL):
// http/protobuf (the default) or grpc.
func exporter(ctx context.Context, kind string, getenv func(string) string, stderr io.Writer) (sdktrace.SpanExporter, error) {
	if kind == "console" {
		return stdouttrace.New(stdouttrace.WithWriter(stderr))
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc", proto)
}

// Setenv is Setup from the process environment, with spans of the console exporter on stderr.
func Setenv(ctx context.Context, service string) (func(context.Context) error, error) {
	return Setup(ctx, service, os.Getenv, os.Stderr)
}

func tr() trace.Tracer {
	if t := tracer.Load(); t != nil {
		return *t
	}
	return otel.Tracer(ScopeName)
}

// Parent returns the span context of a valid W3C traceparent (and tracestate), and false for anything else.
func Parent(traceparent, tracestate string) (trace.SpanContext, bool) {
	if traceparent == "" {
		return trace.SpanContext{}, false
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), carrier))
	return sc, sc.IsValid()
}

// Traceparent is the W3C traceparent of sc ("" when sc is not valid).
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return carrier["traceparent"]
}

// Pipeline is the span context an action's pipeline handed over in the annotation
// actions.actionledger.dev/traceparent; false without one, or when it is malformed (then it is ignored).
func Pipeline(xa *actionsv1alpha1.ExternalAction) (trace.SpanContext, bool) {
	v, ok := xa.Annotations[actionsv1alpha1.AnnotationTraceparent]
	if !ok {
		return trace.SpanContext{}, false
	}
	return Parent(v, "")
}

// Reconcile starts the span of the reconcile that claims an attempt of xa (begun at start), as a child of
// the pipeline's span when the action carries one, else as the root of a new trace. Off, and without a
// pipeline span, it returns ctx and a span that records nothing, without allocating.
func Reconcile(ctx context.Context, xa *actionsv1alpha1.ExternalAction, destID string, start time.Time) (context.Context, trace.Span) {
	parent, joined := Pipeline(xa)
	if !enabled.Load() {
		if joined {
			// Not traced here, but the pipeline's trace goes on to the destination (Inject).
			return trace.ContextWithRemoteSpanContext(ctx, parent), trace.SpanFromContext(ctx)
		}
		return ctx, trace.SpanFromContext(ctx)
	}
	if joined {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{}) // a new trace per claimed attempt
	}
	return tr().Start(ctx, "reconcile", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String(AttrNamespace, xa.Namespace), attribute.String(AttrAction, xa.Name),
			attribute.String(AttrDestination, destID)))
}

// Start starts a child span name of the span in ctx (claim, record); off, it returns ctx and the span in it.
func Start(ctx context.Context, name string, attempt int32) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr().Start(ctx, name, trace.WithAttributes(attribute.Int(AttrAttempt, int(attempt))))
}

// StartFrom starts span name as a child of the span context sc carried from another reconcile (the attempt
// span, for the record of its outcome); off, or with no valid sc, it returns ctx and the span in it.
func StartFrom(ctx context.Context, sc trace.SpanContext, name string, attempt int32) (context.Context, trace.Span) {
	if !enabled.Load() || !sc.IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return Start(trace.ContextWithRemoteSpanContext(ctx, sc), name, attempt)
}

// Fail marks span failed with err (nothing when it does not record).
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// Inject puts the W3C Trace Context of ctx's span into h (traceparent, and tracestate when it has one), unless
// mode is None or there is no valid span context (tracing off and no pipeline traceparent: nothing is done).
func Inject(ctx context.Context, h http.Header, mode actionsv1alpha1.TraceContextMode) {
	if mode == actionsv1alpha1.TraceContextNone || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// TraceID is the trace id of ctx's span in hex, "" when there is none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
