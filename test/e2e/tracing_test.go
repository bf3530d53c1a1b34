package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/tracing"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver (POST /v1/traces, protobuf): it keeps every span.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	// service is the service.name of the resource that sent the spans.
	service string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	b, err := io.ReadAll(r.Body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(b, req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				o.service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// find returns the spans named name whose attribute key has value (any value when value is "").
func (o *otlpReceiver) find(name, key, value string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if s.GetName() != name {
			continue
		}
		if v, ok := attr(s, key); key == "" || (ok && (value == "" || v == value)) {
			out = append(out, s)
		}
	}
	return out
}

// children returns the received spans called name whose parent is the span with the given id.
func (o *otlpReceiver) children(name string, parent []byte) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range o.find(name, "", "") {
		if string(s.GetParentSpanId()) == string(parent) {
			out = append(out, s)
		}
	}
	return out
}

func (o *otlpReceiver) byID(id []byte) *tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.spans {
		if string(s.GetSpanId()) == string(id) {
			return s
		}
	}
	return nil
}

// attr is the value of span attribute key as text.
func attr(s *tracepb.Span, key string) (string, bool) {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return anyValue(a.GetValue()), true
		}
	}
	return "", false
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	}
	return v.String()
}

// The manager exports OTLP spans when OTEL_EXPORTER_OTLP_ENDPOINT is set: reconcile -> claim -> attempt ->
// record, one attempt span per attempt with its destination, method, status code, error class and number; the
// destination receives a traceparent whose trace id is the attempt's, which is also in the attempt's history
// entry and is not derived from the key. An action with the traceparent annotation joins the pipeline's trace,
// and a Destination with traceContext None receives no traceparent.
func TestTracesOverOTLP(t *testing.T) {
	rcv := &otlpReceiver{}
	collector := httptest.NewServer(rcv)
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")

	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Env.Stop() })
	kubeconfig := env.Kubeconfig(t)
	shop, shopURL := envtestutil.DestinationServer(t, destination.Options{})
	ns := env.Namespace(t)
	key := ns + "/order-1"
	shop.Script(key, destination.Step{Status: 503})
	env.CreateDestination(t, ns, "shop", shopURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{InitialBackoff: seconds(100 * time.Millisecond), Jitter: actionsv1alpha1.JitterNone}
	})
	env.CreateDestination(t, ns, "quiet", shopURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.TraceContext = actionsv1alpha1.TraceContextNone
	})
	// A rejected action handed on to a dead-letter sink (here the same server at /cases): its delivery is traced too.
	shop.Script(ns+"/order-4", destination.Step{Status: 422})
	env.CreateDestination(t, ns, "cases", shopURL, nil)
	env.CreateDestination(t, ns, "strict", shopURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.DeadLetter = &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{Name: "cases"}, Path: "/cases"}
	})
	// idempotency.claim WhenUnsafe: a repeat-safe first attempt is sent without a claim; it is traced all the same,
	// and keeps its history entry for the trace id although it is a single success.
	env.CreateDestination(t, ns, "claimless", shopURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true, Claim: actionsv1alpha1.ClaimWhenUnsafe}
	})
	startManager(t, kubeconfig)
	env.Create(t, envtestutil.Action(ns, "order-4", "strict", "/orders", `{"n":4}`))
	env.Create(t, envtestutil.Action(ns, "order-5", "claimless", "/orders", `{"n":5}`))

	env.Create(t, envtestutil.Action(ns, "order-1", "shop", "/orders", `{"n":1}`))
	joined := envtestutil.Action(ns, "order-2", "shop", "/orders", `{"n":2}`)
	const pipeline = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	joined.Annotations = map[string]string{actionsv1alpha1.AnnotationTraceparent: pipeline}
	env.Create(t, joined)
	env.Create(t, envtestutil.Action(ns, "order-3", "quiet", "/orders", `{"n":3}`))
	xa := env.WaitPhase(t, ns, "order-1", actionsv1alpha1.PhaseSucceeded, time.Minute)
	env.WaitPhase(t, ns, "order-2", actionsv1alpha1.PhaseSucceeded, time.Minute)
	env.WaitPhase(t, ns, "order-3", actionsv1alpha1.PhaseSucceeded, time.Minute)

	// Two attempts (503, then 201), each its own trace, each traced in its history entry and at the destination.
	h := xa.Status.AttemptHistory
	if len(h) != 2 || h[0].TraceID == "" || h[1].TraceID == "" || h[0].TraceID == h[1].TraceID {
		t.Fatalf("attemptHistory %s; want two attempts, each with its own trace id", envtestutil.JSON(h))
	}
	log := shop.RequestLog(key)
	if len(log) != 2 {
		t.Fatalf("the destination got %d requests, want 2", len(log))
	}
	sum := sha256.Sum256([]byte(key))
	for i, r := range log {
		tp := r.Header.Get("traceparent")
		sc, ok := tracing.Parent(tp, "")
		if !ok || sc.TraceID().String() != h[i].TraceID {
			t.Errorf("attempt %d: the destination got traceparent %q, want one with the trace id %s of its history entry", i+1, tp, h[i].TraceID)
		}
		if r.Header.Get("Idempotency-Key") != key || strings.Contains(hex.EncodeToString(sum[:]), h[i].TraceID[:16]) ||
			strings.Contains(tp, hex.EncodeToString([]byte(key))[:16]) {
			t.Errorf("attempt %d: trace id %s is derived from the key or replaced it (key header %q)", i+1, h[i].TraceID, r.Header.Get("Idempotency-Key"))
		}
	}

	var attempts []*tracepb.Span
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the attempt spans of order-1 exported, each with its claim and record spans"), func() bool {
		attempts = nil
		for _, s := range rcv.find("attempt", tracing.AttrDestination, "Destination/"+ns+"/shop") {
			if id := hex.EncodeToString(s.GetTraceId()); id == h[0].TraceID || id == h[1].TraceID {
				attempts = append(attempts, s)
			}
		}
		if len(attempts) != 2 {
			return false
		}
		// Each attempt's record span ends after its attempt span (the outcome is written after the response), so
		// it may reach the collector in a later batch: wait for each attempt's own, not for any two.
		for _, s := range attempts {
			if len(rcv.children("record", s.GetSpanId())) == 0 || len(rcv.children("claim", s.GetParentSpanId())) == 0 {
				return false
			}
		}
		return true
	})
	for _, s := range attempts {
		n, _ := attr(s, tracing.AttrAttempt)
		code, _ := attr(s, "http.response.status_code")
		method, _ := attr(s, "http.request.method")
		result, _ := attr(s, tracing.AttrResult)
		want := map[string][2]string{"1": {"503", "Retryable"}, "2": {"201", "Success"}}[n]
		if code != want[0] || result != want[1] || method != "POST" || s.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("attempt span %s: attempt %q code %q result %q method %q kind %v", s.GetName(), n, code, result, method, s.GetKind())
		}
		// attempt -> parent reconcile (root of the trace), with a claim sibling; the record is the attempt's child.
		parent := rcv.byID(s.GetParentSpanId())
		if parent == nil || parent.GetName() != "reconcile" || len(parent.GetParentSpanId()) != 0 {
			t.Errorf("attempt %s: parent %v, want the reconcile span, root of its trace", n, parent.GetName())
		}
		claims, records := len(rcv.children("claim", s.GetParentSpanId())), len(rcv.children("record", s.GetSpanId()))
		if claims != 1 || records != 1 {
			t.Errorf("attempt %s: %d claim spans beside it and %d record spans under it, want 1 and 1", n, claims, records)
		}
	}
	if rcv.service != "actionledger" {
		t.Errorf("service.name %q, want actionledger", rcv.service)
	}

	// The pipeline's trace: order-2's attempt span is in it, under a reconcile span whose parent is the pipeline's.
	j := env.Get(t, ns, "order-2")
	if got := j.Status.AttemptHistory; len(got) != 1 || got[0].TraceID != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("order-2 history %s; want the pipeline's trace id", envtestutil.JSON(got))
	}
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the reconcile span of order-2 in the pipeline's trace"), func() bool {
		for _, s := range rcv.find("reconcile", tracing.AttrAction, "order-2") {
			if hex.EncodeToString(s.GetTraceId()) == "0af7651916cd43dd8448eb211c80319c" && hex.EncodeToString(s.GetParentSpanId()) == "b7ad6b7169203331" {
				return true
			}
		}
		return false
	})
	if tp := shop.RequestLog(ns + "/order-2")[0].Header.Get("traceparent"); !strings.HasPrefix(tp, "00-0af7651916cd43dd8448eb211c80319c-") || tp == pipeline {
		t.Errorf("order-2: the destination got traceparent %q; want the pipeline's trace with the attempt span's id", tp)
	}
	if got := shop.RequestLog(ns + "/order-3")[0].Header.Values("traceparent"); len(got) != 0 {
		t.Errorf("traceContext None: the destination got traceparent %q", got)
	}

	c := env.WaitPhase(t, ns, "order-5", actionsv1alpha1.PhaseSucceeded, time.Minute)
	if h := c.Status.AttemptHistory; len(h) != 1 || h[0].TraceID == "" ||
		!strings.Contains(shop.RequestLog(ns + "/order-5")[0].Header.Get("traceparent"), h[0].TraceID) {
		t.Errorf("claimless order-5: history %s; want its one traced attempt, the trace id sent to the destination", envtestutil.JSON(h))
	}
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the claimless attempt's span exported"), func() bool {
		return len(rcv.find("attempt", tracing.AttrDestination, "Destination/"+ns+"/claimless")) == 1
	})

	waitDeadLetter(t, env, ns, "order-4", actionsv1alpha1.DeadLetterDelivered, time.Minute)
	dl := shop.RequestLog(ns + "/order-4/dead-letter")
	sc, ok := tracing.Parent(dl[0].Header.Get("traceparent"), "")
	if len(dl) != 1 || !ok {
		t.Fatalf("the sink got %d deliveries, the first with traceparent %q", len(dl), dl[0].Header.Get("traceparent"))
	}
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the dead-letter delivery span exported"), func() bool {
		for _, s := range rcv.find("dead-letter delivery", tracing.AttrDestination, "Destination/"+ns+"/cases") {
			if hex.EncodeToString(s.GetSpanId()) == sc.SpanID().String() {
				return true
			}
		}
		return false
	})
}
