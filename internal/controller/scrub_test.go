//go:build !unit

package controller_test

import (
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/controller"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// echoServer is a loopback destination that quotes the credentials it receives (Authorization and X-Api-Key)
// back: /ok answers 201 with them in the body and in Location, /reject answers 400 with them in an error
// page, /busy answers 503 with them as Retry-After.
func echoServer(t *testing.T) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echo := strings.TrimSpace(r.Header.Get("Authorization") + " " + r.Header.Get("X-Api-Key"))
		switch r.URL.Path {
		case "/ok":
			w.Header().Set("Location", "/things/1?auth="+echo)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"id":"1","seen":%q}`, echo) //nolint:gosec // G705: echoing the request is what this test destination is for
		case "/reject":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, "<html>invalid credentials: %s</html>", echo) //nolint:gosec // G705: echoing the request is what this test destination is for
		default:
			w.Header().Set("Retry-After", echo)
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// DESIGN rule 11: a destination that echoes the credentials gets [REDACTED] in status.response (body and
// headers), attemptHistory, lastError, conditions and Events, never a Secret value, for each kind of auth.
func TestSecretsEchoedByTheDestinationAreRedacted(t *testing.T) {
	url := echoServer(t)
	env.StartManager(t, app.Options{})
	for _, tc := range []struct {
		name   string
		data   map[string]string
		auth   actionsv1alpha1.AuthConfig
		leaked []string // every form of the Secret values that must not appear
	}{
		{"bearer", map[string]string{"token": "tok-5f0c2a9e71b3\n"}, //nolint:gosec // G101: a test credential

			actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "cred", Key: "token"}},
			[]string{"tok-5f0c2a9e71b3"}},
		{"basic", map[string]string{"username": "svc-orders", "password": "pa55-w0rd-8c1d"}, //nolint:gosec // G101: a test credential

			actionsv1alpha1.AuthConfig{Basic: &actionsv1alpha1.SecretReference{Name: "cred"}},
			[]string{"pa55-w0rd-8c1d", base64.StdEncoding.EncodeToString([]byte("svc-orders:pa55-w0rd-8c1d"))}},
		{"header", map[string]string{"key": "k-7e21d4b09a6f"},
			actionsv1alpha1.AuthConfig{Headers: []actionsv1alpha1.HeaderFromSecret{{Name: "X-Api-Key",
				ValueFrom: actionsv1alpha1.SecretKeySelector{Name: "cred", Key: "key"}}}},
			[]string{"k-7e21d4b09a6f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cred"}, StringData: tc.data})
			env.CreateDestination(t, ns, "echo", url, func(s *actionsv1alpha1.DestinationSpec) {
				s.Auth = tc.auth.DeepCopy()
				two := int32(2)
				s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &two, InitialBackoff: durationp(100 * time.Millisecond),
					MaxBackoff: durationp(200 * time.Millisecond)}
			})
			env.Create(t, envtestutil.Action(ns, "ok", "echo", "/ok", `{"n":1}`))
			env.Create(t, envtestutil.Action(ns, "reject", "echo", "/reject", `{"n":2}`))
			env.Create(t, envtestutil.Action(ns, "busy", "echo", "/busy", `{"n":3}`))

			ok := env.WaitPhase(t, ns, "ok", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
			if r := ok.Status.Response; r == nil || !strings.Contains(r.Body, `"seen":"[REDACTED]"`) ||
				r.Headers["Location"] != "/things/1?auth=[REDACTED]" {
				t.Errorf("response = %s, want the echoed credentials redacted in body and Location", envtestutil.JSON(r))
			}
			rej := env.WaitPhase(t, ns, "reject", actionsv1alpha1.PhaseFailed, 30*time.Second)
			if r := rej.Status.Response; r == nil || r.Body != "<html>invalid credentials: [REDACTED]</html>" {
				t.Errorf("rejected response = %s", envtestutil.JSON(r))
			}
			busy := env.WaitPhase(t, ns, "busy", actionsv1alpha1.PhaseExhausted, 30*time.Second)
			if len(busy.Status.AttemptHistory) != 2 || busy.Status.AttemptHistory[0].RetryAfter != "[REDACTED]" ||
				!strings.Contains(busy.Status.LastError, "[REDACTED]") {
				t.Errorf("exhausted status = %s, want Retry-After redacted in history and lastError", envtestutil.JSON(busy.Status))
			}
			env.WaitEvent(t, ns, "busy", corev1.EventTypeWarning, actionsv1alpha1.ReasonAttemptsExhausted, 10*time.Second)
			env.WaitEvent(t, ns, "reject", corev1.EventTypeWarning, actionsv1alpha1.ReasonRejected, 10*time.Second)

			var dump strings.Builder
			for _, name := range []string{"ok", "reject", "busy"} {
				dump.WriteString(strings.Join(env.Events(t, ns, name), "\n"))
				dump.WriteString(envtestutil.JSON(env.Get(t, ns, name).Status))
			}
			if !strings.Contains(dump.String(), "Retry-After \\\"[REDACTED]\\\"") {
				t.Errorf("conditions and events do not show the redacted Retry-After: %s", dump.String())
			}
			for _, s := range tc.leaked {
				if strings.Contains(dump.String(), s) {
					t.Fatalf("%q leaked into status or events: %s", s, dump.String())
				}
			}
		})
	}
}

// A Secret value too short to redact is refused before anything is sent, with a message naming the key.
func TestShortSecretValueRefused(t *testing.T) {
	ns := env.Namespace(t)
	var requests atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { requests.Add(1) }))
	t.Cleanup(ts.Close)
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cred"}, StringData: map[string]string{"key": "42"}})
	env.CreateDestination(t, ns, "short", ts.URL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{Headers: []actionsv1alpha1.HeaderFromSecret{{Name: "X-Tenant",
			ValueFrom: actionsv1alpha1.SecretKeySelector{Name: "cred", Key: "key"}}}}
	})
	env.StartManager(t, app.Options{})
	env.Create(t, envtestutil.Action(ns, "a", "short", "/x", `{}`))
	env.WaitFor(t, ns, "a", 30*time.Second, "DestinationNotReady naming the short key", func(x *actionsv1alpha1.ExternalAction) bool {
		return strings.Contains(x.Status.LastError+envtestutil.JSON(x.Status.Conditions), `key \"key\" of Secret`)
	})
	if n := requests.Load(); n != 0 {
		t.Fatalf("destination received %d requests", n)
	}
}

