package tracing

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/dispatch"
)

const pipeline = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestExporterFromEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, "otlp"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, "console"},
	} {
		if got := Exporter(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("Exporter(%v) = %q, want %q", c.env, got, c.want)
		}
	}
	shutdown, err := Setup(context.Background(), "x", func(string) string { return "" }, nil)
	if err != nil || Enabled() {
		t.Fatalf("Setup without OTEL_* variables: %v, enabled %v; want off", err, Enabled())
	}
	_ = shutdown(context.Background())
}

func TestTraceparentRoundTrip(t *testing.T) {
	sc, ok := Parent(pipeline, "")
	if !ok || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsRemote() {
		t.Fatalf("Parent(%q) = %v, %v", pipeline, sc, ok)
	}
	if got := Traceparent(sc); got != pipeline {
		t.Errorf("Traceparent = %q, want %q", got, pipeline)
	}
	for _, bad := range []string{"", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "garbage", "00-4bf92f35-00f067aa0ba902b7-01"} {
		if _, ok := Parent(bad, ""); ok {
			t.Errorf("Parent(%q) accepted a malformed traceparent", bad)
		}
	}
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		actionsv1alpha1.AnnotationTraceparent: pipeline}}}
	if sc, ok := Pipeline(xa); !ok || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("Pipeline: %v %v", sc, ok)
	}
}

// Off (no exporter) and without a pipeline traceparent, the hooks on the send path return what they were
// given: no span, no context, no allocation; and nothing is put into the request.
func TestOffAllocatesNothing(t *testing.T) {
	if Enabled() {
		t.Skip("a tracer provider is installed")
	}
	ctx := context.Background()
	xa := &actionsv1alpha1.ExternalAction{}
	xa.Namespace, xa.Name = "ns", "a"
	h := http.Header{}
	job := dispatch.Job[*int]{Destination: "Destination/ns/d", Run: func(context.Context) *int { return nil }}
	done := func(*int, trace.Span) {}
	now := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		c, span := Reconcile(ctx, xa, "Destination/ns/d", now)
		c, claim := Start(c, "claim", 1)
		claim.End()
		j := Attempt(c, job, http.MethodPost, done)
		Inject(c, h, "")
		_ = TraceID(c)
		_, rec := StartFrom(c, trace.SpanContext{}, "record", 1)
		rec.End()
		span.End()
		_ = j
	})
	if allocs != 0 {
		t.Errorf("tracing off: %v allocations per attempt's hooks, want 0", allocs)
	}
	if len(h) != 0 {
		t.Errorf("tracing off: headers %v injected", h)
	}
}

// Off, an action that carries a pipeline's traceparent still hands it on: the attempt's context carries the
// pipeline's span context, the request gets it, and the attempt's trace id is the pipeline's; a Destination
// with traceContext None gets nothing.
func TestOffPipelineTraceGoesOn(t *testing.T) {
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		actionsv1alpha1.AnnotationTraceparent: pipeline}}}
	ctx, span := Reconcile(context.Background(), xa, "d", time.Now())
	defer span.End()
	var got string
	var h, none http.Header
	job := Attempt(ctx, dispatch.Job[string]{Run: func(c context.Context) string {
		h, none = http.Header{}, http.Header{}
		Inject(c, h, actionsv1alpha1.TraceContextPropagate)
		Inject(c, none, actionsv1alpha1.TraceContextNone)
		return TraceID(c)
	}}, http.MethodPost, func(_ string, s trace.Span) { got = s.SpanContext().TraceID().String() })
	if id := job.Run(context.Background()); id != "4bf92f3577b34da6a3ce929d0e0e4736" || got != id {
		t.Errorf("trace id in the attempt %q, to done %q", id, got)
	}
	if h.Get("traceparent") != pipeline || len(none) != 0 {
		t.Errorf("traceparent %q (None: %v)", h.Get("traceparent"), none)
	}
}

// BenchmarkHooksOff is the cost of an attempt's tracing hooks with tracing off: go test -bench HooksOff
// -benchmem ./internal/tracing (docs/tracing.md).
func BenchmarkHooksOff(b *testing.B) {
	ctx := context.Background()
	xa := &actionsv1alpha1.ExternalAction{}
	h := http.Header{}
	job := dispatch.Job[*int]{Destination: "Destination/ns/d", Run: func(context.Context) *int { return nil }}
	done := func(*int, trace.Span) {}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		c, span := Reconcile(ctx, xa, "Destination/ns/d", now)
		c, claim := Start(c, "claim", 1)
		claim.End()
		j := Attempt(c, job, http.MethodPost, done)
		j.Run(c)
		Inject(c, h, "")
		_, rec := StartFrom(c, trace.SpanContext{}, "record", 1)
		rec.End()
		span.End()
	}
}
