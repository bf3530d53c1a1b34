package deadletter

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/send"
	"github.com/actionledger/actionledger/internal/shard"
	"github.com/actionledger/actionledger/internal/status"
	"github.com/actionledger/actionledger/internal/waitroom"
)

// The delivery tests run the Manager against a fake API server (the controller-runtime fake client, whose status
// writes check the resourceVersion), a real HTTP sink (httptest) reached through the real executor and send path,
// and a Submit that runs the job at once, as a dispatcher with room would. The clock is fake: requeue times and
// schedules are exact.

const (
	dlNS     = "ns"
	dlAction = "a"
	// dlSink is the recorded sink: Destination ns/sink.
	dlSink = "Destination/ns/sink"
	// dlSinkKey is the sink's key for the action (its keyFormat), and dlRecordKey the record's key (the CloudEvent
	// id, the key header): never the action's own key, dlActionKey.
	dlSinkKey   = "sink/ns/a"
	dlRecordKey = dlSinkKey + KeySuffix
	dlActionKey = "team-b/a"
	dlPath      = "/dlq"
)

// received is one request the sink got.
type received struct {
	path   string
	header http.Header
	body   []byte
}

// sinkServer is a real HTTP sink: answer answers the n-th request (from 0); it keeps what it received.
type sinkServer struct {
	mu     sync.Mutex
	got    []received
	answer func(w http.ResponseWriter, r *http.Request, n int)
}

func (s *sinkServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.got)
	s.got = append(s.got, received{path: r.URL.Path, header: r.Header.Clone(), body: body})
	answer := s.answer
	s.mu.Unlock()
	if answer == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	answer(w, r, n)
}

func (s *sinkServer) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// harness is a Manager with its fakes.
type harness struct {
	t       *testing.T
	m       *Manager
	c       client.Client
	clk     *clocktesting.FakePassiveClock
	rec     *events.FakeRecorder
	sink    *sinkServer
	url     string
	limiter *limiter.Registry
	noRoom  bool
	// submit, when set, replaces the default Submit (run the job now; its result is in the mailbox).
	submit func(ctx context.Context, job dispatch.Job[*send.Result]) (*send.Result, error)
	// results are the results of the jobs run, in order.
	results []*send.Result
}

// setup is what a test changes before the harness is built.
type setup struct {
	sink    func(*actionsv1alpha1.DestinationSpec)
	action  func(*actionsv1alpha1.ExternalAction)
	objects []client.Object
}

func newHarness(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int), mut ...func(*setup)) *harness {
	t.Helper()
	var su setup
	for _, m := range mut {
		m(&su)
	}
	h := &harness{t: t, clk: clocktesting.NewFakePassiveClock(t0), rec: events.NewFakeRecorder(100),
		sink: &sinkServer{answer: answer}, limiter: limiter.NewRegistry()}
	srv := httptest.NewServer(h.sink)
	t.Cleanup(srv.Close)
	h.url = srv.URL

	three, jitterNone := int32(3), actionsv1alpha1.JitterNone
	dest := &actionsv1alpha1.Destination{ObjectMeta: metav1.ObjectMeta{Namespace: dlNS, Name: "sink", Generation: 1},
		Spec: actionsv1alpha1.DestinationSpec{URL: srv.URL, Timeout: &metav1.Duration{Duration: 2 * time.Second},
			Idempotency: &actionsv1alpha1.IdempotencyConfig{KeyFormat: "sink/{namespace}/{name}"},
			RetryPolicy: &actionsv1alpha1.RetryPolicy{MaxAttempts: &three, InitialBackoff: &metav1.Duration{Duration: time.Second},
				MaxBackoff: &metav1.Duration{Duration: 10 * time.Second}, Jitter: jitterNone,
				Deadline: &metav1.Duration{Duration: time.Hour}}}}
	if su.sink != nil {
		su.sink(&dest.Spec)
	}
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: dlNS, Name: dlAction, Generation: 1, UID: "uid-a"},
		Spec: actionsv1alpha1.ExternalActionSpec{DestinationRef: actionsv1alpha1.DestinationReference{Name: "pay"}}}
	xa.Status = actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseExhausted, IdempotencyKey: dlActionKey,
		Attempts: 3, LastError: "status 503"}
	meta.SetStatusCondition(&xa.Status.Conditions, metav1.Condition{Type: actionsv1alpha1.ConditionReady,
		Status: metav1.ConditionFalse, Reason: "Exhausted", Message: "all 3 attempts failed", ObservedGeneration: 1,
		LastTransitionTime: metav1.NewTime(t0)})
	if !Owe(&xa.Status, &actionsv1alpha1.DeadLetterSink{DestinationRef: actionsv1alpha1.DestinationReference{Name: "sink"},
		Path: dlPath}, dlSink, 1, t0) {
		t.Fatal("Owe wrote no record")
	}
	if su.action != nil {
		su.action(xa)
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dlNS}}
	objs := append([]client.Object{xa, dest, nsObj}, su.objects...)
	h.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(xa).Build()

	loopback := egress.New(egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	exec := httpexec.New(httpexec.WithEgressPolicy(loopback))
	resolver := &destination.Resolver{Client: h.c, Secrets: h.c, Executor: exec, Clock: h.clk}
	h.m = &Manager{Reader: h.c, Clock: h.clk, Resolver: resolver,
		Writer: &status.Writer{Client: h.c, Reader: h.c, Recorder: h.rec, Clock: h.clk, DestinationID: destination.ID},
		Sender: &send.Sender{Executor: exec, Clock: h.clk},
		Env: func(xa *actionsv1alpha1.ExternalAction) ledger.Env {
			return ledger.Env{Holder: "h1", Generation: xa.Generation, ClaimMargin: 2 * time.Second, Rand: func() float64 { return 0.5 }}
		},
		Submit: func(ctx context.Context, job dispatch.Job[*send.Result]) (*send.Result, error) {
			if h.submit != nil {
				return h.submit(ctx, job)
			}
			h.results = append(h.results, job.Run(ctx))
			return nil, nil // still held by the dispatcher, as far as the reconcile knows
		},
		Passage: &send.Passage{Limiter: h.limiter, Resolver: resolver, Room: waitroom.New(),
			HasRoom: func(string, string) bool { return !h.noRoom }, Load: func(string) (int, int) { return 64, 3 }},
	}
	return h
}