// A destination answering 503 with a 200-character Retry-After and then 201 with a 64 KiB Location cannot wedge
// the action: both outcomes are recorded (values cut to their bounds), and the object can be deleted.
func TestOversizedDestinationValuesDoNotWedge(t *testing.T) {
	ns := env.Namespace(t)
	var requests atomic.Int32
	hugeLocation := "/things/" + strings.Repeat("é", 32<<10)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", strings.Repeat("x", 200))
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Location", hugeLocation)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(ts.Close)
	env.CreateDestination(t, ns, "wide", ts.URL, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{InitialBackoff: durationp(100 * time.Millisecond), MaxBackoff: durationp(200 * time.Millisecond)}
	})
	env.StartManager(t, app.Options{})
	env.Create(t, envtestutil.Action(ns, "wide", "wide", "/x", `{}`))
	xa := env.WaitPhase(t, ns, "wide", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got := requests.Load(); got != 2 {
		t.Errorf("requests = %d, want 2 (one 503, one 201)", got)
	}
	if h := xa.Status.AttemptHistory; len(h) != 2 || h[0].RetryAfter != strings.Repeat("x", actionsv1alpha1.MaxRetryAfterLength) {
		t.Errorf("history = %s, want the Retry-After cut to %d bytes", envtestutil.JSON(h), actionsv1alpha1.MaxRetryAfterLength)
	}
	loc := xa.Status.Response.Headers["Location"]
	if len(loc) > actionsv1alpha1.MaxResponseHeaderValueLength || len(loc) < actionsv1alpha1.MaxResponseHeaderValueLength-1 ||
		!strings.HasPrefix(hugeLocation, loc) {
		t.Errorf("Location kept has %d bytes, want the first %d of the value, cut on a UTF-8 boundary", len(loc), actionsv1alpha1.MaxResponseHeaderValueLength)
	}
	if err := env.Client.Delete(context.Background(), xa); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("the action to be deleted"), func() bool {
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(xa), &actionsv1alpha1.ExternalAction{}))
	})
	ts2 := &actionsv1alpha1.ActionTombstone{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(xa), ts2); err != nil || ts2.Spec.Phase != actionsv1alpha1.PhaseSucceeded {
		t.Errorf("tombstone = %+v (err %v), want phase Succeeded", ts2.Spec, err)
	}
}

