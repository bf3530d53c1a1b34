//go:build !unit

package controller_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// signedRequest is what a verifying destination received.
type signedRequest struct {
	header   http.Header
	body     string
	verified bool
}

// verifyingServer answers 401 to a request that verify refuses; otherwise the n-th verified request gets
// statuses[n] (201 after the list), so that a test can make the first attempt fail.
func verifyingServer(t *testing.T, verify func(h http.Header, body []byte) bool, statuses ...int) (string, func() []signedRequest) {
	t.Helper()
	var mu sync.Mutex
	var got []signedRequest
	verifiedN := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ok := verify(r.Header, body)
		mu.Lock()
		got = append(got, signedRequest{header: r.Header.Clone(), body: string(body), verified: ok})
		code := http.StatusCreated
		if ok {
			if verifiedN < len(statuses) {
				code = statuses[verifiedN]
			}
			verifiedN++
		}
		mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"bad signature"}`)
			return
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, func() []signedRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]signedRequest(nil), got...)
	}
}

func signingDestination(t *testing.T, ns, name, url, secret string, signing *actionsv1alpha1.SigningConfig) {
	t.Helper()
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-signing"},
		StringData: map[string]string{"secret": secret}})
	env.CreateDestination(t, ns, name, url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Signing = signing
		three := int32(3)
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: &three, InitialBackoff: durationp(1100 * time.Millisecond),
			MaxBackoff: durationp(2 * time.Second), Jitter: actionsv1alpha1.JitterNone}
	})
}

// Standard Webhooks: the destination verifies with the specification's own library. webhook-id is the
// idempotency key; a 503 and its retry carry different timestamps, both verify, over the same body. A
// destination holding another secret refuses the signature (401) and the ledger records the rejection.
func TestStandardWebhooksSignedAttempts(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a-32-byte-signing-key-for-tests!"))
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	url, got := verifyingServer(t, func(h http.Header, body []byte) bool { return verifier.Verify(body, h) == nil },
		http.StatusServiceUnavailable)
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	signing := func(name string) *actionsv1alpha1.SigningConfig {
		return &actionsv1alpha1.SigningConfig{StandardWebhooks: &actionsv1alpha1.StandardWebhooksSigning{
			SecretRef: actionsv1alpha1.SecretKeySelector{Name: name + "-signing", Key: "secret"}}}
	}
	signingDestination(t, ns, "hooks", url, secret+"\n", signing("hooks"))
	env.Create(t, envtestutil.Action(ns, "order-19", "hooks", "/events", `{"type":"order.paid","id":19}`))
	xa := env.WaitPhase(t, ns, "order-19", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	reqs := got()
	if len(reqs) != 2 || !reqs[0].verified || !reqs[1].verified {
		t.Fatalf("requests %+v: want two verified attempts (503, then 201)", reqs)
	}
	if id := reqs[0].header.Get("webhook-id"); id != xa.Status.IdempotencyKey || reqs[1].header.Get("webhook-id") != id {
		t.Errorf("webhook-id %q and %q, want the idempotency key %q", id, reqs[1].header.Get("webhook-id"), xa.Status.IdempotencyKey)
	}
	if reqs[0].header.Get("webhook-timestamp") == reqs[1].header.Get("webhook-timestamp") ||
		reqs[0].header.Get("webhook-signature") == reqs[1].header.Get("webhook-signature") {
		t.Errorf("both attempts carry timestamp %s: each attempt must be signed anew", reqs[0].header.Get("webhook-timestamp"))
	}
	if reqs[0].body != reqs[1].body || reqs[0].body != `{"id":19,"type":"order.paid"}` {
		t.Errorf("bodies %q and %q: want the same canonical body", reqs[0].body, reqs[1].body)
	}

	// Another secret at the sender: the destination refuses every signature and the action is Failed (401).
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another-32-byte-key-for-tests!!!"))
	signingDestination(t, ns, "wrong", url, other, signing("wrong"))
	env.Create(t, envtestutil.Action(ns, "order-20", "wrong", "/events", `{"type":"order.paid","id":20}`))
	failed := env.WaitPhase(t, ns, "order-20", actionsv1alpha1.PhaseFailed, 30*time.Second)
	if failed.Status.Response == nil || failed.Status.Response.StatusCode != http.StatusUnauthorized || failed.Status.Attempts != 1 {
		t.Errorf("status %s: want one attempt rejected with 401", envtestutil.JSON(failed.Status))
	}
	if r := got(); len(r) != 3 || r[2].verified {
		t.Errorf("requests %+v: want a third, refused request", r)
	}
	if dump := dumpOf(t, ns, "order-19", "order-20"); strings.Contains(dump, secret[len("whsec_"):]) || strings.Contains(dump, "webhook-signature") {
		t.Errorf("a secret or signature shows in status or events: %s", dump)
	}
}

// signing.hmac: the destination recomputes prefix + hex(HMAC(key, payload)) over the bytes it received, with
// SHA-256 (GitHub's "sha256=" form) and SHA-512; a wrong key is refused. With payload KeyTimestampBody the
// signed string is "<Idempotency-Key>.<X-Signature-Timestamp>.<body>" (docs/auth.md), with Body the body.
func TestHMACSignedAttempts(t *testing.T) {
	const key = "hmac-key-7f3e9a1c"
	env.StartManager(t, app.Options{})
	ns := env.Namespace(t)
	body, bound := actionsv1alpha1.HMACPayloadBody, actionsv1alpha1.HMACPayloadKeyTimestampBody
	for _, tc := range []struct {
		name, header, prefix string
		payload              actionsv1alpha1.HMACPayload
		algorithm            actionsv1alpha1.HMACAlgorithm
		h                    func() hash.Hash
		senderKey            string
		want                 actionsv1alpha1.Phase
	}{
		{"github", "X-Hub-Signature-256", "sha256=", body, actionsv1alpha1.HMACSHA256, sha256.New, key, actionsv1alpha1.PhaseSucceeded},
		{"sha512", "X-Signature", "", body, actionsv1alpha1.HMACSHA512, sha512.New, key, actionsv1alpha1.PhaseSucceeded},
		{"wrong-key", "X-Hub-Signature-256", "sha256=", body, actionsv1alpha1.HMACSHA256, sha256.New, "not-the-key-1234", actionsv1alpha1.PhaseFailed},
		{"key-timestamp-body", "X-Signature", "sha256=", bound, actionsv1alpha1.HMACSHA256, sha256.New, key, actionsv1alpha1.PhaseSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, got := verifyingServer(t, func(h http.Header, body []byte) bool {
				m := hmac.New(tc.h, []byte(key))
				if tc.payload == bound {
					if h.Get("Idempotency-Key") != ns+"/"+tc.name || h.Get("X-Signature-Timestamp") == "" {
						return false
					}
					m.Write([]byte(h.Get("Idempotency-Key") + "." + h.Get("X-Signature-Timestamp") + "."))
				} else if h.Get("X-Signature-Timestamp") != "" {
					return false
				}
				m.Write(body)
				return hmac.Equal([]byte(h.Get(tc.header)), []byte(tc.prefix+hex.EncodeToString(m.Sum(nil))))
			})
			signingDestination(t, ns, tc.name, url, tc.senderKey, &actionsv1alpha1.SigningConfig{HMAC: &actionsv1alpha1.HMACSigning{
				Header: tc.header, Prefix: tc.prefix, Algorithm: tc.algorithm, Payload: tc.payload,
				SecretRef: actionsv1alpha1.SecretKeySelector{Name: tc.name + "-signing", Key: "secret"}}})
			env.Create(t, envtestutil.Action(ns, tc.name, tc.name, "/hook", `{"b":[1,2],"a":"x"}`))
			xa := env.WaitPhase(t, ns, tc.name, tc.want, 30*time.Second)
			if r := got(); len(r) != 1 || r[0].body != `{"a":"x","b":[1,2]}` || r[0].verified != (tc.want == actionsv1alpha1.PhaseSucceeded) {
				t.Errorf("requests %+v, status %s", r, envtestutil.JSON(xa.Status))
			}
		})
	}
}