// get is the stored action.
func (h *harness) get() *actionsv1alpha1.ExternalAction {
	h.t.Helper()
	xa := &actionsv1alpha1.ExternalAction{}
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: dlNS, Name: dlAction}, xa); err != nil {
		h.t.Fatal(err)
	}
	return xa
}

// reconcile runs Reconcile on the stored action, as the controller does on its cached copy.
func (h *harness) reconcile() (ctrl.Result, bool) {
	h.t.Helper()
	res, held, err := h.m.Reconcile(context.Background(), h.get())
	if err != nil {
		h.t.Fatalf("Reconcile: %v", err)
	}
	return res, held
}

// record records the last result run, as the controller does with a result from the mailbox.
func (h *harness) record() ctrl.Result {
	h.t.Helper()
	if len(h.results) == 0 {
		h.t.Fatal("no delivery was run")
	}
	res, err := h.m.Record(context.Background(), h.get(), h.results[len(h.results)-1])
	if err != nil {
		h.t.Fatalf("Record: %v", err)
	}
	return res
}

// events drains the Events emitted so far.
func (h *harness) events() []string {
	var got []string
	for {
		select {
		case e := <-h.rec.Events:
			got = append(got, e)
		default:
			return got
		}
	}
}

// deliveries is the DeadLetterDeliveries counter of the sink (dlSink, or the one given), by outcome.
func deliveries(sink ...string) map[string]float64 {
	id := dlSink
	if len(sink) > 0 {
		id = sink[0]
	}
	out := map[string]float64{}
	for _, o := range metrics.DeadLetterOutcomes {
		out[o] = testutil.ToFloat64(metrics.DeadLetterDeliveries.WithLabelValues(id, o))
	}
	return out
}

// counted fails unless the counters of the sink moved from before by exactly want (outcome: increase).
func counted(t *testing.T, before map[string]float64, want map[string]float64, sink ...string) {
	t.Helper()
	after := deliveries(sink...)
	for _, o := range metrics.DeadLetterOutcomes {
		if d := after[o] - before[o]; d != want[o] {
			t.Errorf("DeadLetterDeliveries{outcome=%s} moved by %v, want %v", o, d, want[o])
		}
	}
}

