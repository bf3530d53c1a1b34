//go:build !unit

package controller_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/controller"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	oauthClientID     = "orders-client"
	oauthClientSecret = "cs-4b7e1d9a2f60" //nolint:gosec // G101: a test credential
)

// tokenEndpoint is an OAuth2 token endpoint (client credentials, RFC 6749 section 4.4) on loopback: it checks
// the client's credentials, issues a fresh random token per request with expires_in, and counts requests.
// With down set it answers 503 to everything.
type tokenEndpoint struct {
	*httptest.Server
	requests  atomic.Int32
	expiresIn atomic.Int32
	down      atomic.Bool
	mu        sync.Mutex
	issued    []string
}

func newTokenEndpoint(t *testing.T) *tokenEndpoint {
	t.Helper()
	te := &tokenEndpoint{}
	te.expiresIn.Store(3600)
	te.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te.requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = r.ParseForm()
		id, secret, ok := r.BasicAuth()
		switch {
		case te.down.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprint(w, `{"error":"temporarily_unavailable"}`)
			return
		case !ok || id != oauthClientID || secret != oauthClientSecret || r.PostForm.Get("grant_type") != "client_credentials" ||
			r.PostForm.Get("scope") != "orders:write":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		var b [12]byte
		_, _ = rand.Read(b[:])
		tok := "at-" + hex.EncodeToString(b[:])
		te.mu.Lock()
		te.issued = append(te.issued, tok)
		te.mu.Unlock()
		_, _ = fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":%d}`, tok, te.expiresIn.Load())
	}))
	t.Cleanup(te.Close)
	return te
}

func (te *tokenEndpoint) tokens() []string {
	te.mu.Lock()
	defer te.mu.Unlock()
	return slices.Clone(te.issued)
}

// bearerAPI is a destination that accepts only tokens the token endpoint issued (and, with refuseFirst, not
// the first one: it was revoked), applies each accepted request once, and echoes the Authorization header it
// got in its body, so that redaction is visible.
type bearerAPI struct {
	*httptest.Server
	requests, applied atomic.Int32
	refuseFirst       atomic.Bool
}

func newBearerAPI(t *testing.T, te *tokenEndpoint) *bearerAPI {
	t.Helper()
	api := &bearerAPI{}
	api.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.requests.Add(1)
		auth := r.Header.Get("Authorization")
		tok, _ := strings.CutPrefix(auth, "Bearer ")
		issued := te.tokens()
		w.Header().Set("Content-Type", "application/json")
		if !slices.Contains(issued, tok) || api.refuseFirst.Load() && tok == issued[0] {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprintf(w, `{"error":"invalid_token","seen":%q}`, auth) //nolint:gosec // G705: echoing is the point
			return
		}
		api.applied.Add(1)
		w.Header().Set("Location", "/orders/1?auth="+tok)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":"1","seen":%q}`, auth) //nolint:gosec // G705: echoing is the point
	}))
	t.Cleanup(api.Close)
	return api
}

// oauthDestination creates the client's Secret and a Destination at url whose auth is oauth2 at tokenURL.
func oauthDestination(t *testing.T, ns, name, url, tokenURL string, attempts int32) {
	t.Helper()
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-client"},
		StringData: map[string]string{"client-id": oauthClientID, "client-secret": oauthClientSecret + "\n"}})
	env.CreateDestination(t, ns, name, url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{OAuth2: &actionsv1alpha1.OAuth2ClientCredentials{
			TokenURL:     tokenURL,
			ClientID:     actionsv1alpha1.SecretKeySelector{Name: name + "-client", Key: "client-id"},
			ClientSecret: actionsv1alpha1.SecretKeySelector{Name: name + "-client", Key: "client-secret"},
			Scopes:       []string{"orders:write"},
		}}
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &attempts, InitialBackoff: durationp(100 * time.Millisecond),
			MaxBackoff: durationp(200 * time.Millisecond)}
	})
}

// dumpOf is the status and the Events of the named actions, for leak checks.
func dumpOf(t *testing.T, ns string, names ...string) string {
	t.Helper()
	var b strings.Builder
	for _, n := range names {
		b.WriteString(envtestutil.JSON(env.Get(t, ns, n).Status))
		b.WriteString(strings.Join(env.Events(t, ns, n), "\n"))
	}
	return b.String()
}

