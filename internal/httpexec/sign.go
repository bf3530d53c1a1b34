package httpexec

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Signer adds a signature over one request to its header. Implementations are pure and safe for concurrent
// use; a request is signed anew for each attempt.
type Signer interface {
	// Sign sets the signature headers of a request whose body is exactly body (nil: no body), whose
	// message id is id (the idempotency key) and which is signed at now.
	Sign(h http.Header, id string, body []byte, now time.Time) error
}

// StandardWebhooks signs as the Standard Webhooks specification defines (https://www.standardwebhooks.com,
// "Signature scheme"): webhook-id is the message id, webhook-timestamp the signing time in Unix seconds, and
// webhook-signature "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)). The signature is
// made by the specification's own Go library.
type StandardWebhooks struct {
	wh *standardwebhooks.Webhook
}

// NewStandardWebhooks returns a signer for secret: base64 (standard encoding, with padding) of the key bytes,
// optionally prefixed with "whsec_", as the specification's libraries accept it. The error never contains
// the secret.
func NewStandardWebhooks(secret string) (*StandardWebhooks, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, errors.New("the Standard Webhooks secret is not base64 (optionally prefixed with whsec_)")
	}
	return &StandardWebhooks{wh: wh}, nil
}

// Sign sets webhook-id, webhook-timestamp and webhook-signature.
func (s *StandardWebhooks) Sign(h http.Header, id string, body []byte, now time.Time) error {
	sig, err := s.wh.Sign(id, now, body)
	if err != nil {
		return fmt.Errorf("signing the request (Standard Webhooks): %w", err)
	}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return nil
}

// HMAC puts prefix + lower-case hex(HMAC(key, body)) (RFC 2104, over the exact body bytes sent; an empty
// body for a request without one) into one header, as GitHub's X-Hub-Signature-256 ("sha256=<hex>") does.
type HMAC struct {
	header, prefix string
	key            []byte
	hash           func() hash.Hash
}

// NewHMAC returns an HMAC signer; algorithm is "sha256" (also for "") or "sha512".
func NewHMAC(header, algorithm, prefix string, key []byte) (*HMAC, error) {
	s := &HMAC{header: header, prefix: prefix, key: append([]byte(nil), key...)}
	switch algorithm {
	case "", "sha256":
		s.hash = sha256.New
	case "sha512":
		s.hash = sha512.New
	default:
		return nil, fmt.Errorf("unknown HMAC algorithm %q: use sha256 or sha512", algorithm)
	}
	return s, nil
}

// Sign sets the signature header; id and now are not part of the signature.
func (s *HMAC) Sign(h http.Header, _ string, body []byte, _ time.Time) error {
	m := hmac.New(s.hash, s.key)
	_, _ = m.Write(body)
	h.Set(s.header, s.prefix+hex.EncodeToString(m.Sum(nil)))
	return nil
}