// The first delivery claims attempt 1 before anything is sent, then POSTs the record once to the sink's path as a
// binary CloudEvent under the sink's key (key header and ce-id), with data.key the sink's key for the action and
// the action's own key only in actionKey (DESIGN). Recording the 2xx makes the record Delivered, counted, shown
// (DeadLetterDelivered True) and announced; after that the record holds nothing and nothing is sent again. The
// action's phase and own key are never changed.
func TestDeliveryPostsTheRecordUnderTheSinksKey(t *testing.T) {
	var claimSeen *actionsv1alpha1.DeadLetterStatus
	h := newHarness(t, nil)
	h.submit = func(ctx context.Context, job dispatch.Job[*send.Result]) (*send.Result, error) {
		claimSeen = h.get().Status.DeadLetter // what the API server holds when the job is handed over
		h.results = append(h.results, job.Run(ctx))
		return nil, nil
	}
	before := deliveries()

	res, held := h.reconcile()
	if !held || res.RequeueAfter != 4*time.Second {
		t.Fatalf("Reconcile = %+v, held %v; want held, looking again at the claim's expiry (timeout 2s + margin 2s)", res, held)
	}
	if claimSeen == nil || claimSeen.Claim == nil || claimSeen.Claim.Attempt != 1 || claimSeen.State != actionsv1alpha1.DeadLetterDelivering ||
		claimSeen.IdempotencyKey != dlRecordKey {
		t.Fatalf("status.deadLetter when the job was handed over: %+v; want attempt 1 claimed under %s", claimSeen, dlRecordKey)
	}
	got := h.sink.requests()
	if len(got) != 1 {
		t.Fatalf("the sink got %d requests, want 1", len(got))
	}
	r := got[0]
	if r.path != dlPath {
		t.Errorf("path %q, want the recorded %q", r.path, dlPath)
	}
	for hdr, want := range map[string]string{destination.DefaultIdempotencyHdr: dlRecordKey, "Ce-Id": dlRecordKey,
		"Ce-Type": EventType, "Ce-Source": Source(dlNS, dlAction), "Ce-Specversion": "1.0", "Content-Type": "application/json"} {
		if v := r.header.Get(hdr); v != want {
			t.Errorf("header %s = %q, want %q", hdr, v, want)
		}
	}
	var data map[string]any
	if err := json.Unmarshal(r.body, &data); err != nil {
		t.Fatalf("the record is not JSON: %v\n%s", err, r.body)
	}
	if data["key"] != dlSinkKey || data["actionKey"] != dlActionKey || data["namespace"] != dlNS || data["name"] != dlAction ||
		data["phase"] != "Exhausted" || data["destination"] != "Destination/ns/pay" || data["reason"] != "Exhausted" {
		t.Errorf("record data %v; want key %s (the sink's), actionKey %s, the action's phase, reason and destination", data, dlSinkKey, dlActionKey)
	}
	counted(t, before, nil) // a claim is not an outcome

	if res := h.record(); res.RequeueAfter != requeue.Now {
		t.Errorf("Record = %+v, want a look again at once", res)
	}
	xa := h.get()
	dl := xa.Status.DeadLetter
	if dl.State != actionsv1alpha1.DeadLetterDelivered || dl.Claim != nil || dl.StatusCode != http.StatusAccepted ||
		dl.DeliveredAt == nil || dl.Attempts != 1 || dl.IdempotencyKey != dlRecordKey {
		t.Errorf("status.deadLetter %+v; want Delivered by attempt 1 (202), no claim", dl)
	}
	if c := condition(&xa.Status, actionsv1alpha1.ConditionDeadLetterDelivered); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("DeadLetterDelivered condition %+v, want True", c)
	}
	if xa.Status.Phase != actionsv1alpha1.PhaseExhausted || xa.Status.IdempotencyKey != dlActionKey || xa.Status.Attempts != 3 {
		t.Errorf("the action's phase %s, key %q, attempts %d changed", xa.Status.Phase, xa.Status.IdempotencyKey, xa.Status.Attempts)
	}
	counted(t, before, map[string]float64{"Delivered": 1})
	if ev := h.events(); len(ev) != 1 || !strings.Contains(ev[0], "Normal "+actionsv1alpha1.ReasonDeadLetterDelivered) {
		t.Errorf("events %q, want one Normal %s", ev, actionsv1alpha1.ReasonDeadLetterDelivered)
	}

	if res, held := h.reconcile(); held || res != (ctrl.Result{}) {
		t.Errorf("Reconcile after delivery = %+v, held %v; want not held", res, held)
	}
	if n := len(h.sink.requests()); n != 1 {
		t.Errorf("the sink got %d requests after the delivery, want still 1", n)
	}
}

