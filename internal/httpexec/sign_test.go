package httpexec

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"net/http"
	"strconv"
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

// The HMAC signature is prefix + hex(HMAC(key, body)) over the exact bytes, with SHA-256 or SHA-512.
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
		s, err := NewHMAC("X-Signature", tc.algorithm, tc.prefix, key)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		_ = s.Sign(h, "ignored", body, time.Now())
		m := hmac.New(tc.h, key)
		m.Write(body)
		if want := tc.prefix + hex.EncodeToString(m.Sum(nil)); h.Get("X-Signature") != want {
			t.Errorf("%s: X-Signature %q, want %q", tc.algorithm, h.Get("X-Signature"), want)
		}
	}
	if _, err := NewHMAC("X-Signature", "md5", "", key); err == nil {
		t.Error("md5 accepted")
	}
}