func assertNoToken(t *testing.T, where string, tokens []string) {
	t.Helper()
	for _, tok := range tokens {
		if strings.Contains(where, tok) || strings.Contains(where, tok[3:]) {
			t.Fatalf("the access token %q leaked: %s", tok, where)
		}
	}
}

// One token serves many sends: three actions to an oauth2 destination make one token request; the
// destination saw the token, and echoed it, but status and Events show [REDACTED], never the token.
// A token within its early expiry (30s) is fetched anew: expires_in 31s is renewed about a second later.
func TestOAuth2TokenCachedAndRenewed(t *testing.T) {
	te := newTokenEndpoint(t)
	api := newBearerAPI(t, te)
	env.StartManager(t, app.Options{AllEvents: true})
	ns := env.Namespace(t)
	oauthDestination(t, ns, "orders", api.URL, te.URL+"/oauth2/token", 3)
	for i, name := range []string{"a", "b", "c"} {
		env.Create(t, envtestutil.Action(ns, name, "orders", "/orders", fmt.Sprintf(`{"n":%d}`, i)))
	}
	for _, name := range []string{"a", "b", "c"} {
		xa := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseSucceeded, 30*time.Second)
		if r := xa.Status.Response; r == nil || !strings.Contains(r.Body, `"seen":"[REDACTED]"`) || r.Headers["Location"] != "/orders/1?auth=[REDACTED]" {
			t.Errorf("%s: response %s, want the echoed token redacted in the body and Location", name, envtestutil.JSON(r))
		}
	}
	if n := te.requests.Load(); n != 1 {
		t.Fatalf("%d token requests for three sends, want 1 (the token is cached)", n)
	}
	if api.applied.Load() != 3 || api.requests.Load() != 3 {
		t.Errorf("destination: %d requests, %d applied; want 3 and 3", api.requests.Load(), api.applied.Load())
	}
	assertNoToken(t, dumpOf(t, ns, "a", "b", "c"), te.tokens())

	// A short-lived token: expires_in 31s is within DefaultTokenEarlyExpiry (30s) after one second.
	ns2 := env.Namespace(t)
	te.expiresIn.Store(31)
	oauthDestination(t, ns2, "short", api.URL, te.URL+"/oauth2/token", 3)
	env.Create(t, envtestutil.Action(ns2, "first", "short", "/orders", `{"n":1}`))
	env.WaitPhase(t, ns2, "first", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	issuedAt := time.Now()
	if n := te.requests.Load(); n != 2 {
		t.Fatalf("%d token requests, want 2 (one more for the new destination)", n)
	}
	time.Sleep(time.Until(issuedAt.Add(1500 * time.Millisecond))) // let the token reach its early expiry
	env.Create(t, envtestutil.Action(ns2, "second", "short", "/orders", `{"n":2}`))
	env.WaitPhase(t, ns2, "second", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if n := te.requests.Load(); n != 3 {
		t.Errorf("%d token requests, want 3 (the token was renewed before it expired)", n)
	}
}

// A 401 from the destination drops the token: the attempt is retried (a 401 says the request was not
// processed), with a new token, and the destination applies the action once, though it is an unsafe POST
// without deduplication. The same 401 to a destination with a static bearer token stays a rejection.
func TestOAuth2RefusedTokenIsRenewedAndRetried(t *testing.T) {
	te := newTokenEndpoint(t)
	api := newBearerAPI(t, te)
	api.refuseFirst.Store(true)
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	oauthDestination(t, ns, "orders", api.URL, te.URL+"/oauth2/token", 3)
	env.Create(t, envtestutil.Action(ns, "pay", "orders", "/orders", `{"amount":100}`))
	xa := env.WaitPhase(t, ns, "pay", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	h := xa.Status.AttemptHistory
	if len(h) != 2 || h[0].StatusCode != http.StatusUnauthorized || h[0].Result != "Retryable" || h[1].StatusCode != http.StatusCreated {
		t.Fatalf("history %s: want a retryable 401, then 201", envtestutil.JSON(h))
	}
	if te.requests.Load() != 2 || api.requests.Load() != 2 || api.applied.Load() != 1 {
		t.Errorf("token requests %d, destination requests %d, applied %d: want 2, 2, 1",
			te.requests.Load(), api.requests.Load(), api.applied.Load())
	}
	assertNoToken(t, dumpOf(t, ns, "pay"), te.tokens())

	// Without oauth2 a 401 is the destination's answer: Failed, not retried.
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "static"},
		StringData: map[string]string{"token": "static-token-19af"}})
	env.CreateDestination(t, ns, "static", api.URL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "static", Key: "token"}}
	})
	env.Create(t, envtestutil.Action(ns, "static-pay", "static", "/orders", `{"amount":100}`))
	if got := env.WaitPhase(t, ns, "static-pay", actionsv1alpha1.PhaseFailed, 30*time.Second); got.Status.Attempts != 1 {
		t.Errorf("static bearer 401: %d attempts, want 1", got.Status.Attempts)
	}
}

