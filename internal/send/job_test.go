package send_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/internal/scheme"
	"github.com/actionledger/actionledger/internal/send"
)

// seen is one request as the destination received it.
type seen struct {
	method, path, key, auth, ctype string
}

// oauthServer is a token endpoint that issues tok-1, tok-2, ... and a destination on the same loopback server
// that refuses the first token with a 401 and answers any later one 201 with the Authorization header echoed in
// its body (so that redaction shows).
type oauthServer struct {
	*httptest.Server
	mu     sync.Mutex
	issued int
	got    []seen
}

func newOAuthServer(t *testing.T) *oauthServer {
	t.Helper()
	s := &oauthServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/token" {
			s.issued++
			_, _ = fmt.Fprintf(w, `{"access_token":"tok-%d-9f3a2c","token_type":"Bearer","expires_in":3600}`, s.issued)
			return
		}
		auth := r.Header.Get("Authorization")
		s.got = append(s.got, seen{method: r.Method, path: r.URL.Path, key: r.Header.Get("Idempotency-Key"), auth: auth,
			ctype: r.Header.Get("Content-Type")})
		if auth == "Bearer tok-1-9f3a2c" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"seen":%q}`, auth) //nolint:gosec // G705: echoing is the point
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *oauthServer) requests() ([]seen, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.got...), s.issued
}

// resolved is the Destination ns/orders at srv with OAuth2 client credentials and a post-check, resolved and with
// its credentials loaded as the controller does right before a request; the executor is the real one, allowed
// to reach loopback.
func resolved(t *testing.T, srv *oauthServer, exec httpexec.Executor) *destination.Resolved {
	t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "client"},
		Data: map[string][]byte{"id": []byte("orders-client"), "secret": []byte("cs-4b7e1d9a2f60")}}
	d := &actionsv1alpha1.Destination{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders"},
		Spec: actionsv1alpha1.DestinationSpec{URL: srv.URL,
			Auth: &actionsv1alpha1.AuthConfig{OAuth2: &actionsv1alpha1.OAuth2ClientCredentials{TokenURL: srv.URL + "/token",
				ClientID:     actionsv1alpha1.SecretKeySelector{Name: "client", Key: "id"},
				ClientSecret: actionsv1alpha1.SecretKeySelector{Name: "client", Key: "secret"}}},
			Reconciliation: &actionsv1alpha1.ReconciliationCheck{Path: "/orders/{name}", Applied: "response.statusCode == 201",
				NotApplied: "response.statusCode >= 400"}}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(sec, d).Build()
	r := &destination.Resolver{Client: c, Secrets: c, Executor: exec, Clock: clock.RealClock{}}
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pay-1"}}
	xa.Spec.DestinationRef.Name = "orders"
	dest, err := r.Resolve(context.Background(), xa)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.LoadCredentials(context.Background(), dest); err != nil {
		t.Fatal(err)
	}
	return dest
}

// claimed is the action ns/pay-1 (key ns/pay-1) with attempt 1 claimed, and its dead-letter record's delivery
// attempt 1 claimed under key ns/pay-1/dead-letter.
func claimed(now time.Time) *actionsv1alpha1.ExternalAction {
	claim := &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "h", StartedAt: metav1.NewTime(now),
		ExpiresAt: metav1.NewTime(now.Add(time.Minute))}
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pay-1"}}
	xa.Spec.Request = actionsv1alpha1.ActionRequest{Method: http.MethodPut, Path: "/orders"}
	xa.Status.IdempotencyKey, xa.Status.Claim = "ns/pay-1", claim
	xa.Status.DeadLetter = &actionsv1alpha1.DeadLetterStatus{Sink: "Destination/ns/orders", IdempotencyKey: "ns/pay-1/dead-letter",
		State: actionsv1alpha1.DeadLetterDelivering, Attempts: 1, Claim: claim.DeepCopy()}
	return xa
}

// Every kind of job leaves through the one seam: the same destination auth (an OAuth2 token), the key in the
// destination's key header, the same drop of a token the destination refuses with a 401, the same redaction; what
// differs is data (method, target, body, key, how the answer is read, which Result fields carry it). A refused
// token makes an attempt and a dead-letter delivery Retryable (the next request gets a new token) and a
// post-check inconclusive; the request after it, with the new token, succeeds.
func TestEveryKindOfJobLeavesThroughOneSeam(t *testing.T) {
	env := ledger.Env{Now: time.Now(), Policy: retry.Policy{MaxAttempts: 3, RetryOnStatus: retry.DefaultRetryOnStatus()}}
	for _, c := range []struct {
		name                     string
		job                      func(s *send.Sender, xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved) dispatch.Job[*send.Result]
		method, path, key, ctype string
		refused, accepted        func(p *send.Result) bool
		// claimed: the results carry the claim write's copy (Result.Claimed), for recording over it.
		claimed bool
	}{
		{name: "attempt", claimed: true, method: http.MethodPut, path: "/orders", key: "ns/pay-1", ctype: "application/json",
			job: func(s *send.Sender, xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved) dispatch.Job[*send.Result] {
				return s.Job(xa, dest, dest.Spec.URL+"/orders", []byte(`{"n":1}`), env, time.Second)
			},
			refused: func(p *send.Result) bool {
				return p.Outcome.Class == retry.ClassRetryable && p.Outcome.StatusCode == 401 && !p.DeadLetter && p.Check == nil
			},
			accepted: func(p *send.Result) bool {
				return p.Outcome.Class == retry.ClassSuccess && p.Outcome.Response != nil &&
					p.Outcome.Response.Body == `{"seen":"[REDACTED]"}`
			}},
		{name: "unclaimed attempt", method: http.MethodPut, path: "/orders", key: "ns/pay-1", ctype: "application/json",
			job: func(s *send.Sender, xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved) dispatch.Job[*send.Result] {
				return s.UnclaimedJob(xa, dest, dest.Spec.URL+"/orders", []byte(`{"n":1}`), env, time.Second)
			},
			refused: func(p *send.Result) bool {
				return p.Outcome.Class == retry.ClassRetryable && p.Outcome.StatusCode == 401 && p.Unclaimed != nil
			},
			accepted: func(p *send.Result) bool { return p.Outcome.Class == retry.ClassSuccess && p.Unclaimed != nil }},
		{name: "post-check", method: http.MethodGet, path: "/orders/pay-1", key: "ns/pay-1",
			job: func(s *send.Sender, xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved) dispatch.Job[*send.Result] {
				target, err := send.CheckTarget(xa, dest)
				if err != nil {
					t.Fatal(err)
				}
				return s.CheckJob(xa, dest, target, env)
			},
			refused: func(p *send.Result) bool {
				return p.Check != nil && p.Check.Verdict == ledger.VerdictInconclusive && p.Check.Rec == nil
			},
			accepted: func(p *send.Result) bool {
				return p.Check != nil && p.Check.Verdict == ledger.VerdictApplied && p.Check.Rec.Body == `{"seen":"[REDACTED]"}`
			}},
		{name: "dead-letter delivery", method: http.MethodPost, path: "/dead-letters", key: "ns/pay-1/dead-letter",
			ctype: "application/cloudevents+json",
			job: func(s *send.Sender, xa *actionsv1alpha1.ExternalAction, dest *destination.Resolved) dispatch.Job[*send.Result] {
				h := http.Header{"Content-Type": {"application/cloudevents+json"}}
				return s.DeadLetterJob(xa, dest, dest.Spec.URL+"/dead-letters", h, []byte(`{"id":"ns/pay-1/dead-letter"}`), env)
			},
			refused: func(p *send.Result) bool {
				return p.DeadLetter && p.Outcome.Class == retry.ClassRetryable && p.Outcome.StatusCode == 401
			},
			accepted: func(p *send.Result) bool { return p.DeadLetter && p.Outcome.Class == retry.ClassSuccess }},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newOAuthServer(t)
			exec := httpexec.New(httpexec.WithEgressPolicy(egress.New(egress.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})))
			dest := resolved(t, srv, exec)
			s := &send.Sender{Executor: exec, Exprs: expr.NewCache(8), Clock: clock.RealClock{}}
			xa := claimed(time.Now())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if p := c.job(s, xa, dest).Run(ctx); !c.refused(p) {
				t.Errorf("first request (token refused): %+v %+v", p.Outcome, p.Check)
			}
			p := c.job(s, xa, dest).Run(ctx)
			if !c.accepted(p) {
				t.Errorf("second request (new token): %+v %+v", p.Outcome, p.Check)
			}
			if q := c.job(s, xa, dest).NotRun(errors.New("stopping")); (p.Claimed == xa) != c.claimed || (q.Claimed == xa) != c.claimed ||
				(!c.claimed && (p.Claimed != nil || q.Claimed != nil)) {
				t.Errorf("Result.Claimed %p (run), %p (not run); want the claimed copy %p: %v", p.Claimed, q.Claimed, xa, c.claimed)
			}
			got, issued := srv.requests()
			if issued != 2 || len(got) != 2 || got[0].auth != "Bearer tok-1-9f3a2c" || got[1].auth != "Bearer tok-2-9f3a2c" {
				t.Fatalf("%d tokens issued, requests %+v: want the refused token dropped and a new one fetched", issued, got)
			}
			for _, r := range got {
				if r.method != c.method || r.path != c.path || r.key != c.key || !strings.HasPrefix(r.ctype, c.ctype) {
					t.Errorf("request %+v, want %s %s with key %q and Content-Type %q", r, c.method, c.path, c.key, c.ctype)
				}
			}
		})
	}
}

// Every job says what its send will hold (dispatch.Job.Bytes, taken from the byte budget before it is sent): the
// request body, the copies of the response body it keeps (more for an action with outputs, which read up to
// MaxOutputResponseBytes), and the connection's buffers.
func TestJobsCountTheBytesTheirSendHolds(t *testing.T) {
	srv := newOAuthServer(t)
	exec := httpexec.New()
	dest := resolved(t, srv, exec)
	s := &send.Sender{Executor: exec, Exprs: expr.NewCache(8), Clock: clock.RealClock{}}
	env := ledger.Env{Now: time.Now(), Policy: retry.Policy{MaxAttempts: 3}}
	xa := claimed(time.Now())
	plain := s.Job(xa, dest, dest.Spec.URL+"/orders", []byte(`{"n":1}`), env, time.Second).Bytes
	bigger := s.Job(xa, dest, dest.Spec.URL+"/orders", make([]byte, 100_000), env, time.Second).Bytes
	withOutputs := xa.DeepCopy()
	withOutputs.Spec.Outputs = &actionsv1alpha1.ActionOutputs{SecretName: "out", Values: map[string]actionsv1alpha1.OutputExpression{"id": "response.body.id"}}
	outputs := s.Job(withOutputs, dest, dest.Spec.URL+"/orders", []byte(`{"n":1}`), env, time.Second).Bytes
	if plain < 4*send.MaxResponseBodyBytes || bigger-plain != 100_000-7 || outputs < 4*actionsv1alpha1.MaxOutputResponseBytes {
		t.Errorf("Bytes: %d plain, %d with a 100,000-byte body, %d with outputs; want at least four copies of the kept body "+
			"plus the request body", plain, bigger, outputs)
	}
}
