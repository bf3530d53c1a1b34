package httpexec

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The Standard Webhooks signature verifies with the specification's own verifier, under the whsec_ form and
// the bare base64 form of the secret; another secret, another body or another id does not verify.
func TestStandardWebhooksSignature(t *testing.T) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	body := []byte(`{"amount":100,"currency":"EUR"}`)
	now := time.Now()
	for _, form := range []string{secret, secret[len("whsec_"):]} {
		s, err := NewStandardWebhooks(form)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		if err := s.Sign(h, "shop/order-19", body, now); err != nil {
			t.Fatal(err)
		}
		if h.Get("webhook-id") != "shop/order-19" || h.Get("webhook-timestamp") != strconv.FormatInt(now.Unix(), 10) ||
			len(h.Get("webhook-signature")) < 4 || h.Get("webhook-signature")[:3] != "v1," {
			t.Fatalf("headers %v: want webhook-id, webhook-timestamp and a v1 signature", h)
		}
		verifier, _ := standardwebhooks.NewWebhook(secret)
		if err := verifier.Verify(body, h); err != nil {
			t.Errorf("the library's verifier refuses our signature: %v", err)
		}
		if err := verifier.Verify([]byte(`{"amount":1000,"currency":"EUR"}`), h); err == nil {
			t.Error("another body verified")
		}
		other, _ := standardwebhooks.NewWebhook(base64.StdEncoding.EncodeToString([]byte("another-secret-another-secret!!!")))
		if err := other.Verify(body, h); err == nil {
			t.Error("another secret verified")
		}
	}
	if _, err := NewStandardWebhooks("whsec_not base64!"); err == nil {
		t.Error("a secret that is not base64 was accepted")
	}
}

// With the body-only payload the HMAC signature is prefix + hex(HMAC(key, body)) over the exact bytes, with
// SHA-256 or SHA-512, and no timestamp header is sent.
func TestHMACSignature(t *testing.T) {
	key := []byte("hmac-key-3c9d7e21")
	body := []byte(`{"n":1}`)
	for _, tc := range []struct {
		algorithm, prefix string
		h                 func() hash.Hash
	}{
		{"sha256", "sha256=", sha256.New},
		{"", "", sha256.New},
		{"sha512", "sha512=", sha512.New},
	} {
		s, err := NewHMAC(HMACOptions{Header: "X-Signature", Algorithm: tc.algorithm, Prefix: tc.prefix}, key)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		_ = s.Sign(h, "ignored", body, time.Now())
		m := hmac.New(tc.h, key)
		m.Write(body)
		if want := tc.prefix + hex.EncodeToString(m.Sum(nil)); h.Get("X-Signature") != want || len(h) != 1 {
			t.Errorf("%s: headers %v, want only X-Signature %q", tc.algorithm, h, want)
		}
	}
	if _, err := NewHMAC(HMACOptions{Header: "X-Signature", Algorithm: "md5"}, key); err == nil {
		t.Error("md5 accepted")
	}
}

// Row 7 of issue 23: with the key-and-time payload the same body signed under two idempotency keys, or at two
// times, gets two signatures, so a signature read from one request does not verify for another key. The
// signature is hex(HMAC(key, "<id>.<unix seconds>.<body>")) and the seconds are in the timestamp header. With
// the body-only payload (the form every signing.hmac had before) the two keys share one signature.
func TestHMACSignatureBindsKeyAndTime(t *testing.T) {
	key := []byte("hmac-key-3c9d7e21")
	body := []byte(`{"amount":100}`)
	at := time.Unix(1767225600, 0)
	bound, err := NewHMAC(HMACOptions{Header: "X-Signature", Prefix: "sha256=", TimestampHeader: "X-Signature-Timestamp"}, key)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(s Signer, id string, now time.Time) http.Header {
		h := http.Header{}
		if err := s.Sign(h, id, body, now); err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b := sign(bound, "shop/order-19", at), sign(bound, "shop/order-20", at)
	if a.Get("X-Signature") == b.Get("X-Signature") {
		t.Errorf("the same body under two keys got one signature %q", a.Get("X-Signature"))
	}
	if later := sign(bound, "shop/order-19", at.Add(time.Hour)); later.Get("X-Signature") == a.Get("X-Signature") {
		t.Errorf("the same key and body an hour later got the same signature %q", a.Get("X-Signature"))
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("shop/order-19.1767225600." + string(body)))
	if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); a.Get("X-Signature") != want || a.Get("X-Signature-Timestamp") != "1767225600" {
		t.Errorf("headers %v, want X-Signature %q and X-Signature-Timestamp 1767225600", a, want)
	}

	bodyOnly, err := NewHMAC(HMACOptions{Header: "X-Signature", Prefix: "sha256="}, key)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := sign(bodyOnly, "shop/order-19", at), sign(bodyOnly, "shop/order-20", at.Add(time.Hour)); a.Get("X-Signature") != b.Get("X-Signature") {
		t.Errorf("body only: two signatures %q and %q, want one (the body alone is signed)", a.Get("X-Signature"), b.Get("X-Signature"))
	}
}

// The receiver's recipe in docs/auth.md ("Verifying a KeyTimestampBody signature") recomputes the signature
// that the signer sent, run as the docs show it (sh and openssl) over a body, key, timestamp and secret.
func TestHMACVerificationRecipeInDocs(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("openssl is a prerequisite of make test (README, Two commands: apt-get install openssl): %v", err)
	}
	recipe := docsRecipe(t, "../../docs/auth.md", "# verify a signing.hmac KeyTimestampBody signature")
	secret := "hmac-key-3c9d7e21" //nolint:gosec // G101: a test key
	body := []byte(`{"amount":100,"note":"a b\nc"}`)
	s, err := NewHMAC(HMACOptions{Header: "X-Signature", Prefix: "sha256=", TimestampHeader: "X-Signature-Timestamp"}, []byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	if err := s.Sign(h, "shop/order-19", body, time.Now()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "body"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "sh", "-c", recipe)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SECRET="+secret, "KEY=shop/order-19", "TS="+h.Get("X-Signature-Timestamp"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the recipe failed: %v\n%s", err, out)
	}
	if got, want := "sha256="+strings.TrimSpace(string(out)), h.Get("X-Signature"); got != want {
		t.Errorf("the recipe computes %q, the signer sent %q", got, want)
	}
}

// docsRecipe returns the fenced code block of the file at path (relative to this package) whose first line is
// first.
func docsRecipe(t *testing.T, path, first string) string {
	t.Helper()
	doc, err := os.ReadFile(path) //nolint:gosec // a file of the repository named by the test
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(doc), "```")[1:] {
		if _, code, ok := strings.Cut(block, "\n"); ok && strings.HasPrefix(code, first+"\n") {
			return code
		}
	}
	t.Fatalf("%s has no code block starting with %q", path, first)
	return ""
}