// statusFaults is a reconciler whose status writes of an outcome (a status with a response) are refused as
// Invalid: the first refused, or all of them.
type statusFaults struct {
	refuseAll bool
	refused   atomic.Int32
}

func (f *statusFaults) reconciler(t *testing.T, name string, rec *events.FakeRecorder) *controller.ExternalActionReconciler {
	t.Helper()
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	faulty := interceptor.NewClient(direct, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			xa, ok := obj.(*actionsv1alpha1.ExternalAction)
			if ok && sub == "status" && xa.Name == name && xa.Status.Response != nil && (f.refuseAll || f.refused.Load() == 0) {
				f.refused.Add(1)
				return apierrors.NewInvalid(schema.GroupKind{Group: actionsv1alpha1.GroupVersion.Group, Kind: "ExternalAction"}, name,
					field.ErrorList{field.TooLong(field.NewPath("status", "response", "body"), "", actionsv1alpha1.MaxResponseBodyLength)})
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	return &controller.ExternalActionReconciler{
		Client: faulty, APIReader: direct, Scheme: app.Scheme, Recorder: annotated{rec}, Clock: clock.RealClock{},
		Executor: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy())), Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16),
		Dispatcher: &controller.InlineDispatcher{Clock: clock.RealClock{}},
		Options:    controller.Options{Holder: "faulty-" + name, ClaimMargin: time.Second},
	}
}

// drive reconciles ns/name until its phase is terminal (following RequeueAfter), or fails after timeout.
func drive(t *testing.T, r *controller.ExternalActionReconciler, ns, name string, timeout time.Duration) *actionsv1alpha1.ExternalAction {
	t.Helper()
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}
	deadline := time.Now().Add(timeout)
	for {
		res, err := r.Reconcile(context.Background(), req)
		if err != nil {
			t.Logf("reconcile: %v", err)
		}
		xa := env.Get(t, ns, name)
		if xa.Status.Phase.Terminal() {
			return xa
		}
		if time.Now().After(deadline) {
			t.Fatalf("not terminal after %s: %s", timeout, envtestutil.JSON(xa.Status))
		}
		time.Sleep(min(max(res.RequeueAfter, 20*time.Millisecond), time.Second)) // waiting for the requeue, as the queue would
	}
}

func fixedStatusServer(t *testing.T, status int) (string, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.Header().Set("Location", "/things/1")
		w.WriteHeader(status)
		_, _ = fmt.Fprint(w, `{"id":"1"}`)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, &n
}