// A record recorded with mode Structured goes as one application/cloudevents+json body carrying the id and data.
func TestDeliveryStructuredMode(t *testing.T) {
	h := newHarness(t, nil, func(s *setup) {
		s.action = func(xa *actionsv1alpha1.ExternalAction) {
			xa.Status.DeadLetter.Mode = actionsv1alpha1.CloudEventStructured
		}
	})
	h.reconcile()
	got := h.sink.requests()
	if len(got) != 1 {
		t.Fatalf("the sink got %d requests, want 1", len(got))
	}
	if ct := got[0].header.Get("Content-Type"); !strings.HasPrefix(ct, "application/cloudevents+json") {
		t.Errorf("Content-Type %q, want application/cloudevents+json", ct)
	}
	var ev struct {
		ID   string         `json:"id"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(got[0].body, &ev); err != nil || ev.ID != dlRecordKey || ev.Data["key"] != dlSinkKey {
		t.Errorf("structured event id %q data.key %v (%v); want %s and %s", ev.ID, ev.Data["key"], err, dlRecordKey, dlSinkKey)
	}
}

// A 5xx answer is a failed delivery attempt: the record goes back to Pending with the next attempt after the
// sink's backoff (1 s), counted Retried and announced; nothing is sent before then (and nothing written), and the
// next attempt carries the same key.
func TestDelivery5xxIsRetriedAfterTheBackoffUnderTheSameKey(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	before := deliveries()
	h.reconcile()
	h.record()
	xa := h.get()
	dl := xa.Status.DeadLetter
	if dl.State != actionsv1alpha1.DeadLetterPending || dl.Claim != nil || dl.StatusCode != 503 || dl.NextAttemptAt == nil ||
		!dl.NextAttemptAt.Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("status.deadLetter %+v; want Pending, 503, next attempt at %s", dl, t0.Add(time.Second))
	}
	if c := condition(&xa.Status, actionsv1alpha1.ConditionDeadLetterDelivered); c == nil || c.Status != metav1.ConditionFalse ||
		c.Reason != actionsv1alpha1.ReasonDeadLetterRetrying {
		t.Errorf("DeadLetterDelivered condition %+v, want False DeadLetterRetrying", c)
	}
	counted(t, before, map[string]float64{"Retried": 1})
	if ev := h.events(); len(ev) != 1 || !strings.Contains(ev[0], "Warning "+actionsv1alpha1.ReasonDeadLetterRetrying) {
		t.Errorf("events %q, want one Warning %s", ev, actionsv1alpha1.ReasonDeadLetterRetrying)
	}

	h.clk.SetTime(t0.Add(400 * time.Millisecond))
	rv := h.get().ResourceVersion
	if res, held := h.reconcile(); !held || res.RequeueAfter != 600*time.Millisecond {
		t.Errorf("Reconcile before the next attempt = %+v, held %v; want held until it (600ms)", res, held)
	}
	if n := len(h.sink.requests()); n != 1 || h.get().ResourceVersion != rv {
		t.Errorf("before the next attempt: %d requests, resourceVersion %s (was %s); want nothing sent or written", n, h.get().ResourceVersion, rv)
	}

	h.clk.SetTime(t0.Add(time.Second))
	h.reconcile()
	got := h.sink.requests()
	if len(got) != 2 {
		t.Fatalf("the sink got %d requests, want 2", len(got))
	}
	for i, r := range got {
		if k := r.header.Get(destination.DefaultIdempotencyHdr); k != dlRecordKey || r.header.Get("Ce-Id") != dlRecordKey {
			t.Errorf("request %d key %q ce-id %q, want %s on every attempt", i, k, r.header.Get("Ce-Id"), dlRecordKey)
		}
	}
	h.record()
	if dl := h.get().Status.DeadLetter; dl.State != actionsv1alpha1.DeadLetterDelivered || dl.Attempts != 2 {
		t.Errorf("status.deadLetter %+v; want Delivered by attempt 2", dl)
	}
	counted(t, before, map[string]float64{"Retried": 1, "Delivered": 1})
}

// A 429 with Retry-After puts the next attempt at the Retry-After, past the backoff (1 s): a reconcile in between
// sends nothing and looks again at that time.
func TestDelivery429RetryAfterPostponesTheNextAttempt(t *testing.T) {
	h := newHarness(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	h.reconcile()
	h.record()
	dl := h.get().Status.DeadLetter
	if dl.State != actionsv1alpha1.DeadLetterPending || dl.StatusCode != 429 || dl.NextAttemptAt == nil ||
		!dl.NextAttemptAt.Time.Equal(t0.Add(120*time.Second)) {
		t.Fatalf("status.deadLetter %+v; want Pending, 429, next attempt at the Retry-After %s", dl, t0.Add(120*time.Second))
	}
	h.clk.SetTime(t0.Add(30 * time.Second))
	if res, held := h.reconcile(); !held || res.RequeueAfter != 90*time.Second {
		t.Errorf("Reconcile at +30s = %+v, held %v; want held for 90s", res, held)
	}
	if n := len(h.sink.requests()); n != 1 {
		t.Errorf("the sink got %d requests before the Retry-After, want 1", n)
	}
	h.clk.SetTime(t0.Add(120 * time.Second))
	h.reconcile()
	if n := len(h.sink.requests()); n != 2 {
		t.Errorf("the sink got %d requests at the Retry-After, want 2", n)
	}
}

// A sink that does not answer within its timeout leaves the attempt uncertain: the sink may have the record. A sink
// that does not deduplicate (no idempotency.supported, effect unset) ends the record Uncertain, counted, never sent
// again; one that deduplicates on the key gets it again, under the same key, after the backoff.
func TestDeliveryTimeout(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	short := func(s *actionsv1alpha1.DestinationSpec) {
		s.Timeout = &metav1.Duration{Duration: 200 * time.Millisecond}
	}

	t.Run("not deduplicated: Uncertain", func(t *testing.T) {
		h := newHarness(t, hang, func(s *setup) { s.sink = short })
		before := deliveries()
		h.reconcile()
		h.record()
		dl := h.get().Status.DeadLetter
		if dl.State != actionsv1alpha1.DeadLetterUncertain || dl.Claim != nil || dl.NextAttemptAt != nil || dl.ErrorClass == "" {
			t.Fatalf("status.deadLetter %+v; want Uncertain with the error class, nothing scheduled", dl)
		}
		counted(t, before, map[string]float64{"Uncertain": 1})
		h.clk.SetTime(t0.Add(time.Hour))
		if _, held := h.reconcile(); held {
			t.Error("an Uncertain record still holds the action")
		}
		if n := len(h.sink.requests()); n != 1 {
			t.Errorf("the sink got %d requests, want 1 (never sent again)", n)
		}
	})
	t.Run("deduplicated: resent under the same key", func(t *testing.T) {
		h := newHarness(t, hang, func(s *setup) {
			s.sink = func(d *actionsv1alpha1.DestinationSpec) {
				short(d)
				d.Idempotency.Supported = true
			}
		})
		before := deliveries()
		h.reconcile()
		h.record()
		dl := h.get().Status.DeadLetter
		if dl.State != actionsv1alpha1.DeadLetterPending || dl.NextAttemptAt == nil {
			t.Fatalf("status.deadLetter %+v; want Pending with a next attempt", dl)
		}
		counted(t, before, map[string]float64{"Retried": 1})
		h.clk.SetTime(dl.NextAttemptAt.Time)
		h.reconcile()
		got := h.sink.requests()
		if len(got) != 2 || got[1].header.Get(destination.DefaultIdempotencyHdr) != dlRecordKey {
			t.Fatalf("the sink got %d requests; want the record again under %s", len(got), dlRecordKey)
		}
	})
}

// A claim found open after its expiry (its holder never recorded an outcome) is uncertain (DESIGN rule 3): at a sink
// that does not deduplicate the record ends Uncertain and is not sent again.
func TestDeliveryExpiredClaimIsUncertain(t *testing.T) {
	h := newHarness(t, nil)
	h.submit = func(context.Context, dispatch.Job[*send.Result]) (*send.Result, error) { return nil, nil } // lost
	before := deliveries()
	h.reconcile()
	claim := h.get().Status.DeadLetter.Claim
	if claim == nil {
		t.Fatal("no claim written")
	}
	h.clk.SetTime(claim.ExpiresAt.Add(-time.Millisecond))
	if res, held := h.reconcile(); !held || res.RequeueAfter != time.Millisecond || h.get().Status.DeadLetter.Claim == nil {
		t.Errorf("Reconcile before the expiry = %+v, held %v; want a wait for the claim", res, held)
	}
	h.clk.SetTime(claim.ExpiresAt.Time)
	h.reconcile()
	if dl := h.get().Status.DeadLetter; dl.State != actionsv1alpha1.DeadLetterUncertain || dl.Claim != nil {
		t.Errorf("status.deadLetter %+v; want Uncertain", dl)
	}
	counted(t, before, map[string]float64{"Uncertain": 1})
	if n := len(h.sink.requests()); n != 0 {
		t.Errorf("the sink got %d requests, want 0", n)
	}
}

// What waits before the claim (the shard's share of the sink's limits, room in the dispatcher, the sink's rate
// limit or Retry-After pause) sends nothing, spends no delivery attempt and counts no outcome; the action is
// parked in the sink's waiting room (for a slot, or until the limiter's time) and its requeue is only the safety
// net, requeue.Room after the wait's predicted end (Rand 0.5: the jitter's middle). Only a wait for the sink's
// limits longer than send.BriefWait is written (reason RateLimited).
func TestDeliveryWaitsBeforeTheClaim(t *testing.T) {
	for _, c := range []struct {
		name    string
		prepare func(h *harness)
		want    time.Duration
		written string // the reason written, "" for no write
		parked  bool   // parked in the sink's waiting room for a slot
		until   time.Time
	}{
		{name: "share", prepare: func(h *harness) { h.m.Resolver.Shards = &shard.Membership{Interval: 7 * time.Second} },
			want: 7*time.Second + requeue.Room, until: t0.Add(7 * time.Second)},
		{name: "room", prepare: func(h *harness) { h.noRoom = true }, want: requeue.Room, parked: true},
		{name: "rate limit pause", prepare: func(h *harness) { h.limiter.Pause(dlSink, t0.Add(30*time.Second)) },
			want: 30*time.Second + requeue.Room, written: actionsv1alpha1.ReasonRateLimited, until: t0.Add(30 * time.Second)},
		{name: "brief pause", prepare: func(h *harness) { h.limiter.Pause(dlSink, t0.Add(500*time.Millisecond)) },
			want: 500*time.Millisecond + requeue.Room, until: t0.Add(500 * time.Millisecond)},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			c.prepare(h)
			before := deliveries()
			delayed := testutil.ToFloat64(metrics.Delayed.WithLabelValues(dlSink, actionsv1alpha1.ReasonConcurrencyLimited))
			rv := h.get().ResourceVersion
			res, held := h.reconcile()
			if !held || res.RequeueAfter != c.want {
				t.Errorf("Reconcile = %+v, held %v; want held for %s", res, held, c.want)
			}
			if n := len(h.sink.requests()); n != 0 || len(h.results) != 0 {
				t.Errorf("%d requests, %d jobs; want nothing sent", n, len(h.results))
			}
			xa := h.get()
			dl := xa.Status.DeadLetter
			if dl.Attempts != 0 || dl.Claim != nil || dl.State != actionsv1alpha1.DeadLetterPending {
				t.Errorf("status.deadLetter %+v; want Pending, no attempt spent", dl)
			}
			if c.written == "" && xa.ResourceVersion != rv {
				t.Errorf("the wait was written (resourceVersion %s, was %s)", xa.ResourceVersion, rv)
			}
			if c.written != "" && (dl.Reason != c.written || !strings.Contains(dl.Message, "no delivery attempt is spent")) {
				t.Errorf("status.deadLetter reason %q message %q; want %s written", dl.Reason, dl.Message, c.written)
			}
			counted(t, before, nil)
			if got := h.m.Passage.Room.Waiting(dlSink); (got == 1) != c.parked {
				t.Errorf("%d waiting in the sink's room for a slot; want parked %v", got, c.parked)
			}
			if until, ok := h.m.Passage.Room.Until(types.NamespacedName{Namespace: dlNS, Name: dlAction}); ok != !c.until.IsZero() || !until.Equal(c.until) {
				t.Errorf("waiting in the sink's room until %v (%v); want until %v", until, ok, c.until)
			}
			grown := testutil.ToFloat64(metrics.Delayed.WithLabelValues(dlSink, actionsv1alpha1.ReasonConcurrencyLimited)) - delayed
			if (grown == 1) != c.parked {
				t.Errorf("actionledger_delayed_total{reason=ConcurrencyLimited} grew by %v; want 1 when parked (counted as an attempt's wait is)", grown)
			}
		})
	}
}

// After a written wait for the sink's limits, the delivery goes on once they admit it: attempt 1, sent once.
func TestDeliveryAfterARateLimitWait(t *testing.T) {
	h := newHarness(t, nil)
	h.limiter.Pause(dlSink, t0.Add(30*time.Second))
	h.reconcile()
	h.clk.SetTime(t0.Add(30 * time.Second))
	h.reconcile()
	if n := len(h.sink.requests()); n != 1 {
		t.Fatalf("the sink got %d requests, want 1", n)
	}
	if dl := h.get().Status.DeadLetter; dl.Attempts != 1 || dl.Claim == nil {
		t.Errorf("status.deadLetter %+v; want attempt 1 claimed", dl)
	}
}

// A sink whose credentials cannot be loaded (its Secret missing, or in a namespace it may not read) is Refused:
// nothing is sent, the action is Stalled (DeadLetterSinkUnavailable naming the sink), a Warning Event and the
// Refused counter say so once, and it is looked at again after destination.Recheck. Once the Secret is there, the
// delivery resumes with it.
func TestDeliveryCredentialsRefused(t *testing.T) {
	bearer := func(ns string) func(*setup) {
		return func(s *setup) {
			s.sink = func(d *actionsv1alpha1.DestinationSpec) {
				d.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "sink-token", Key: "token",
					Namespace: ns}}
			}
		}
	}
	t.Run("missing Secret, then created", func(t *testing.T) {
		h := newHarness(t, nil, bearer(""))
		before := deliveries()
		res, held := h.reconcile()
		if !held || res.RequeueAfter != destination.Recheck {
			t.Errorf("Reconcile = %+v, held %v; want held until destination.Recheck", res, held)
		}
		xa := h.get()
		dl := xa.Status.DeadLetter
		if dl.State != actionsv1alpha1.DeadLetterRefused || dl.Attempts != 0 || !strings.Contains(dl.Message, "sink-token") {
			t.Errorf("status.deadLetter %+v; want Refused naming the Secret, no attempt", dl)
		}
		if c := condition(&xa.Status, actionsv1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue ||
			c.Reason != actionsv1alpha1.ReasonDeadLetterSinkUnavailable || !strings.Contains(c.Message, dlSink) {
			t.Errorf("Stalled condition %+v; want True DeadLetterSinkUnavailable naming %s", c, dlSink)
		}
		counted(t, before, map[string]float64{"Refused": 1})
		if ev := h.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning ") {
			t.Errorf("events %q, want one Warning", ev)
		}
		rv := xa.ResourceVersion
		h.reconcile()
		if h.get().ResourceVersion != rv || len(h.events()) != 0 {
			t.Error("the same refusal was written or announced again")
		}
		counted(t, before, map[string]float64{"Refused": 1})
		if n := len(h.sink.requests()); n != 0 {
			t.Fatalf("the sink got %d requests while refused, want 0", n)
		}

		token := "a-long-enough-bearer-token-value"
		if err := h.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: dlNS, Name: "sink-token"},
			Data: map[string][]byte{"token": []byte(token)}}); err != nil {
			t.Fatal(err)
		}
		h.reconcile()
		got := h.sink.requests()
		if len(got) != 1 || got[0].header.Get("Authorization") != "Bearer "+token {
			t.Fatalf("the sink got %d requests (Authorization %q); want the record with the sink's token", len(got),
				func() string {
					if len(got) > 0 {
						return got[0].header.Get("Authorization")
					}
					return ""
				}())
		}
		xa = h.get()
		if c := condition(&xa.Status, actionsv1alpha1.ConditionStalled); c != nil && c.Reason == actionsv1alpha1.ReasonDeadLetterSinkUnavailable {
			t.Errorf("Stalled condition %+v still names the sink after it was usable", c)
		}
	})
	t.Run("Secret of another namespace", func(t *testing.T) {
		h := newHarness(t, nil, bearer("other"), func(s *setup) {
			s.objects = []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "sink-token"},
				Data: map[string][]byte{"token": []byte("a-long-enough-bearer-token-value")}}}
		})
		h.reconcile()
		if dl := h.get().Status.DeadLetter; dl.State != actionsv1alpha1.DeadLetterRefused || dl.Reason != actionsv1alpha1.ReasonSecretNotAllowed {
			t.Errorf("status.deadLetter %+v; want Refused SecretNotAllowed", dl)
		}
		if n := len(h.sink.requests()); n != 0 {
			t.Errorf("the sink got %d requests, want 0", n)
		}
	})
}

// A recorded sink that is missing, or that names a Destination of another namespace, is Refused and nothing is
// sent; while the action's namespace is being deleted, a missing sink gives the record up instead (a held
// finalizer would keep the namespace Terminating).
func TestDeliveryToAMissingSink(t *testing.T) {
	for _, c := range []struct{ name, sink string }{
		{"missing", "Destination/ns/gone"},
		{"another namespace", "Destination/other/sink"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil, func(s *setup) {
				s.action = func(xa *actionsv1alpha1.ExternalAction) { xa.Status.DeadLetter.Sink = c.sink }
			})
			before := deliveries(c.sink)
			res, held := h.reconcile()
			if !held || res.RequeueAfter != destination.Recheck {
				t.Errorf("Reconcile = %+v, held %v; want held until destination.Recheck", res, held)
			}
			counted(t, before, map[string]float64{"Refused": 1}, c.sink)
			xa := h.get()
			if dl := xa.Status.DeadLetter; dl.State != actionsv1alpha1.DeadLetterRefused || dl.Sink != c.sink {
				t.Errorf("status.deadLetter %+v; want Refused, the recorded sink kept", dl)
			}
			if cond := condition(&xa.Status, actionsv1alpha1.ConditionStalled); cond == nil || !strings.Contains(cond.Message, c.sink) {
				t.Errorf("Stalled condition %+v; want it to name %s", cond, c.sink)
			}
			if n := len(h.sink.requests()); n != 0 {
				t.Errorf("the sink got %d requests, want 0", n)
			}
		})
	}
	t.Run("namespace being deleted", func(t *testing.T) {
		h := newHarness(t, nil, func(s *setup) {
			s.action = func(xa *actionsv1alpha1.ExternalAction) {
				xa.Status.DeadLetter.Sink = "Destination/ns/gone"
				xa.Finalizers = []string{"actions.actionledger.dev/test"}
				xa.DeletionTimestamp = &metav1.Time{Time: t0}
			}
		})
		if err := h.c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dlNS}}); err != nil {
			t.Fatal(err)
		}
		before := deliveries("Destination/ns/gone")
		if res, held := h.reconcile(); !held || res.RequeueAfter != requeue.Now {
			t.Errorf("Reconcile = %+v, held %v; want the give-up written and a look again at once", res, held)
		}
		if dl := h.get().Status.DeadLetter; dl.State != actionsv1alpha1.DeadLetterGivenUp {
			t.Errorf("status.deadLetter %+v; want GivenUp", dl)
		}
		counted(t, before, map[string]float64{"GivenUp": 1}, "Destination/ns/gone")
		if _, held := h.reconcile(); held {
			t.Error("a given-up record still holds the action")
		}
	})
}

// staleReader reads the stored action and then lets another writer change it, so that a write decided on the copy
// it returned loses a Conflict.
type staleReader struct {
	client.Reader
	c client.Client
}

func (r staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if xa, ok := obj.(*actionsv1alpha1.ExternalAction); ok {
		moved := xa.DeepCopy()
		moved.Status.LastError = "changed by another writer"
		return r.c.Status().Update(ctx, moved)
	}
	return nil
}

// A claim that loses a Conflict sends nothing (DESIGN rule 1): the next reconcile decides again on the newer object.
func TestDeliveryClaimLostSendsNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.m.Reader = staleReader{Reader: h.c, c: h.c}
	res, held := h.reconcile()
	if !held || res.RequeueAfter != requeue.ClaimLost {
		t.Errorf("Reconcile = %+v, held %v; want ClaimLost", res, held)
	}
	if n := len(h.sink.requests()); n != 0 || len(h.results) != 0 {
		t.Errorf("%d requests, %d jobs after a lost claim; want nothing sent", n, len(h.results))
	}
	if dl := h.get().Status.DeadLetter; dl.Claim != nil || dl.Attempts != 0 {
		t.Errorf("status.deadLetter %+v; want no claim", dl)
	}
}

// A job the dispatcher refuses (stopping) was not sent: its not-sent outcome is recorded at once and the record is
// retried later; a job whose key the dispatcher already holds is left to it.
func TestDeliveryNotDispatched(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		h := newHarness(t, nil)
		h.submit = func(_ context.Context, job dispatch.Job[*send.Result]) (*send.Result, error) {
			return job.NotRun(dispatch.ErrStopped), dispatch.ErrStopped
		}
		res, held := h.reconcile()
		if !held || res.RequeueAfter != requeue.Now {
			t.Errorf("Reconcile = %+v, held %v; want the not-sent outcome recorded", res, held)
		}
		dl := h.get().Status.DeadLetter
		if dl.State != actionsv1alpha1.DeadLetterPending || dl.Claim != nil || dl.ErrorClass != "ShutdownBeforeSend" || dl.NextAttemptAt == nil {
			t.Errorf("status.deadLetter %+v; want Pending after a not-sent attempt, retried later", dl)
		}
		if n := len(h.sink.requests()); n != 0 {
			t.Errorf("the sink got %d requests, want 0", n)
		}
	})
	t.Run("already queued", func(t *testing.T) {
		h := newHarness(t, nil)
		h.submit = func(context.Context, dispatch.Job[*send.Result]) (*send.Result, error) {
			return nil, dispatch.ErrAlreadyQueued
		}
		if res, held := h.reconcile(); !held || res != (ctrl.Result{}) {
			t.Errorf("Reconcile = %+v, held %v; want held with no requeue (the dispatcher's completion wakes it)", res, held)
		}
		if dl := h.get().Status.DeadLetter; dl.Claim == nil {
			t.Errorf("status.deadLetter %+v; want the claim kept", dl)
		}
	})
}

// A person's give-up ends the record GivenUp, counted, and removes the annotations; nothing is sent.
func TestDeliveryGivenUpByAPerson(t *testing.T) {
	h := newHarness(t, nil, func(s *setup) {
		s.action = func(xa *actionsv1alpha1.ExternalAction) {
			xa.Annotations = map[string]string{actionsv1alpha1.AnnotationDeadLetter: actionsv1alpha1.DeadLetterGiveUp,
				actionsv1alpha1.AnnotationDeadLetterReason: "handled by hand"}
		}
	})
	before := deliveries()
	if _, held := h.reconcile(); !held {
		t.Error("not held while the decision is applied")
	}
	xa := h.get()
	if dl := xa.Status.DeadLetter; dl.State != actionsv1alpha1.DeadLetterGivenUp || !strings.Contains(dl.Message, "handled by hand") {
		t.Errorf("status.deadLetter %+v; want GivenUp with the reason", dl)
	}
	if len(xa.Annotations) != 0 {
		t.Errorf("annotations %v left", xa.Annotations)
	}
	counted(t, before, map[string]float64{"GivenUp": 1})
	if _, held := h.reconcile(); held || len(h.sink.requests()) != 0 {
		t.Errorf("after the give-up: held %v, %d requests; want not held, nothing sent", held, len(h.sink.requests()))
	}
}