// A token endpoint that does not give a token sends nothing to the destination: each attempt is recorded as
// NotSent with errorClass TokenUnavailable and the endpoint's answer, retried within the policy, then
// Exhausted. Once the endpoint works again, a new action goes through.
func TestOAuth2TokenEndpointDownSendsNothing(t *testing.T) {
	te := newTokenEndpoint(t)
	te.down.Store(true)
	api := newBearerAPI(t, te)
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	oauthDestination(t, ns, "orders", api.URL, te.URL+"/oauth2/token", 2)
	env.Create(t, envtestutil.Action(ns, "pay", "orders", "/orders", `{"amount":100}`))
	xa := env.WaitPhase(t, ns, "pay", actionsv1alpha1.PhaseExhausted, 30*time.Second)
	for _, a := range xa.Status.AttemptHistory {
		if a.Result != "NotSent" || a.ErrorClass != string(httpexec.ClassTokenUnavailable) || a.StatusCode != 0 {
			t.Errorf("attempt %s: want NotSent, TokenUnavailable, no status", envtestutil.JSON(a))
		}
	}
	if len(xa.Status.AttemptHistory) != 2 || !strings.Contains(xa.Status.LastError, "HTTP 503") ||
		!strings.Contains(xa.Status.LastError, "nothing was sent") {
		t.Errorf("status %s: want two attempts and lastError naming the token endpoint's 503", envtestutil.JSON(xa.Status))
	}
	if api.requests.Load() != 0 {
		t.Fatalf("the destination got %d requests while no token could be had, want 0", api.requests.Load())
	}
	if n := te.requests.Load(); n != 2 {
		t.Errorf("%d token requests for 2 attempts, want one per attempt (a 503 says nothing about the client authentication)", n)
	}
	te.down.Store(false)
	env.Create(t, envtestutil.Action(ns, "later", "orders", "/orders", `{"amount":100}`))
	env.WaitPhase(t, ns, "later", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if api.applied.Load() != 1 {
		t.Errorf("applied %d, want 1", api.applied.Load())
	}
}

// The egress policy applies to the token URL: a token endpoint on 127.0.0.2 (test managers allow only
// 127.0.0.1) never gets a connection; the Destination is Ready=False/EgressDenied naming tokenURL, and the
// action sends nothing to the (allowed) destination.
func TestOAuth2TokenURLUnderEgressPolicy(t *testing.T) {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	cl := &destination.CountingListener{Listener: l}
	denied := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	denied.Listener = cl
	denied.Start()
	t.Cleanup(denied.Close)
	api := newBearerAPI(t, &tokenEndpoint{})
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	oauthDestination(t, ns, "orders", api.URL, denied.URL+"/token", 2)
	env.Create(t, envtestutil.Action(ns, "pay", "orders", "/orders", `{"amount":100}`))
	envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("Destination Ready=False/EgressDenied naming spec.auth.oauth2.tokenURL"), func() bool {
		d := &actionsv1alpha1.Destination{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "orders"}, d); err != nil {
			return false
		}
		c := meta.FindStatusCondition(d.Status.Conditions, actionsv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == actionsv1alpha1.ReasonEgressDenied &&
			strings.Contains(c.Message, "spec.auth.oauth2.tokenURL")
	})
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("nothing dialled or sent"), func() bool {
		return cl.Accepted() == 0 && api.requests.Load() == 0
	})
	xa := env.Get(t, ns, "pay")
	for _, a := range xa.Status.AttemptHistory {
		if a.Result != "NotSent" || a.ErrorClass != string(httpexec.ClassTokenUnavailable) {
			t.Errorf("attempt %s: want NotSent/TokenUnavailable (an egress denial of the token endpoint)", envtestutil.JSON(a))
		}
	}
}