func fakeEvents(rec *events.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

// An outcome whose status write the API server refuses as Invalid is recorded without the destination's
// values (a Warning Event says so), not retried forever, and never sent again.
func TestInvalidOutcomeWriteRecordsMinimalOutcome(t *testing.T) {
	ns := env.Namespace(t)
	url, requests := fixedStatusServer(t, http.StatusCreated)
	env.CreateDestination(t, ns, "d", url, nil)
	env.Create(t, envtestutil.Action(ns, "inv", "d", "/x", `{}`))
	rec := events.NewFakeRecorder(100)
	f := &statusFaults{}
	xa := drive(t, f.reconciler(t, "inv", rec), ns, "inv", 20*time.Second)

	if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || f.refused.Load() != 1 {
		t.Fatalf("phase %s after %d refused writes, want Succeeded after 1", xa.Status.Phase, f.refused.Load())
	}
	if r := xa.Status.Response; r == nil || r.StatusCode != 201 || r.Body != "" || r.Headers != nil || !r.BodyTruncated ||
		!strings.HasPrefix(r.BodySHA256, "sha256:") || !strings.Contains(xa.Status.LastError, "refused") {
		t.Errorf("status = %s, want the minimal outcome (code and hash, no body or headers, a note)", envtestutil.JSON(xa.Status))
	}
	if ev := fakeEvents(rec); !strings.Contains(ev, "Warning "+actionsv1alpha1.ReasonStatusTrimmed) {
		t.Errorf("events %q lack a Warning %s", ev, actionsv1alpha1.ReasonStatusTrimmed)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("destination received %d requests, want 1", n)
	}
}

// When even the minimal outcome is refused, the outcome held in memory is dropped with a Warning Event; the open
// claim then follows DESIGN rule 3 (an unsafe POST without post-check ends OutcomeUnknown), and nothing is resent.
func TestRefusedOutcomeIsDroppedNotResent(t *testing.T) {
	ns := env.Namespace(t)
	url, requests := fixedStatusServer(t, http.StatusCreated)
	env.CreateDestination(t, ns, "d", url, func(s *actionsv1alpha1.DestinationSpec) { s.Timeout = durationp(time.Second) })
	env.Create(t, envtestutil.Action(ns, "ref", "d", "/x", `{}`))
	rec := events.NewFakeRecorder(100)
	f := &statusFaults{refuseAll: true}
	xa := drive(t, f.reconciler(t, "ref", rec), ns, "ref", 30*time.Second)
	if xa.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown {
		t.Errorf("phase = %s, want OutcomeUnknown", xa.Status.Phase)
	}
	if ev := fakeEvents(rec); !strings.Contains(ev, "Warning "+actionsv1alpha1.ReasonStatusRefused) {
		t.Errorf("events %q lack a Warning %s", ev, actionsv1alpha1.ReasonStatusRefused)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("destination received %d requests, want 1", n)
	}
}

// An object deleted while its outcome cannot be written is finalized with the outcome held in memory: its
// tombstone carries it, and the object goes.
func TestDeletionNotHeldByParkedOutcome(t *testing.T) {
	ns := env.Namespace(t)
	url, requests := fixedStatusServer(t, http.StatusCreated)
	env.CreateDestination(t, ns, "d", url, nil)
	env.Create(t, envtestutil.Action(ns, "del", "d", "/x", `{}`))
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var deleted atomic.Bool
	faulty := interceptor.NewClient(direct, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if xa, ok := obj.(*actionsv1alpha1.ExternalAction); ok && xa.Status.Response != nil {
				if !deleted.Swap(true) { // the object is deleted while the outcome is in flight
					if err := c.Delete(ctx, xa.DeepCopy()); err != nil {
						return err
					}
				}
				return apierrors.NewServiceUnavailable("etcd is unhappy")
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	r := &controller.ExternalActionReconciler{
		Client: faulty, APIReader: direct, Scheme: app.Scheme, Recorder: fakeEventRecorder(), Clock: clock.RealClock{},
		Executor: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy())), Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16),
		Dispatcher: &controller.InlineDispatcher{Clock: clock.RealClock{}},
		Options:    controller.Options{Holder: "parked", ClaimMargin: time.Second},
	}
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "del"}}
	envtestutil.Eventually(t, 60*time.Second, envtestutil.Say("the deleted action to go"), func() bool {
		_, _ = r.Reconcile(context.Background(), req)
		return apierrors.IsNotFound(direct.Get(context.Background(), req.NamespacedName, &actionsv1alpha1.ExternalAction{}))
	})
	ts := &actionsv1alpha1.ActionTombstone{}
	if err := direct.Get(context.Background(), req.NamespacedName, ts); err != nil || ts.Spec.Phase != actionsv1alpha1.PhaseSucceeded ||
		ts.Spec.StatusCode != 201 {
		t.Errorf("tombstone = %+v (err %v), want the parked outcome: Succeeded, 201", ts.Spec, err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("destination received %d requests, want 1", n)
	}
}

// An output expression and a successWhen that fail on a value of the response say which expression failed
// and the kind of failure, never the value: a planted value appears in no condition, lastError or Event
// (issue 23 row 9).
func TestResponseValuesNeverQuotedInMessages(t *testing.T) {
	const planted = "PLANTED-c0ffee42"
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":%q}`, planted)
	}))
	t.Cleanup(ts.Close)
	ns := env.Namespace(t)
	env.CreateDestination(t, ns, "shop", ts.URL, nil)
	env.StartManager(t, app.Options{})
	env.Create(t, outputAction(ns, "out", "shop", "out-target", false, map[string]actionsv1alpha1.OutputExpression{
		"x": `{"x": "1"}[response.body.id]`}))
	when := envtestutil.Action(ns, "when", "shop", "/orders", `{"n":1}`)
	when.Spec.SuccessWhen = `{"x": true}[response.body.id]`
	env.Create(t, when)

	out := outputsReason(t, ns, "out", actionsv1alpha1.ReasonOutputExpressionFailed)
	if o := condition(out, actionsv1alpha1.ConditionOutputsReady); !strings.Contains(o.Message, `spec.outputs.values["x"]`) ||
		!strings.Contains(o.Message, "no such key") {
		t.Errorf("OutputsReady = %+v, want the key and the kind of failure named", o)
	}
	// The successWhen that failed leaves the 201 a rejection (lastError names the status; the outcome's error,
	// tested in internal/send, names the expression).
	env.WaitPhase(t, ns, "when", actionsv1alpha1.PhaseFailed, 30*time.Second)
	env.WaitEvent(t, ns, "out", corev1.EventTypeWarning, actionsv1alpha1.ReasonOutputExpressionFailed, 10*time.Second)
	env.WaitEvent(t, ns, "when", corev1.EventTypeWarning, actionsv1alpha1.ReasonRejected, 10*time.Second)
	for _, name := range []string{"out", "when"} {
		st := env.Get(t, ns, name).Status
		st.Response = nil // the kept response is the one place the body belongs
		dump := strings.Join(env.Events(t, ns, name), "\n") + envtestutil.JSON(st)
		if strings.Contains(dump, planted) {
			t.Errorf("%s: the response value %q is quoted in status or events: %s", name, planted, dump)
		}
	}
}

// Case C16: a shared destination echoes the request's Authorization behind a prefix, behind a byte order mark,
// as JSONP with \u002f escapes, and gzip-compressed although the manager asked for the identity coding. Status
// never holds the token in any form, and successWhen sees no compressed length.
func TestEchoBehindAPrefixOrCompressedIsRedacted(t *testing.T) {
	const token = "tok-ab/cd+9f3e1c77" //nolint:gosec // G101: a test credential
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		esc := strings.NewReplacer("/", `\u002f`, "+", `\u002B`).Replace(r.Header.Get("Authorization"))
		body := []byte(`{"auth":"` + esc + `"}`)
		switch r.URL.Path {
		case "/prefix":
			body = append([]byte(")]}'\n"), body...)
		case "/bom":
			body = append([]byte("\ufeff"), body...)
		case "/jsonp":
			body = []byte("cb(" + string(body) + ");")
		case "/gzip":
			var buf strings.Builder
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(body)
			_ = zw.Close()
			body = []byte(buf.String())
			w.Header().Set("Content-Encoding", "gzip")
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = w.Write(body) //nolint:gosec // G705: echoing the request is what this test destination is for
	}))
	t.Cleanup(ts.Close)
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cred"}, StringData: map[string]string{"token": token}})
	env.CreateDestination(t, ns, "echo", ts.URL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "cred", Key: "token"}}
	})
	for _, form := range []string{"prefix", "bom", "jsonp", "gzip"} {
		xa := envtestutil.Action(ns, form, "echo", "/"+form, `{}`)
		xa.Spec.SuccessWhen = `response.statusCode == 200 && !('content-length' in response.headers && '` + form + `' == 'gzip')`
		env.Create(t, xa)
	}
	for _, form := range []string{"prefix", "bom", "jsonp", "gzip"} {
		got := env.WaitPhase(t, ns, form, actionsv1alpha1.PhaseSucceeded, 30*time.Second)
		dump := envtestutil.JSON(got.Status)
		if !strings.Contains(got.Status.Response.Body, `"auth":"[REDACTED]"`) {
			t.Errorf("%s: body %q, want the echo redacted", form, got.Status.Response.Body)
		}
		for _, leak := range []string{"ab/cd", `ab\u002fcd`, `ab\\u002fcd`, "9f3e1c77"} {
			if strings.Contains(dump, leak) {
				t.Errorf("%s: %q in status %s", form, leak, dump)
			}
		}
	}
}