// No log line, up to verbosity 7, carries the token or the client secret, though the destination echoes the
// token in its answers and refuses the first one.
func TestOAuth2TokenNeverLogged(t *testing.T) {
	te := newTokenEndpoint(t)
	api := newBearerAPI(t, te)
	api.refuseFirst.Store(true) // a 401 with the first token, a retry with the second
	ns := env.Namespace(t)
	oauthDestination(t, ns, "orders", api.URL, te.URL+"/oauth2/token", 3)
	env.Create(t, envtestutil.Action(ns, "pay", "orders", "/orders", `{"amount":100}`))
	direct, err := client.New(env.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(100)
	r := &controller.ExternalActionReconciler{
		Client: direct, APIReader: direct, Scheme: app.Scheme, Recorder: annotated{rec}, Clock: clock.RealClock{},
		Executor: httpexec.New(httpexec.WithEgressPolicy(envtestutil.LoopbackPolicy())), Limiter: limiter.NewRegistry(),
		Exprs: expr.NewCache(16), Dispatcher: &controller.InlineDispatcher{Clock: clock.RealClock{}},
		Options: controller.Options{Holder: "logs", ClaimMargin: time.Second},
	}
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 7}) // client-go dumps request and response bodies, Secrets included, from V(8) on
	ctx := log.IntoContext(context.Background(), logger)
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "pay"}}
	deadline := time.Now().Add(30 * time.Second)
	for !env.Get(t, ns, "pay").Status.Phase.Terminal() {
		if time.Now().After(deadline) {
			t.Fatalf("not terminal: %s", envtestutil.JSON(env.Get(t, ns, "pay").Status))
		}
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Logf("reconcile: %v", err)
		}
		time.Sleep(min(max(res.RequeueAfter, 20*time.Millisecond), time.Second)) // the requeue, as the queue would wait
	}
	if xa := env.Get(t, ns, "pay"); xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || api.applied.Load() != 1 {
		t.Fatalf("phase %s, applied %d: want Succeeded once", xa.Status.Phase, api.applied.Load())
	}
	mu.Lock()
	all := strings.Join(lines, "\n")
	mu.Unlock()
	if len(lines) == 0 || !strings.Contains(all, "attempt finished") {
		t.Fatalf("no attempt was logged: %s", all)
	}
	assertNoToken(t, all, te.tokens())
	if strings.Contains(all, oauthClientSecret) {
		t.Fatalf("the client secret leaked into the log: %s", all)
	}
	close(rec.Events)
	for ev := range rec.Events {
		assertNoToken(t, ev, te.tokens())
	}
}

// The destination validator reads the Secrets of auth.oauth2 and signing too: a missing client Secret or a
// Standard Webhooks secret that is not base64 makes the destination Ready=False with a message naming the
// key, and an action waits, sending nothing.
func TestDestinationReadyChecksOAuth2AndSigningSecrets(t *testing.T) {
	te := newTokenEndpoint(t)
	api := newBearerAPI(t, te)
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	env.CreateDestination(t, ns, "no-client", api.URL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{OAuth2: &actionsv1alpha1.OAuth2ClientCredentials{TokenURL: te.URL,
			ClientID:     actionsv1alpha1.SecretKeySelector{Name: "missing-client", Key: "client-id"},
			ClientSecret: actionsv1alpha1.SecretKeySelector{Name: "missing-client", Key: "client-secret"}}}
	})
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-signing"},
		StringData: map[string]string{"secret": "whsec_not*base64*at-all"}}) //nolint:gosec // G101: a test value
	env.CreateDestination(t, ns, "bad-signing", api.URL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Signing = &actionsv1alpha1.SigningConfig{StandardWebhooks: &actionsv1alpha1.StandardWebhooksSigning{
			SecretRef: actionsv1alpha1.SecretKeySelector{Name: "bad-signing", Key: "secret"}}}
	})
	for name, want := range map[string]string{"no-client": `missing-client`, "bad-signing": "not base64"} {
		envtestutil.Eventually(t, 30*time.Second, envtestutil.Say(name+": Ready=False naming "+want), func() bool {
			d := &actionsv1alpha1.Destination{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
				return false
			}
			c := meta.FindStatusCondition(d.Status.Conditions, actionsv1alpha1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, want) &&
				!strings.Contains(c.Message, "not*base64")
		})
		env.Create(t, envtestutil.Action(ns, "pay-"+name, name, "/orders", `{"amount":1}`))
	}
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("nothing sent, no token asked"), func() bool {
		return api.requests.Load() == 0 && te.requests.Load() == 0
	})
	for _, name := range []string{"pay-no-client", "pay-bad-signing"} {
		if xa := env.Get(t, ns, name); xa.Status.Attempts != 0 {
			t.Errorf("%s: %d attempts, want 0 (it waits for its destination)", name, xa.Status.Attempts)
		}
	}
}

// A post-check whose token is refused (401) learns nothing about the effect: it is inconclusive and asked again
// with a new token, even when notApplied would hold for a 401 (statusCode >= 400). An unsafe POST whose answer
// never came is therefore not re-sent on the strength of a refused token; the second check finds it applied.
func TestOAuth2RefusedTokenPostCheckIsInconclusive(t *testing.T) {
	te := newTokenEndpoint(t)
	var posts, applied, checks atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		issued := te.tokens()
		if r.Method == http.MethodGet {
			checks.Add(1)
			switch {
			case !slices.Contains(issued, tok) || tok == issued[0]: // the first token is refused at the check
				w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
				w.WriteHeader(http.StatusUnauthorized)
			case applied.Load() > 0:
				w.WriteHeader(http.StatusOK)
			default:
				w.WriteHeader(http.StatusNotFound)
			}
			return
		}
		posts.Add(1)
		applied.Add(1)
		select { // applied, but the answer comes after the attempt's timeout: uncertain
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(api.Close)
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	oauthDestination(t, ns, "orders", api.URL, te.URL+"/oauth2/token", 3)
	env.UpdateDestination(t, ns, "orders", func(d *actionsv1alpha1.Destination) {
		d.Spec.Timeout = durationp(time.Second)
		d.Spec.Reconciliation = &actionsv1alpha1.ReconciliationCheck{Path: "/effects?key={key}",
			Applied: "response.statusCode == 200", NotApplied: "response.statusCode >= 400"}
	})
	env.Create(t, envtestutil.Action(ns, "pay", "orders", "/orders", `{"amount":100}`))
	xa := env.WaitPhase(t, ns, "pay", actionsv1alpha1.PhaseSucceeded, 60*time.Second)
	if posts.Load() != 1 || applied.Load() != 1 || checks.Load() < 2 {
		t.Fatalf("POSTs %d, applied %d, post-checks %d: want 1, 1, at least 2 (the refused check is asked again)\n%s",
			posts.Load(), applied.Load(), checks.Load(), envtestutil.JSON(xa.Status))
	}
	assertNoToken(t, dumpOf(t, ns, "pay"), te.tokens())
}

// A deleted Destination's cached token source is dropped by the destination validator (it would never be used
// again: a re-created Destination of the same name fetches its own token); a live one's stays.
func TestDeletedDestinationForgetsItsToken(t *testing.T) {
	te := newTokenEndpoint(t)
	ns := env.Namespace(t)
	loopback := egress.New(egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	tokens := httpexec.NewTokenCache(httpexec.New(httpexec.WithEgressPolicy(loopback)).TokenClient)
	cc := httpexec.ClientCredentials{TokenURL: te.URL + "/oauth2/token", ClientID: oauthClientID, ClientSecret: oauthClientSecret,
		Scopes: []string{"orders:write"}}
	live, gone := "Destination/"+ns+"/live", "Destination/"+ns+"/gone"
	for _, owner := range []string{live, gone} {
		if _, err := tokens.Token(context.Background(), owner, cc); err != nil {
			t.Fatal(err)
		}
	}
	env.CreateDestination(t, ns, "live", te.URL, nil)
	r := &controller.DestinationReconciler{Client: env.Client, APIReader: env.Client, Exprs: expr.NewCache(8), Tokens: tokens}
	for _, name := range []string{"live", "gone"} {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
			t.Fatalf("reconciling %s: %v", name, err)
		}
	}
	if tokens.Cached(gone) || !tokens.Cached(live) {
		t.Errorf("after the reconciles: gone cached %v (want false), live cached %v (want true)", tokens.Cached(gone), tokens.Cached(live))
	}
}
